package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// rowColumns are the columns scanRow reads, in its order.
const rowColumns = `id, dispatch_key, namespace, task_queue, shard, payload, state, attempts, max_attempts, token,
	enqueued_at, run_at, claimed_at, lease_expires_at, finished_at, last_error, -claim_rank, headers, snoozes`

// scanRow scans rowColumns.
func scanRow(scan func(...any) error) (outbox.Row, error) {
	var r outbox.Row
	var state int
	var enqueued, runAt, claimed, leaseEnd, finished int64
	var headers []byte
	err := scan(&r.ID, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &r.Shard, &r.Payload, &state, &r.Attempts, &r.MaxAttempts,
		&r.Token, &enqueued, &runAt, &claimed, &leaseEnd, &finished, &r.LastError, &r.Priority, &headers, &r.Snoozes)
	if err == nil && len(headers) > 0 {
		r.Headers, err = outbox.DecodeHeaders(headers)
	}
	r.State = stateOf(state)
	if r.Payload == nil {
		r.Payload = []byte{} // nil is stored as empty; SQLite reads an empty blob back as NULL
	}
	r.EnqueuedAt, r.RunAt, r.ClaimedAt = fromNanos(enqueued), fromNanos(runAt), fromNanos(claimed)
	r.LeaseExpiresAt, r.FinishedAt = fromNanos(leaseEnd), fromNanos(finished)
	return r, err
}

// Get returns the row with dispatchKey as stored, whatever its state and
// shard, or an error matching outbox.ErrNotFound. A key no row can have
// (empty, not valid UTF-8, holding a NUL byte) is an
// *outbox.ArgumentError. A claimed row whose LeaseExpiresAt has passed is
// claimable again. One read statement.
func (s *Store) Get(ctx context.Context, dispatchKey string) (outbox.Row, error) {
	// A closed store and a done ctx are reported before a bad key, as by
	// every other call; the key is judged before read, which counts a
	// round trip.
	if err := s.ready(); err != nil {
		return outbox.Row{}, s.fail("Get", err)
	}
	if err := ctx.Err(); err != nil {
		return outbox.Row{}, s.fail("Get", err)
	}
	if err := call("Get").DispatchKey("dispatchKey", dispatchKey); err != nil {
		return outbox.Row{}, err
	}
	if err := s.read(ctx); err != nil {
		return outbox.Row{}, s.fail("Get", err)
	}
	r, err := scanRow(s.reader.QueryRowContext(ctx, `SELECT `+rowColumns+` FROM outbox WHERE dispatch_key = ?`, dispatchKey).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return outbox.Row{}, fmt.Errorf("sqlitestore: Get: %w: %q", outbox.ErrNotFound, dispatchKey)
	}
	if err != nil {
		return outbox.Row{}, s.fail("Get", err)
	}
	return r, nil
}

// Stats counts every row by state at one instant, judged on the store's
// clock: Pending + Scheduled + Claimed + Expired + Settled + Dead = Total.
// One read statement that scans the whole table: O(rows).
func (s *Store) Stats(ctx context.Context) (outbox.Stats, error) {
	if err := s.read(ctx); err != nil {
		return outbox.Stats{}, s.fail("Stats", err)
	}
	var st outbox.Stats
	err := s.reader.QueryRowContext(ctx, `
SELECT
	coalesce(sum(state = 0 AND ready_at <= ?1), 0),
	coalesce(sum(state = 0 AND ready_at > ?1), 0),
	coalesce(sum(state = 1 AND ready_at > ?1), 0),
	coalesce(sum(state = 1 AND ready_at <= ?1), 0),
	coalesce(sum(state = 2), 0),
	coalesce(sum(state = 3), 0),
	count(*)
FROM outbox`, nanos(s.now())).Scan(&st.Pending, &st.Scheduled, &st.Claimed, &st.Expired, &st.Settled, &st.Dead, &st.Total)
	if err != nil {
		return outbox.Stats{}, s.fail("Stats", err)
	}
	return st, nil
}

// ListDead returns dead rows in dispatch-key order: those after p.After,
// of p.Namespace when it is not "", at most p.Limit (0 means 100; 1 to
// 10,000, else an *outbox.ArgumentError, as is text no row can have in
// p.Namespace or p.After). Page by passing the last key
// returned as the next p.After. One read statement over an index of the
// dead rows alone: O(log rows + rows returned).
func (s *Store) ListDead(ctx context.Context, p outbox.ListDeadParams) ([]outbox.Row, error) {
	const op = "ListDead"
	if err := s.ready(); err != nil {
		return nil, s.fail(op, err)
	}
	limit, err := call(op).ListDead(p)
	if err != nil {
		return nil, err
	}
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	q := `SELECT ` + rowColumns + ` FROM outbox INDEXED BY outbox_dead_key
WHERE state = 3 AND dispatch_key > ?2 ORDER BY dispatch_key LIMIT ?3`
	if p.Namespace != "" {
		q = `SELECT ` + rowColumns + ` FROM outbox INDEXED BY outbox_dead
WHERE state = 3 AND namespace = ?1 AND dispatch_key > ?2 ORDER BY dispatch_key LIMIT ?3`
	}
	rows, err := s.reader.QueryContext(ctx, q, p.Namespace, p.After, limit)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	out := []outbox.Row{}
	for rows.Next() {
		r, err := scanRow(rows.Scan)
		if err != nil {
			return nil, s.fail(op, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// Requeue moves the dead rows among dispatchKeys back to pending, claimable
// at once, with Attempts reset to 0 (their LastError is kept), and returns
// how many it moved; keys that are not dead, or name no row, are left
// alone, and a key no row can have (empty, not valid UTF-8, holding a NUL
// byte) fails the call with an *outbox.ArgumentError. Subscribers are signalled when it moved any. One write
// transaction.
func (s *Store) Requeue(ctx context.Context, dispatchKeys []string) (int, error) {
	const op = "Requeue"
	if err := s.writable(); err != nil {
		return 0, s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := call(op).Keys(dispatchKeys); err != nil {
		return 0, err
	}
	if len(dispatchKeys) == 0 {
		return 0, nil
	}
	if err := outbox.CheckOperation(ctx, op); err != nil {
		return 0, err
	}
	arg, err := json.Marshal(dispatchKeys)
	if err != nil {
		return 0, s.fail(op, err)
	}
	var moved int
	var seq int64
	defer s.touched(nil) // rows put back to pending, in namespaces unknown here
	err = s.write(ctx, func(tx *sql.Tx) error {
		moved = 0
		if err := s.step(ctx); err != nil {
			return err
		}
		now := nanos(s.now())
		rows, err := tx.QueryContext(ctx, `
UPDATE outbox SET state = 0, attempts = 0, run_at = ?2, ready_at = ?2, finished_at = 0
WHERE dispatch_key IN (SELECT value FROM json_each(?1)) AND state = 3
RETURNING namespace, task_queue`, string(arg), now)
		if err != nil {
			return err
		}
		routes, err := movedRoutes(rows)
		if err != nil {
			return err
		}
		moved = len(routes)
		if moved == 0 {
			return s.recordAudit(ctx, tx, outbox.RowsAudit(ctx, outbox.ActionRequeue, dispatchKeys, 0, ""))
		}
		routeArg, err := json.Marshal(routes)
		if err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO outbox_routes (namespace, task_queue)
SELECT DISTINCT value->>0, value->>1 FROM json_each(?1) WHERE true
ON CONFLICT DO NOTHING`, string(routeArg)); err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, bumpSeqSQL, s.dbID).Scan(&seq); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx, outbox.RowsAudit(ctx, outbox.ActionRequeue, dispatchKeys, moved, soleNamespace(routes)))
	})
	if err != nil {
		return 0, s.fail(op, err)
	}
	if moved > 0 {
		s.subs.committed(seq)
	}
	return moved, nil
}

// movedRoutes reads the (namespace, task queue) of each row rows returns,
// and closes rows.
func movedRoutes(rows *sql.Rows) ([][2]string, error) {
	defer rows.Close()
	var routes [][2]string
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			return nil, err
		}
		routes = append(routes, r)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	return routes, rows.Err()
}

// PurgeSettled deletes up to limit rows settled before before, oldest
// first, in one short write transaction, and returns how many it deleted:
// call it until it returns less than limit. A negative limit fails with an
// *outbox.ArgumentError; 0 returns 0 without a round trip. Dead rows are never touched. A purged key may be
// enqueued again, and a completion naming it reports its lease lost. Cost:
// O(log rows + limit) over an index of the settled and dead rows.
func (s *Store) PurgeSettled(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.purge(ctx, "PurgeSettled", stateSettled, before, limit)
}

// PurgeDead deletes up to limit rows dead-lettered before before, as
// PurgeSettled does for settled rows.
func (s *Store) PurgeDead(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.purge(ctx, "PurgeDead", stateDead, before, limit)
}

func (s *Store) purge(ctx context.Context, op string, state int, before time.Time, limit int) (int, error) {
	if err := s.writable(); err != nil {
		return 0, s.fail(op, err)
	}
	if err := call(op).PurgeLimit(limit); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if limit == 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.step(ctx); err != nil {
			return err
		}
		// state >= 2 restates the partial index's condition, so SQLite
		// may use it.
		res, err := tx.ExecContext(ctx, `
DELETE FROM outbox WHERE id IN (
	SELECT id FROM outbox INDEXED BY outbox_finished
	WHERE state = ?1 AND state >= 2 AND finished_at < ?2
	ORDER BY finished_at, id LIMIT ?3)`, state, nanos(before), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.fail(op, err)
	}
	return int(n), nil
}
