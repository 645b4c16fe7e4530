package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Settle marks the row with dispatchKey settled, if token is its current
// live claim's token. Otherwise it changes nothing and returns a
// *LeaseLostError (matching ErrLeaseLost): the row was settled or retried,
// or its lease expired (whether or not another claim took it since). A
// missing row returns ErrNotFound. A settled row is kept, with its attempts
// and last token, so exactly-once delivery can be audited; it is never
// claimed again. Settling a route's last unsettled row also drops the
// route from outbox_routes (one more index seek in the same transaction),
// so CountPendingOutboxRows never walks routes that are done; the next
// Enqueue on the route adds it back. One write transaction.
func (s *Store) Settle(ctx context.Context, dispatchKey string, token int64) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		now, id, err := s.liveClaim(ctx, tx, dispatchKey, token)
		if err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE outbox SET state = 2, settled_at = ?2 WHERE id = ?1`, id, now); err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, pruneRouteSQL, id)
		return err
	})
	return wrap("settle", err)
}

// Retry puts the row with dispatchKey back to pending, claimable again at
// now + delay, if token is its current live claim's token (a negative
// delay counts as 0; a delay reaching past 2262-04-11T23:47:16Z, the
// largest time the store holds, ends then rather than wrapping around to
// the past); otherwise it fails as Settle does and changes nothing. The
// row keeps its attempts, its place in its route (oldest first is by ID)
// and its last claim's token, which no longer settles it. One write
// transaction.
func (s *Store) Retry(ctx context.Context, dispatchKey string, token int64, delay time.Duration) error {
	delay = max(delay, 0)
	err := s.write(ctx, func(tx *sql.Tx) error {
		now, id, err := s.liveClaim(ctx, tx, dispatchKey, token)
		if err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		visible := addNanos(now, delay)
		_, err = tx.ExecContext(ctx, `UPDATE outbox SET state = 0, visible_at = ?2, ready_at = ?2 WHERE id = ?1`, id, visible)
		return err
	})
	return wrap("retry", err)
}

// pruneRouteSQL deletes the route of the row with id ?1 from outbox_routes
// when none of the route's rows is unsettled: one primary-key seek and one
// seek in the route index (whose partial condition holds only unsettled
// rows). Settle runs it in its write transaction; Enqueue, which adds a
// route with its first new row, is serialised with it by the write lock, so
// a route with an unsettled row is never missing.
const pruneRouteSQL = `
DELETE FROM outbox_routes
WHERE (namespace, task_queue) = (SELECT namespace, task_queue FROM outbox WHERE id = ?1)
  AND NOT EXISTS (
	SELECT 1 FROM outbox o
	WHERE o.namespace = outbox_routes.namespace AND o.task_queue = outbox_routes.task_queue AND o.state < 2)`

// liveClaim checks that token is the live claim of the row with dispatchKey
// and returns the time now and the row's id.
func (s *Store) liveClaim(ctx context.Context, tx *sql.Tx, dispatchKey string, token int64) (now, id int64, err error) {
	if err := s.step(ctx); err != nil {
		return 0, 0, err
	}
	now = nanos(s.now())
	var state State
	var current, readyAt int64
	err = tx.QueryRowContext(ctx, `SELECT id, state, token, ready_at FROM outbox WHERE dispatch_key = ?`, dispatchKey).
		Scan(&id, &state, &current, &readyAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, fmt.Errorf("%w: %q", ErrNotFound, dispatchKey)
	}
	if err != nil {
		return 0, 0, err
	}
	if state != StateClaimed || current != token || readyAt <= now {
		return 0, 0, &LeaseLostError{DispatchKey: dispatchKey, Token: token, CurrentToken: current, State: state,
			Expired: state == StateClaimed && current == token}
	}
	return now, id, nil
}

// wrap prefixes a store error with the operation, leaving the package's
// own typed errors as they are.
func wrap(op string, err error) error {
	var lost *LeaseLostError
	switch {
	case err == nil, errors.As(err, &lost), errors.Is(err, ErrNotFound):
		return err
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// Get returns the row with dispatchKey as stored and its state, or
// ErrNotFound. Row.Token is the current (or last) claim's token; a claimed
// row whose Row.LeaseExpiresAt has passed is claimable again. One read
// statement.
func (s *Store) Get(ctx context.Context, dispatchKey string) (Row, State, error) {
	if err := ctx.Err(); err != nil {
		return Row{}, 0, err
	}
	s.trips.Add(1)
	var r Row
	var state State
	var enqueued, claimed, leaseEnd int64
	err := s.reader.QueryRowContext(ctx, `
SELECT id, dispatch_key, namespace, task_queue, shard, payload, attempts, token,
       enqueued_at, claimed_at, lease_expires_at, state
FROM outbox WHERE dispatch_key = ?`, dispatchKey).Scan(
		&r.ID, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &r.Shard, &r.Payload, &r.Attempts, &r.Token,
		&enqueued, &claimed, &leaseEnd, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, 0, fmt.Errorf("%w: %q", ErrNotFound, dispatchKey)
	}
	if err != nil {
		return Row{}, 0, fmt.Errorf("sqlitestore: get: %w", err)
	}
	r.EnqueuedAt, r.ClaimedAt, r.LeaseExpiresAt = fromNanos(enqueued), fromNanos(claimed), fromNanos(leaseEnd)
	return r, state, nil
}

// Stats counts the rows in each state at one instant. Claimed + Expired +
// Pending + Delayed + Settled = Total.
type Stats struct {
	Pending  int // pending and visible: claimable now
	Delayed  int // pending, not visible until a retry delay passes
	Claimed  int // claimed with a live lease
	Expired  int // claimed, lease expired: claimable now
	Settled  int // settled
	Total    int // every row
	Attempts int // claims ever taken, summed over every row
}

// Stats counts every row by state for monitoring and auditing (e.g. that a
// run settled every row exactly once: Settled = Total). One read statement
// that scans the whole table: O(rows).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	s.trips.Add(1)
	var st Stats
	err := s.reader.QueryRowContext(ctx, `
SELECT
	coalesce(sum(state = 0 AND ready_at <= ?1), 0),
	coalesce(sum(state = 0 AND ready_at > ?1), 0),
	coalesce(sum(state = 1 AND ready_at > ?1), 0),
	coalesce(sum(state = 1 AND ready_at <= ?1), 0),
	coalesce(sum(state = 2), 0),
	count(*),
	coalesce(sum(attempts), 0)
FROM outbox`, nanos(s.now())).Scan(&st.Pending, &st.Delayed, &st.Claimed, &st.Expired, &st.Settled, &st.Total, &st.Attempts)
	if err != nil {
		return Stats{}, fmt.Errorf("sqlitestore: stats: %w", err)
	}
	return st, nil
}
