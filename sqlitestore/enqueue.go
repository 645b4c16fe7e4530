package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Enqueue inserts msgs in one transaction, all or none, and returns how many
// it inserted: a message whose dispatch key already exists (in the store, in
// any state, or earlier in msgs) is ignored, so enqueueing is idempotent.
// Each row is placed on backpressure.ShardFor(DispatchKey, ShardCount),
// pending, claimable from its RunAt (at once when RunAt is zero or past),
// with the message's MaxAttempts or else the store's.
//
// A batch with an invalid message (see outbox.Message.Validate) fails with
// an *outbox.MessageError before the database is touched: nothing is
// written. A batch that would leave a namespace over its
// Options.PendingCaps cap fails with an *outbox.PendingCapError (matching
// outbox.ErrPendingCap), nothing written. Subscribers are signalled once
// the transaction commits. Cost: one write transaction, O(len(msgs)) index
// inserts.
func (s *Store) Enqueue(ctx context.Context, msgs []outbox.Message) (inserted int, err error) {
	if err := s.writable(); err != nil {
		return 0, s.fail("Enqueue", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := call("Enqueue").Messages(msgs); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	var seq int64
	err = s.write(ctx, func(tx *sql.Tx) (err error) {
		inserted, seq, err = s.enqueueIn(ctx, tx, "Enqueue", msgs)
		return err
	})
	s.touched(msgs) // committed, or perhaps (err): read their counts again
	if err != nil {
		return 0, s.fail("Enqueue", err)
	}
	if inserted > 0 {
		s.subs.committed(seq)
	} else {
		s.subs.passed(seq) // nothing new: the poller need not signal it
	}
	return inserted, nil
}

// EnqueueTx inserts msgs as Enqueue does, but in tx, a transaction the
// caller began on the store's database (for a store from New, on the same
// *sql.DB), so the rows commit or roll back with the caller's own writes:
// they exist exactly when tx commits. Until then they are invisible to
// every count, claim, Get and Stats of every other connection. Dedup
// applies within tx too (a key tx already inserted is skipped).
//
// EnqueueTx takes SQLite's write lock for tx (if tx does not hold it yet,
// waiting with the busy timeout), and tx keeps it until it ends: SQLite has
// one writer at a time. While tx is open, the store's reads (the counts,
// Get, Stats, ListDead) go on, seeing the outbox without tx's rows, but
// every write of every other connection waits for tx, the store's claims
// and completions included, and fails with SQLITE_BUSY (changing nothing)
// once it has waited the busy timeout. So a dispatcher's sweep stalls for
// as long as an application transaction holds the write lock, whether or
// not it enqueued: keep write transactions short.
//
// Errors: an *outbox.MessageError for an invalid message (nothing written);
// an *outbox.ArgumentError (matching outbox.ErrInvalidArgument) for a nil
// tx, a tx already committed or rolled back (it also matches
// sql.ErrTxDone), or a tx on a database that is not the store's; an
// *outbox.PendingCapError for a batch over a pending cap, after which tx is
// usable and holds none of the batch (a savepoint undid it). An error
// leaves tx as it was, bar what SQLite itself undid: the caller decides
// whether to roll back; none of msgs is left in tx. Subscribers in this process learn of the rows by
// polling (see Subscribe), since the store cannot see tx commit.
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, msgs []outbox.Message) (inserted int, err error) {
	if err := s.writable(); err != nil {
		return 0, s.fail("EnqueueTx", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, argError("EnqueueTx", "tx", "is nil")
	}
	if err := call("EnqueueTx").Messages(msgs); err != nil {
		return 0, err
	}
	if err := s.step(ctx); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	s.trips.Add(1)
	// A savepoint, so that a failure part-way leaves tx without any of
	// msgs. It touches no table: the first access is still bumpSeqSQL.
	if _, err := tx.ExecContext(ctx, `SAVEPOINT sqlitestore_enqueue`); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return 0, errors.Join(argError("EnqueueTx", "tx", "has already committed or rolled back"), sql.ErrTxDone)
		}
		return 0, s.fail("EnqueueTx", err)
	}
	inserted, _, err = s.enqueueIn(ctx, tx, "EnqueueTx", msgs)
	if err != nil {
		// A fresh context: the undo must run even when ctx is done.
		_, _ = tx.ExecContext(context.WithoutCancel(ctx), `ROLLBACK TO sqlitestore_enqueue`)
		_, _ = tx.ExecContext(context.WithoutCancel(ctx), `RELEASE sqlitestore_enqueue`)
		return 0, s.fail("EnqueueTx", err)
	}
	if _, err := tx.ExecContext(ctx, `RELEASE sqlitestore_enqueue`); err != nil {
		return 0, s.fail("EnqueueTx", err)
	}
	return inserted, nil
}

// bumpSeqSQL bumps enqueue_seq, only in the database whose identity is ?1,
// and returns its new value. It is the first statement of an enqueue: a
// write, so it takes the write lock before anything is read, and a check
// that the transaction is on the store's database.
const bumpSeqSQL = `
UPDATE outbox_meta SET value = value + 1
WHERE key = 'enqueue_seq' AND EXISTS (SELECT 1 FROM outbox_meta WHERE key = 'db_id' AND value = ?1)
RETURNING value`

// enqueueIn inserts msgs in tx and returns how many it inserted and the
// enqueue sequence number it took.
func (s *Store) enqueueIn(ctx context.Context, tx *sql.Tx, op string, msgs []outbox.Message) (inserted int, seq int64, err error) {
	if err := s.step(ctx); err != nil {
		return 0, 0, err
	}
	err = tx.QueryRowContext(ctx, bumpSeqSQL, s.dbID).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrTxDone):
		return 0, 0, errors.Join(argError(op, "tx", "has already committed or rolled back"), sql.ErrTxDone)
	case errors.Is(err, sql.ErrNoRows) || (err != nil && strings.Contains(err.Error(), "no such table")):
		return 0, 0, argError(op, "tx", "is on a database that is not the store's")
	case err != nil:
		return 0, 0, err
	}
	now := nanos(s.now())
	insert, err := tx.PrepareContext(ctx, `
INSERT INTO outbox (dispatch_key, namespace, task_queue, shard, payload, enqueued_at, run_at, ready_at, max_attempts, claim_rank, headers)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10)
ON CONFLICT (dispatch_key) DO NOTHING`)
	if err != nil {
		return 0, 0, err
	}
	defer insert.Close()
	addRoute, err := tx.PrepareContext(ctx, `INSERT INTO outbox_routes (namespace, task_queue) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	if err != nil {
		return 0, 0, err
	}
	defer addRoute.Close()
	routes := map[backpressure.Route]bool{}
	for _, m := range msgs {
		if err := s.step(ctx); err != nil {
			return 0, 0, err
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		runAt := max(now, nanos(m.RunAt))
		limit := m.MaxAttempts
		if limit == 0 {
			limit = s.maxAttempts
		}
		res, err := insert.ExecContext(ctx, m.DispatchKey, m.Namespace, m.TaskQueue,
			backpressure.ShardFor(m.DispatchKey, s.shardCount), payload, now, runAt, limit, -m.Priority, headersArg(m.Headers))
		if err != nil {
			return 0, 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, 0, err
		}
		inserted += int(n)
		r := m.Route()
		if n == 1 && !routes[r] {
			routes[r] = true
			if err := s.step(ctx); err != nil {
				return 0, 0, err
			}
			if _, err := addRoute.ExecContext(ctx, r.Namespace, r.TaskQueue); err != nil {
				return 0, 0, err
			}
		}
	}
	if err := s.checkPendingCaps(ctx, tx, op, msgs); err != nil {
		return 0, 0, err
	}
	return inserted, seq, nil
}

// headersArg is a message's headers as the headers column holds them: JSON
// text, or NULL for none.
func headersArg(h map[string]string) any {
	if b := outbox.EncodeHeaders(h); b != nil {
		return string(b)
	}
	return nil
}
