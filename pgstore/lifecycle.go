package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Settle marks the row settled, in one statement, if token is its current
// claim and the lease is still live. Otherwise it changes nothing and
// returns a [*LeaseLostError] (matching [ErrLeaseLost]) — the row was
// already settled or retried, or its lease expired, whether or not another
// claimer has taken it since — or [ErrNotFound] for an unknown key. An
// empty key, or one that is not valid UTF-8 or holds a NUL byte, is an
// [*ArgumentError], returned before touching the database. Settled
// rows are kept (see [Store.PurgeSettled]), so exactly-once can be audited.
// Cost: O(log n).
func (s *Store) Settle(ctx context.Context, dispatchKey string, token int64) error {
	const op = "Settle"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := checkKey(op, dispatchKey); err != nil {
		return err
	}
	return s.finish(ctx, op, dispatchKey, token, s.sql.settle)
}

// Retry puts a claimed row back to pending, claimable again after delay
// (0: at once), in one statement, if token is its current claim and the
// lease is still live; otherwise it returns errors as [Store.Settle] does.
// The row keeps its place: it is still oldest-first by enqueue order, and
// its next claim counts one more attempt. A negative delay, or a dispatch
// key Settle would reject, is an [*ArgumentError]. Cost: O(log n).
func (s *Store) Retry(ctx context.Context, dispatchKey string, token int64, delay time.Duration) error {
	const op = "Retry"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := checkKey(op, dispatchKey); err != nil {
		return err
	}
	if delay < 0 {
		return &ArgumentError{Op: op, Arg: "delay", Reason: fmt.Sprintf("%v is negative", delay)}
	}
	return s.finish(ctx, op, dispatchKey, token, s.sql.retry, delay.Microseconds())
}

// checkKey rejects, as Enqueue does, a dispatch key that no row can have:
// empty, not valid UTF-8, or holding a NUL byte (which PostgreSQL text
// cannot store, and would refuse as a parameter).
func checkKey(op, dispatchKey string) error {
	if reason := badText(dispatchKey, true); reason != "" {
		return &ArgumentError{Op: op, Arg: "dispatchKey", Reason: reason}
	}
	return nil
}

// finish runs the settle or retry statement, which reports whether it
// changed the row and whether the row exists.
func (s *Store) finish(ctx context.Context, op, dispatchKey string, token int64, sql string, args ...any) error {
	var done, found bool
	err := s.pool.QueryRow(ctx, sql, append([]any{s.clock(), dispatchKey, token}, args...)...).Scan(&done, &found)
	switch {
	case err != nil:
		return opError(op, err)
	case done:
		return nil
	case found:
		return &LeaseLostError{Op: op, DispatchKey: dispatchKey, Token: token}
	default:
		return fmt.Errorf("pgstore: %s: %q: %w", op, dispatchKey, ErrNotFound)
	}
}

// Get returns the row with dispatchKey and its state, whatever the state and
// whatever shard it is on: it is for inspection and audits, not for
// claiming. It returns [ErrNotFound] for an unknown key, and an
// [*ArgumentError] for a key Settle would reject. Cost: O(log n).
func (s *Store) Get(ctx context.Context, dispatchKey string) (Row, State, error) {
	const op = "Get"
	if err := s.begin(ctx, op); err != nil {
		return Row{}, "", err
	}
	if err := checkKey(op, dispatchKey); err != nil {
		return Row{}, "", err
	}
	rows, err := s.pool.Query(ctx, s.sql.get, dispatchKey)
	if err != nil {
		return Row{}, "", opError(op, err)
	}
	var state State
	row, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (Row, error) { return scanRow(r, &state) })
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Row{}, "", fmt.Errorf("pgstore: %s: %q: %w", op, dispatchKey, ErrNotFound)
	case err != nil:
		return Row{}, "", opError(op, err)
	}
	return row, state, nil
}

// PurgeSettled deletes up to limit settled rows that were settled before
// before, oldest first, and returns how many it deleted. Settled rows are
// kept until purged so that dispatch keys stay deduplicated and deliveries
// can be audited; purging a row lets its dispatch key be enqueued again, so
// keep settled rows at least as long as a producer may resend a key. Call it
// periodically with a modest limit (e.g. 1,000) until it returns less than
// limit. Cost: O(limit × log n).
func (s *Store) PurgeSettled(ctx context.Context, before time.Time, limit int) (int, error) {
	const op = "PurgeSettled"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	if limit < 0 {
		return 0, &ArgumentError{Op: op, Arg: "limit", Reason: fmt.Sprintf("%d is negative", limit)}
	}
	if limit == 0 {
		return 0, nil
	}
	var deleted int64
	if err := s.batchNoJIT(ctx, s.sql.purgeSettled, []any{before, int64(limit)}, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		deleted = tag.RowsAffected()
		return err
	}); err != nil {
		return 0, opError(op, err)
	}
	return int(deleted), nil
}
