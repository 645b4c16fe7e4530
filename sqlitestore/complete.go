package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Stored states: state's INTEGER values.
const (
	statePending = 0
	stateClaimed = 1
	stateSettled = 2
	stateDead    = 3
)

// stateOf returns the outbox.State of a stored state.
func stateOf(n int) outbox.State {
	switch n {
	case statePending:
		return outbox.StatePending
	case stateClaimed:
		return outbox.StateClaimed
	case stateSettled:
		return outbox.StateSettled
	case stateDead:
		return outbox.StateDead
	}
	return outbox.State(fmt.Sprintf("state(%d)", n))
}

// completeSQL applies a batch of completions in one statement: ?1 the
// batch as a JSON array of [key, token, outcome, retry end, error], ?2 now.
// A snooze (outcome 4) is a retry that gives the claim's attempt back,
// counts a snooze, is never dead and records its error only if it has one.
// Each entry is fenced like a claim's lease: its row must be claimed, with
// that token, under a live lease (ready_at > now); a row that is not is
// left alone and missing from RETURNING. A retry of a row that has had
// max_attempts claims (0: no limit) dead-letters it. It finds each row by
// the dispatch_key index. c is MATERIALIZED so that each entry's fields
// are read out of the JSON once: inlined, every use of f.next, f.outcome
// and f.err in the SET list would extract its field from the JSON again
// (19k of 292k instructions per row of an unscoped drain, callgrind).
const completeSQL = `
WITH c(key, token, outcome, retry_end, err) AS MATERIALIZED (
	SELECT value->>0, value->>1, value->>2, value->>3, value->>4 FROM json_each(?1)),
f(id, outcome, retry_end, err, next) AS (
	SELECT o.id, c.outcome, c.retry_end, c.err,
		CASE c.outcome WHEN 1 THEN 2 WHEN 3 THEN 3 WHEN 4 THEN 0
			ELSE CASE WHEN o.max_attempts > 0 AND o.attempts >= o.max_attempts THEN 3 ELSE 0 END END
	FROM c JOIN outbox o ON o.dispatch_key = c.key
	WHERE o.state = 1 AND o.token = c.token AND o.ready_at > ?2)
UPDATE outbox SET
	state = f.next,
	finished_at = CASE WHEN f.next >= 2 THEN ?2 ELSE outbox.finished_at END,
	run_at = CASE WHEN f.next = 0 THEN f.retry_end ELSE outbox.run_at END,
	ready_at = CASE WHEN f.next = 0 THEN f.retry_end ELSE outbox.ready_at END,
	last_error = CASE WHEN f.outcome = 1 OR (f.outcome = 4 AND f.err = '') THEN outbox.last_error ELSE f.err END,
	attempts = CASE WHEN f.outcome = 4 THEN outbox.attempts - 1 ELSE outbox.attempts END,
	snoozes = CASE WHEN f.outcome = 4 THEN outbox.snoozes + 1 ELSE outbox.snoozes END
FROM f WHERE outbox.id = f.id
RETURNING dispatch_key, state, namespace, task_queue`

// pruneRoutesSQL deletes, of the routes ?1 lists (a JSON array of
// [namespace, task queue]), those with no pending or claimed row left: per
// route one primary-key seek and one seek in the route index (whose
// partial condition holds only such rows). A completion that settles or
// dead-letters rows runs it in its write transaction; Enqueue and Requeue,
// which add a route with its first such row, are serialised with it by the
// write lock, so a route with a pending or claimed row is never missing.
const pruneRoutesSQL = `
DELETE FROM outbox_routes
WHERE (namespace, task_queue) IN (SELECT value->>0, value->>1 FROM json_each(?1))
  AND NOT EXISTS (
	SELECT 1 FROM outbox o
	WHERE o.namespace = outbox_routes.namespace AND o.task_queue = outbox_routes.task_queue AND o.state < 2)`

// Complete applies each completion to its row, fenced by its lease, in one
// statement and one write transaction, and returns one Result per
// completion at the same index (see outbox.Completer):
//
//   - Settle: the row is settled for good, kept for dedup and audit until
//     purged.
//   - Retry: the row is pending again, claimable after Delay,
//     keeping its attempts, its place in its route and Error as LastError;
//     a row that has had its MaxAttempts claims is dead instead.
//   - DeadLetter: the row is dead at once, with Error as LastError.
//   - Snooze: the row is pending again, claimable after Delay, with the
//     claim's attempt given back (never dead, whatever MaxAttempts says),
//     one more Snoozes, its place in its route, and Error as LastError
//     if it is not empty.
//
// An entry whose lease is not the row's current live claim (completed
// already, expired, claimed again, purged, never claimed, or no such key)
// gets a *outbox.LeaseLostError in its Result and leaves its row unchanged;
// the others still apply. A call with an invalid Outcome, a Retry or
// Snooze with a Delay outside 0 to outbox.MaxDelay, or a dispatch key that is empty, not valid UTF-8, holds a
// NUL byte or is named twice fails with an *outbox.ArgumentError and
// applies nothing; so does any other error. An empty batch returns no
// results (an empty, non-nil slice) without touching the database. Cost:
// O(len(completions)) index seeks, plus one route check per route whose
// rows were finished.
func (s *Store) Complete(ctx context.Context, completions []outbox.Completion) ([]outbox.Result, error) {
	return s.complete(ctx, "Complete", completions)
}

// Settle settles the row lease names: Complete with one Settle entry, its
// Result's error returned (a *outbox.LeaseLostError when the lease was
// lost).
func (s *Store) Settle(ctx context.Context, lease outbox.Lease) error {
	res, err := s.complete(ctx, "Settle", []outbox.Completion{{Lease: lease, Outcome: outbox.Settle}})
	if err != nil {
		return err
	}
	return res[0].Err
}

// Retry puts the row lease names back to pending, claimable after delay,
// recording cause as its last error (dead-lettering it instead when it has
// had its MaxAttempts claims): Complete with one Retry entry, its Result's
// error returned. A negative delay fails with an *outbox.ArgumentError.
func (s *Store) Retry(ctx context.Context, lease outbox.Lease, delay time.Duration, cause error) error {
	c := outbox.Completion{Lease: lease, Outcome: outbox.Retry, Delay: delay}
	if cause != nil {
		c.Error = cause.Error()
	}
	res, err := s.complete(ctx, "Retry", []outbox.Completion{c})
	if err != nil {
		return err
	}
	return res[0].Err
}

func (s *Store) complete(ctx context.Context, op string, completions []outbox.Completion) ([]outbox.Result, error) {
	if err := s.writable(); err != nil {
		return nil, s.fail(op, err)
	}
	if err := call(op).Completions(completions); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	results := make([]outbox.Result, len(completions))
	if len(completions) == 0 {
		return results, nil
	}
	applied := make(map[string]outbox.State, len(completions))
	kept := s.completeKept(completions)
	err := s.write(ctx, func(tx *sql.Tx) error {
		clear(applied)
		now := nanos(s.now())
		batch := make([][5]any, 0, len(completions))
		for _, i := range keyOrder(completions) {
			c := completions[i]
			batch = append(batch, [5]any{c.DispatchKey, c.Token, int(c.Outcome), addNanos(now, max(c.Delay, 0)), outbox.TruncateError(c.Error)})
		}
		arg, err := json.Marshal(batch)
		if err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		rows, err := s.query(ctx, s.writer, tx, completeSQL, string(arg), now)
		if err != nil {
			return err
		}
		var finished [][2]string
		for rows.Next() {
			var key, ns, tq string
			var state int
			if err := rows.Scan(&key, &state, &ns, &tq); err != nil {
				rows.Close()
				return err
			}
			applied[key] = stateOf(state)
			if state >= stateSettled {
				finished = append(finished, [2]string{ns, tq})
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return s.pruneRoutes(ctx, tx, finished)
	})
	if err != nil {
		kept(nil, err)
		return nil, s.fail(op, err)
	}
	for i, c := range completions {
		if st, ok := applied[c.DispatchKey]; ok {
			results[i].State = st
		} else {
			results[i].Err = &outbox.LeaseLostError{Op: op, DispatchKey: c.DispatchKey, Token: c.Token}
		}
	}
	kept(results, nil)
	return results, nil
}

// keyOrder returns the indexes of completions in dispatch key order (byte
// order, the dispatch_key index's), the order completeSQL gets its entries
// in: it finds each row by that index, so it walks the index forward rather
// than from its root each time, and rows enqueued in key order (a common
// pattern: keys from a sequence or a time) are met in ID order too, so the
// table and the indexes keyed by ID are updated front to back. A batch in
// claim order is grouped by route, not in ID order; a batch already in key
// order is left as it is. Which order the entries are applied in changes no
// outcome: the keys are distinct and each entry touches only its own row.
func keyOrder(completions []outbox.Completion) []int {
	order := make([]int, len(completions))
	for i := range order {
		order[i] = i
	}
	byKey := func(i, j int) int { return strings.Compare(completions[i].DispatchKey, completions[j].DispatchKey) }
	if !slices.IsSortedFunc(order, byKey) {
		slices.SortFunc(order, byKey)
	}
	return order
}

// pruneRoutes runs pruneRoutesSQL for routes, when there are any.
func (s *Store) pruneRoutes(ctx context.Context, tx *sql.Tx, routes [][2]string) error {
	if len(routes) == 0 {
		return nil
	}
	arg, err := json.Marshal(routes)
	if err != nil {
		return err
	}
	if err := s.step(ctx); err != nil {
		return err
	}
	rows, err := s.query(ctx, s.writer, tx, pruneRoutesSQL, string(arg))
	if err != nil {
		return err
	}
	return rows.Close()
}

// extendSQL extends live leases in one statement: ?1 the leases as a JSON
// array of [key, token], ?2 now, ?3 the new lease end.
const extendSQL = `
WITH l(key, token) AS (SELECT value->>0, value->>1 FROM json_each(?1))
UPDATE outbox SET lease_expires_at = ?3, ready_at = ?3
FROM l WHERE outbox.dispatch_key = l.key AND outbox.state = 1 AND outbox.token = l.token AND outbox.ready_at > ?2
RETURNING dispatch_key`

// ExtendLeases extends each live lease to the store's Lease from now, in
// one statement and one write transaction, and returns one Result per
// lease at the same index: State claimed and the new LeaseExpiresAt, or a
// *outbox.LeaseLostError for a lease that is not the row's current live
// claim (it is never revived). A dispatch key no row can have, or named
// twice, fails the call with an *outbox.ArgumentError, extending nothing.
// An empty list returns no results (an empty, non-nil slice) without
// touching the database.
func (s *Store) ExtendLeases(ctx context.Context, leases []outbox.Lease) ([]outbox.Result, error) {
	const op = "ExtendLeases"
	if err := s.writable(); err != nil {
		return nil, s.fail(op, err)
	}
	if err := call(op).Leases(leases); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	results := make([]outbox.Result, len(leases))
	if len(leases) == 0 {
		return results, nil
	}
	extended := make(map[string]bool, len(leases))
	var end int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		clear(extended)
		now := nanos(s.now())
		end = addNanos(now, s.lease)
		batch := make([][2]any, 0, len(leases))
		for _, l := range leases {
			batch = append(batch, [2]any{l.DispatchKey, l.Token})
		}
		arg, err := json.Marshal(batch)
		if err != nil {
			return err
		}
		if err := s.step(ctx); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, extendSQL, string(arg), now, end)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key string
			if err := rows.Scan(&key); err != nil {
				return err
			}
			extended[key] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.fail(op, err)
	}
	for i, l := range leases {
		if extended[l.DispatchKey] {
			results[i] = outbox.Result{State: outbox.StateClaimed, LeaseExpiresAt: fromNanos(end)}
		} else {
			results[i].Err = &outbox.LeaseLostError{Op: op, DispatchKey: l.DispatchKey, Token: l.Token}
		}
	}
	return results, nil
}
