package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
)

// Complete applies each completion to its row, fenced by its lease: it
// takes effect only if the row is claimed with that token and the lease is
// live (by the store's clock). Settle marks the row settled; Retry puts it
// back to pending, claimable after Delay, recording Error — or, if the row
// has had its MaxAttempts claims (0: no limit), moves it to dead instead;
// DeadLetter moves it to dead, recording Error; Snooze puts it back to
// pending, claimable after Delay, giving the claim's attempt back and
// counting a snooze (never dead, whatever MaxAttempts says), recording
// Error if it is not empty. Error texts are cut with
// [outbox.TruncateError].
//
// It returns one [outbox.Result] per completion, at the same index: the
// row's new state, or a [*outbox.LeaseLostError] (matching
// [outbox.ErrLeaseLost]) when the lease was not the row's live claim (the
// row was completed already, its lease expired, it was purged, or the key
// is unknown), which leaves that row unchanged and does not stop the
// others. The whole batch is one statement, one round trip and one commit.
//
// A call with an invalid entry — a dispatch key that is empty or not
// storable text, one key twice, an Outcome other than the four, a
// Delay outside 0 to [outbox.MaxDelay] — is an [*outbox.ArgumentError] before the database is
// touched; any error means nothing was applied. An empty batch returns no
// results (an empty, non-nil slice) without a round trip. Cost:
// O(len(completions) × log n).
func (s *Store) Complete(ctx context.Context, completions []outbox.Completion) ([]outbox.Result, error) {
	const op = "Complete"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := call(op).Completions(completions); err != nil {
		return nil, err
	}
	if len(completions) == 0 {
		return []outbox.Result{}, nil
	}
	var (
		keys     = make([]string, len(completions))
		tokens   = make([]int64, len(completions))
		outcomes = make([]int32, len(completions))
		delays   = make([]int64, len(completions))
		texts    = make([]string, len(completions))
	)
	for i, c := range completions {
		keys[i], tokens[i], outcomes[i] = c.DispatchKey, c.Token, int32(c.Outcome)
		delays[i] = c.Delay.Microseconds()
		if c.Outcome != outbox.Settle {
			texts[i] = outbox.TruncateError(c.Error)
		}
	}
	results := make([]outbox.Result, len(completions))
	kept, at := s.kept.Begin(), s.keptNow()
	err := s.runOnce(ctx, func() error {
		rows, err := s.pool.Query(ctx, s.sql.complete, s.clock(), keys, tokens, outcomes, delays, texts)
		if err != nil {
			return err
		}
		var key, state string
		updated := make(map[string]outbox.State, len(keys))
		_, err = pgx.ForEachRow(rows, []any{&key, &state}, func() error {
			updated[key] = outbox.State(state)
			return nil
		})
		if err != nil {
			return err
		}
		return completeResults(op, results, keys, tokens, updated)
	})
	if err != nil {
		kept.Failed()
		return nil, opError(op, err)
	}
	kept.Completed(completions, results, at)
	return results, nil
}

// completeResults fills results, in argument order, from the rows that
// completeSQL updated (updated: key → new state): an entry whose row was
// not updated lost its lease. A key the statement returned that no entry
// holds is an error (it cannot happen: the statement updates rows by the
// entries' keys).
func completeResults(op string, results []outbox.Result, keys []string, tokens []int64, updated map[string]outbox.State) error {
	found := 0
	for i, k := range keys {
		if st, ok := updated[k]; ok {
			results[i] = outbox.Result{State: st}
			found++
		} else {
			results[i] = outbox.Result{Err: &outbox.LeaseLostError{Op: op, DispatchKey: k, Token: tokens[i]}}
		}
	}
	if found != len(updated) {
		return fmt.Errorf("%d rows updated, %d of them by the completions' keys", len(updated), found)
	}
	return nil
}

// ExtendLeases extends each live lease to Lease() from now (the store's
// clock), fenced as [Store.Complete] is, in one statement, and returns one
// [outbox.Result] per lease at the same index: State claimed and the new
// LeaseExpiresAt, or a [*outbox.LeaseLostError] for a lease already lost,
// which is never revived. Invalid or repeated keys are an
// [*outbox.ArgumentError] and change nothing. An empty list returns no
// results (an empty, non-nil slice) without a round trip. Cost:
// O(len(leases) × log n).
func (s *Store) ExtendLeases(ctx context.Context, leases []outbox.Lease) ([]outbox.Result, error) {
	const op = "ExtendLeases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := call(op).Leases(leases); err != nil {
		return nil, err
	}
	if len(leases) == 0 {
		return []outbox.Result{}, nil
	}
	keys := make([]string, len(leases))
	tokens := make([]int64, len(leases))
	for i, l := range leases {
		keys[i], tokens[i] = l.DispatchKey, l.Token
	}
	results := make([]outbox.Result, len(leases))
	err := s.runOnce(ctx, func() error {
		rows, err := s.pool.Query(ctx, s.sql.extend, s.clock(), s.lease.Microseconds(), keys, tokens)
		if err != nil {
			return err
		}
		i := 0
		var until *time.Time
		_, err = pgx.ForEachRow(rows, []any{&until}, func() error {
			if i >= len(results) {
				return fmt.Errorf("more results than leases")
			}
			if until != nil {
				results[i] = outbox.Result{State: outbox.StateClaimed, LeaseExpiresAt: until.UTC()}
			} else {
				results[i] = outbox.Result{Err: &outbox.LeaseLostError{Op: op, DispatchKey: keys[i], Token: tokens[i]}}
			}
			i++
			return nil
		})
		if err == nil && i != len(results) {
			err = fmt.Errorf("%d results for %d leases", i, len(results))
		}
		return err
	})
	if err != nil {
		return nil, opError(op, err)
	}
	return results, nil
}

// Settle settles one claimed row: [Store.Complete] with one entry, whose
// [outbox.Result.Err] (a [*outbox.LeaseLostError]) it returns as its
// error. Settled rows are kept until [Store.PurgeSettled] removes them, so
// dispatch keys stay deduplicated and deliveries can be audited. Cost:
// O(log n).
func (s *Store) Settle(ctx context.Context, lease outbox.Lease) error {
	return s.completeOne(ctx, "Settle", outbox.Completion{Lease: lease, Outcome: outbox.Settle})
}

// Retry puts one claimed row back to pending, claimable again after delay
// (0: at once), recording cause (nil records ""); past its MaxAttempts the
// row goes to dead instead. It is [Store.Complete] with one entry, whose
// [outbox.Result.Err] it returns as its error. The row keeps its place: it
// is still oldest-first by enqueue order, and its next claim counts one
// more attempt. Cost: O(log n).
func (s *Store) Retry(ctx context.Context, lease outbox.Lease, delay time.Duration, cause error) error {
	c := outbox.Completion{Lease: lease, Outcome: outbox.Retry, Delay: delay}
	if cause != nil {
		c.Error = cause.Error()
	}
	return s.completeOne(ctx, "Retry", c)
}

// completeOne runs Complete for one completion, reporting errors as op.
func (s *Store) completeOne(ctx context.Context, op string, c outbox.Completion) error {
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	results, err := s.Complete(ctx, []outbox.Completion{c})
	if ae, ok := err.(*outbox.ArgumentError); ok {
		ae.Op, ae.Arg = op, "lease."+strings.TrimPrefix(ae.Arg, "completions[0].")
		if ae.Arg == "lease.Delay" {
			ae.Arg = "delay"
		}
	}
	if err != nil {
		return err
	}
	if lost, ok := results[0].Err.(*outbox.LeaseLostError); ok {
		lost.Op = op
	}
	return results[0].Err
}

// Get returns the row with dispatchKey, whatever its state and whatever
// shard it is on: it is for inspection and audits, not for claiming. It
// returns an error matching [outbox.ErrNotFound] for an unknown key, and an
// [*outbox.ArgumentError] for a key no row can have. Cost: O(log n).
func (s *Store) Get(ctx context.Context, dispatchKey string) (outbox.Row, error) {
	const op = "Get"
	if err := s.begin(ctx, op); err != nil {
		return outbox.Row{}, err
	}
	if err := call(op).DispatchKey("dispatchKey", dispatchKey); err != nil {
		return outbox.Row{}, err
	}
	var row outbox.Row
	err := s.run(ctx, anyLoss, func() error {
		rows, err := s.pool.Query(ctx, s.sql.get, dispatchKey)
		if err != nil {
			return err
		}
		row, err = pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (outbox.Row, error) { return scanRow(r) })
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return outbox.Row{}, fmt.Errorf("pgstore: %s: %q: %w", op, dispatchKey, outbox.ErrNotFound)
	case err != nil:
		return outbox.Row{}, opError(op, err)
	}
	return row, nil
}

// Stats counts every row by state, by the store's clock, in one statement
// (one snapshot). Cost: one pass over the table, O(all rows, settled and
// dead included): for monitoring, not for every sweep.
func (s *Store) Stats(ctx context.Context) (outbox.Stats, error) {
	const op = "Stats"
	if err := s.begin(ctx, op); err != nil {
		return outbox.Stats{}, err
	}
	var st outbox.Stats
	err := s.run(ctx, anyLoss, func() error {
		var n [7]int64
		if err := s.pool.QueryRow(ctx, s.sql.stats, s.clock()).Scan(&n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6]); err != nil {
			return err
		}
		st = outbox.Stats{Pending: int(n[0]), Scheduled: int(n[1]), Claimed: int(n[2]), Expired: int(n[3]),
			Settled: int(n[4]), Dead: int(n[5]), Total: int(n[6])}
		return nil
	})
	if err != nil {
		return outbox.Stats{}, opError(op, err)
	}
	return st, nil
}

// ListDead returns dead rows in dispatch-key order (bytes, whatever the
// database's collation), from the first key after p.After, at most p.Limit
// (0: 100; above 10,000 or negative is an [*outbox.ArgumentError]), only
// p.Namespace's if it is not "". Page by passing the last key returned as
// the next p.After. Cost: O(p.Limit × log n) over an index of dead rows,
// plus the dead rows of other namespaces passed over when p.Namespace is
// set.
func (s *Store) ListDead(ctx context.Context, p outbox.ListDeadParams) ([]outbox.Row, error) {
	const op = "ListDead"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	limit, err := call(op).ListDead(p)
	if err != nil {
		return nil, err
	}
	p.Limit = limit
	var dead []outbox.Row
	err = s.run(ctx, anyLoss, func() error {
		rows, err := s.pool.Query(ctx, s.sql.listDead, p.Namespace, p.After, int64(p.Limit))
		if err != nil {
			return err
		}
		dead, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Row, error) { return scanRow(r) })
		return err
	})
	if err != nil {
		return nil, opError(op, err)
	}
	return dead, nil
}

// Requeue moves the dead rows among dispatchKeys back to pending,
// claimable at once with Attempts reset to 0 (their last error is kept),
// and returns how many it moved; keys of rows that are not dead, or of no
// row, are left alone. Subscribers are woken when rows moved. Keys no row
// can have are an [*outbox.ArgumentError]. An empty list returns 0 without
// a round trip. The requeue is recorded in the audit trail in its
// transaction, with how many rows it moved ([outbox.RowsAudit]; who from
// ctx, [outbox.WithOperation]). Cost: O(len(dispatchKeys) × log n).
func (s *Store) Requeue(ctx context.Context, dispatchKeys []string) (int, error) {
	const op = "Requeue"
	if err := s.begin(ctx, op); err != nil {
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
	defer s.kept.Touched(nil) // rows put back to pending, in namespaces unknown here
	moved, err := s.auditedRows(ctx, outbox.ActionRequeue, dispatchKeys, func(tx pgx.Tx) (int, string, error) {
		var n int64
		var notified bool
		var ns string
		err := tx.QueryRow(ctx, s.sql.requeue, s.clock(), dispatchKeys, s.channel).Scan(&n, &notified, &ns)
		return int(n), ns, err
	})
	if err != nil {
		return 0, opError(op, err)
	}
	return moved, nil
}

// PurgeSettled deletes up to limit rows settled before before, oldest
// first, and returns how many it deleted, in one short statement that
// skips rows another purge holds. Settled rows are kept until purged so
// that dispatch keys stay deduplicated and deliveries can be audited;
// purging a row lets its dispatch key be enqueued again, so keep settled
// rows at least as long as a producer may resend a key. Call it
// periodically with a modest limit (e.g. 1,000) until it returns less than
// limit. A negative limit is an [*outbox.ArgumentError]; 0 returns 0
// without a round trip. Cost: O(limit × log n).
func (s *Store) PurgeSettled(ctx context.Context, before time.Time, limit int) (int, error) {
	const op = "PurgeSettled"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	return s.purge(ctx, op, s.sql.purgeSettled, before, limit)
}

// PurgeDead deletes up to limit rows dead-lettered before before, oldest
// first, as [Store.PurgeSettled] does for settled rows. Dead rows are kept
// until purged explicitly. Cost: O(limit × log n).
func (s *Store) PurgeDead(ctx context.Context, before time.Time, limit int) (int, error) {
	const op = "PurgeDead"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	return s.purge(ctx, op, s.sql.purgeDead, before, limit)
}

func (s *Store) purge(ctx context.Context, op, sql string, before time.Time, limit int) (int, error) {
	if err := call(op).PurgeLimit(limit); err != nil {
		return 0, err
	}
	if limit == 0 {
		return 0, nil
	}
	var deleted int64
	if err := s.batchNoJIT(ctx, unsent, sql, []any{before, int64(limit)}, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		deleted = tag.RowsAffected()
		return err
	}); err != nil {
		return 0, opError(op, err)
	}
	return int(deleted), nil
}
