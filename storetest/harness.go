// Package storetest is the conformance suite for outbox stores: run it
// from your store's tests to prove the store keeps the contract of
// [outbox.Store] (and so works with the planner's [backpressure.Sweep] and
// with a dispatcher built on outbox), and of the optional extensions it
// offers.
//
// Quick start, in your store's _test.go file, for a store that implements
// [outbox.Store] and reads time through an injected clock:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
//			clock := storetest.NewClock()
//			s, err := mystore.Open(t.Context(), mystore.Options{Now: clock.Now, MaxAttempts: 5})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { _ = s.Close() })
//			return &storetest.Harness[outbox.Row]{
//				Outbox:      s,
//				MaxAttempts: 5,           // the store's option; 0 means outbox.DefaultMaxAttempts
//				Now:         clock.Now,
//				Advance:     clock.Advance,
//				RoundTrips:  s.RoundTrips, // optional: statements sent so far
//				FailNth:     s.FailNth,    // optional: make the n-th statement fail
//			}
//		})
//	}
//
// Every subtest calls newHarness for a fresh, isolated, empty store, so
// subtests never see each other's rows; newHarness registers the store's
// cleanup with t.Cleanup (the Closed area closes the store itself first).
// The suite uses the standard library, the root package, outbox and rapid.
//
// The areas, one file each: Dedup, Shards, Counts, Claim, Edges, Lease, Retry,
// Concurrency, RoundTrips and SweepAhead check [backpressure.OutboxStore]
// (SweepAhead: a backlog drained by [backpressure.SweepAhead], which on a
// store with a [backpressure.Counter] reads the next sweep's counts beside
// each claim, must claim and settle every row exactly once, within every
// namespace's ceiling after every sweep); Messages
// (every limit of [outbox.Message.Validate] refused whole with a
// [*outbox.MessageError], and a property test: any batch Enqueue accepts,
// odd text and "" task queues included, is claimed in full, each row once,
// by repeated [backpressure.Sweep]s), Limits (see below), Complete, Snooze (a snooze gives the claim's attempt back), Extend, DeadLetters,
// Scheduled, Retention, Stats, Notifier, Closed and Context check the rest
// of [outbox.Store]; Operate checks the optional [outbox.Operator]
// (Namespaces against a naive reference over every row, after random
// sequences of enqueues, claims, completions, requeues and clock steps;
// shared settings and their versions; node reports and their expiry); Counter and SweepTx check the optional planner
// extensions. A store that implements only
// [backpressure.OutboxStore] fills in the harness's Enqueue, Settle, Retry,
// Inspect and Key itself, and the outbox areas are skipped, saying so; so
// are the optional areas of extensions a store does not implement.
//
// Beyond the letter of the interfaces, the suite requires:
//
//   - The Limits area: one rule for values at the edge of what a store
//     holds. MaxAttempts up to [outbox.MaxAttemptsLimit], a RunAt up to
//     [outbox.MaxTime] and a retry delay up to [outbox.MaxDelay] are kept
//     exactly (read back equal); beyond them Enqueue refuses the batch
//     with a [*outbox.MessageError] and Complete with a
//     [*outbox.ArgumentError], changing nothing. No store clamps.
//   - A ClaimOutboxRowsScoped call naming one route in two claims fails
//     with an error and claims nothing. The planner never names a route
//     twice; a store that summed the limits, or took either, would be
//     guessing, so the suite pins the one safe answer.
//   - Text a store accepts as a dispatch key, namespace or task queue is
//     counted and claimed by naming it, byte for byte; text it refuses
//     (invalid UTF-8, NUL bytes, …) fails the whole Enqueue batch, and a
//     claim naming a route [outbox.Route.Validate] refuses fails whole
//     with an [*outbox.ArgumentError].
//   - The Edges area: a claim with a Limit below 1 (0 included), an
//     invalid route or a route named twice, and a pending count with a cap
//     below 1, fail with an [*outbox.ArgumentError] whose Op is the method
//     and whose Arg names the argument ("claims[1].Limit",
//     "claims[0].Route.Namespace", "capPerRoute"), changing nothing; so do
//     bad keys, pages, limits and completions of the outbox calls, and a
//     bad message is an [*outbox.MessageError] with Op, Index, Field and
//     Reason. Every such message reads "pkg: Op: Arg: reason" (pkg is
//     Harness.ErrorPrefix when set). A successful count or claim returns a
//     non-nil map or slice, empty when there is nothing, and a failed one
//     nil. Claimed rows come back grouped by claim in the claims' order,
//     highest priority first, then oldest, within each (checked for the
//     claim, the SweepTx view's claim and the rows of Sweeps through the
//     window claim); pending counts in [outbox.Route.Compare] order.
//   - Oldest first means enqueue order, whatever the dispatch keys: the
//     suite enqueues keys in descending order to tell the two apart.
//   - Leases, retry delays and schedules are judged on the store's clock:
//     a lease is live while now < LeaseExpiresAt, and a pending row is
//     claimable once RunAt ≤ now. (The suite only looks a millisecond
//     either side of each boundary.)
//   - A completion's or an extension's lease is lost, reported per row as
//     a [*outbox.LeaseLostError] with the row unchanged, unless the row is
//     claimed with exactly that token and the lease is live: a settled,
//     retried, dead, purged, re-claimed, expired or never-claimed row.
//   - Complete refuses a whole batch, with a [*outbox.ArgumentError] and
//     nothing applied, for an invalid Outcome, a Retry with a Delay
//     outside 0 to [outbox.MaxDelay], or a dispatch key named twice.
//   - PurgeSettled and PurgeDead remove rows finished (FinishedAt) strictly
//     before the given time, oldest first; a limit of 0 purges nothing and
//     a negative one is an [*outbox.ArgumentError]; ListDead's Limit
//     outside 0 to 10,000 too.
//   - Requeue sets Attempts to 0 and makes the row claimable at once; a
//     retry once Attempts ≥ MaxAttempts dead-letters the row, recording the
//     retry's error (truncated by [outbox.TruncateError]).
//   - With a cancelled context every method fails with an error matching
//     context.Canceled and changes nothing; after Close every method
//     but Close returns an error matching [outbox.ErrClosed], and a second
//     Close returns nil.
//
// When the store also implements the optional [backpressure.Counter], the
// Counter area checks it against the store's own CountClaimedOutboxRows
// and CountPendingOutboxRows, for each shape of CountParams it serves (with
// or without Claimed, a window or every namespace; at least one): for many
// params (After before, on, between and after the namespaces, Namespaces
// from 1 past the number of namespaces with claimable rows, several caps,
// all or part of the shards), a window must be exactly the full counts
// restricted to the first Namespaces namespaces with claimable rows in the
// cyclic order after After, sorted by namespace then task queue, and the
// claimed counts CountClaimedOutboxRows's, in one round trip; invalid
// params, a cancelled context and a mismatched shard count must fail; a
// shape it does not serve must be refused with
// [backpressure.ErrNotSupported] at once, whatever the context, without a
// round trip.
//
// And for [backpressure.TxSweeper], the SweepTx area: the view's
// counts must equal the store's own; its claim must take exactly the rows
// the store's claim takes on an identical store, with or without a count
// before it; a fn that fails after claiming, a fault at any statement, a
// cancelled context and a view used after fn returned must leave every row
// unchanged; whole Sweeps through the view must claim what Sweeps through
// the plain store do; and a Sweep through it is one round trip. fn must
// call only the view, never the store itself.
//
// And for the window claim (ClaimOutboxWindow; see
// [backpressure.OutboxStore]), the WindowClaim area: on random
// states (namespaces, routes, priorities, live and expired leases, delayed
// retries, ceilings, paused namespaces, part of the shards), Sweeps through
// the capability must claim, sweep by sweep, exactly the rows and plans of
// Sweeps on an identical store without it (the counted plan), and the
// capability must be used; bad arguments, a cancelled context and too few
// namespaces with demand must claim nothing.
//
// And for [outbox.Notifier], the Notifier area: a subscription receives a
// value after an Enqueue commits rows, holds at most one, reaches every
// subscriber, and is closed when its context is done or the store closes.
// For [outbox.Pinger], the Pinger area: Ping answers nil on an open store
// and changes nothing; the Closed and Context areas include it.
//
// Without Harness.FailNth the suite cannot check that a claim or a batch
// completion failing part-way (a database error after some rows were
// written) changes nothing; it says so in the log and skips those checks.
//
// What is exported, and why: [Run] is the suite, called once from a
// store's tests; [Harness] is what the store hands it (the store under
// test, how to read a row's state as a [RowState], how to move time);
// [Clock] and [NewClock] are the manual clock a store under test is given,
// so that leases and retry delays are exercised without sleeping. Nothing
// else is exported: the checks themselves are named subtests.
package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// RowState is every stored column of one row, as the store holds it: the
// row as [outbox.Row] names it, and in Extra any column it does not (compared
// with reflect.DeepEqual). The suite compares whole RowStates to prove that
// a call left a row unchanged.
//
// Times are compared with time.Time.Equal; leave a time zero when the store
// holds none (e.g. ClaimedAt of a never-claimed row). Store times at the
// precision of the injected clock (the suite's Clock steps by whole
// milliseconds, so millisecond or finer precision is enough).
type RowState struct {
	outbox.Row
	Extra any // any further columns, compared with reflect.DeepEqual
}

// Harness adapts one fresh, empty store to the suite.
//
// A store that implements [outbox.Store] (with R = [outbox.Row]) needs only
// Outbox, Now and Advance: every other field left zero defaults from the
// store (Store from Claimer, Enqueue, Settle, Retry, Key, ShardCount, Lease,
// ErrLeaseLost, and Inspect from Get), and the suite runs every area. A
// store that implements only [backpressure.OutboxStore] sets Store and
// every other field marked required, and
// the areas of the full outbox contract (Messages, Complete, Extend,
// DeadLetters, Scheduled, NextDue, Retention, Stats, Closed, Notifier, Context) are
// skipped, saying so. An optional func left nil skips the checks that need
// it (with t.Skip and a reason).
//
// The store must read time only through the clock behind Now and Advance,
// so the suite can expire leases and retry delays without sleeping.
type Harness[R any] struct {
	// Store is the planner-facing side of the implementation under test:
	// its counts and claim, and the optional extensions it implements.
	// Required, or nil for Outbox.Claimer().
	Store backpressure.OutboxStore[R]

	// Outbox is the implementation under test as a whole [outbox.Store],
	// for a store that is one (the Harness is then a Harness[outbox.Row]).
	// Nil for a store that implements only [backpressure.OutboxStore]: the
	// areas of the full outbox contract are then skipped.
	Outbox outbox.Store

	// ShardCount is the shard count the store places rows with. Required,
	// or 0 for the [outbox.Store]'s ShardCount().
	ShardCount int

	// Lease is the store's lease length (visibility timeout), at least
	// [outbox.MinLease] and a whole number of milliseconds. Required, or 0
	// for the [outbox.Store]'s Lease().
	Lease time.Duration

	// MaxAttempts is the most claims the store gives a row whose message
	// sets none (its option); 0 means [outbox.DefaultMaxAttempts]. The
	// DeadLetters area retries a row that many times, so a store under
	// test may set a small one.
	MaxAttempts int

	// Enqueue inserts msgs atomically, ignoring those whose dispatch key
	// already exists, and reports how many it inserted. Required, or nil
	// for the [outbox.Store]'s Enqueue.
	Enqueue func(ctx context.Context, msgs []outbox.Message) (inserted int, err error)

	// Settle settles a claimed row with the token of the claim that
	// returned it. Required, or nil for the [outbox.Store]'s Settle.
	Settle func(ctx context.Context, row R) error

	// Retry puts a claimed row back to pending, visible after delay, using
	// the token of the claim that returned it. Required, or nil for the
	// [outbox.Store]'s Retry.
	Retry func(ctx context.Context, row R, delay time.Duration) error

	// Inspect returns every column of the row with dispatchKey, or an
	// error matching [outbox.ErrNotFound] when there is none. Required, or
	// nil for the [outbox.Store]'s Get (with no Extra). A store whose Get
	// shows every column needs no Inspect of its own; one that keeps more
	// columns (or counts Get as a round trip the suite should not see)
	// reads them here.
	Inspect func(ctx context.Context, dispatchKey string) (RowState, error)

	// Key returns a claimed row's dispatch key. Required, or nil for
	// [outbox.Row]'s DispatchKey.
	Key func(row R) string

	// Now returns the store's current time. Required.
	Now func() time.Time

	// Advance moves the store's clock forward by d. Required.
	Advance func(d time.Duration)

	// RoundTrips returns how many round trips (statements or transactions
	// sent to the database) the store has made so far. Optional: nil skips
	// the round-trip checks.
	RoundTrips func() int64

	// FailNth arms a fault: the n-th statement (1-based) the store runs
	// from now on fails with an error, and the fault is then disarmed;
	// n ≤ 0 disarms it. The suite uses it to prove that a claim or a batch
	// completion that fails part-way changes nothing. Optional, but without
	// it the suite cannot vouch for all-or-nothing claims and completions:
	// Claim/AtomicOnFault and Complete/AtomicOnFault are then skipped with
	// a warning, and only calls refused before any work are checked (a
	// cancelled context, a shard-count mismatch, a route named twice, a
	// bad argument), which a store that works row by row and fails on a
	// database error part-way can still pass.
	FailNth func(n int)

	// RawSettings writes shared-settings rows as an operator's SQL would,
	// past every check of PutSettings: for each namespace of bodies, its
	// row's body becomes that text verbatim (JSON, possibly not a
	// settings object: null, [1, 2], {"quota": -5}), with a settings
	// version above every earlier one, in one statement or transaction.
	// Optional: nil skips the checks of settings rows written by other
	// means (Operate/BadSettingsRows and its neighbours).
	RawSettings func(ctx context.Context, bodies map[string]string) error

	// RawNodeReport writes node's report row with body verbatim (JSON,
	// possibly not a report), live for ttl on the store's clock, as
	// RawSettings does. Optional: nil skips the check of malformed
	// reports.
	RawNodeReport func(ctx context.Context, node, body string, ttl time.Duration) error

	// ErrorPrefix is the package name the store's error messages start
	// with ("pgstore" for "pgstore: Enqueue: msgs[0].Namespace: is
	// empty"). Optional: "" checks only that every argument error reads
	// "pkg: Op: Arg: reason" for some pkg.
	ErrorPrefix string

	// ErrLeaseLost is the error Settle and Retry return (matched with
	// errors.Is) when the row's current claim is not the one given: it was
	// settled, retried, or re-claimed after its lease expired. Required,
	// or nil for [outbox.ErrLeaseLost].
	ErrLeaseLost error
}

// Run runs the whole suite against stores built by newHarness, one named
// subtest per area and check, each with a fresh store. newHarness should
// register its cleanup with t.Cleanup.
func Run[R any](t *testing.T, newHarness func(t *testing.T) *Harness[R]) {
	t.Helper()
	areas := []struct {
		name string
		run  func(*testing.T, func(*testing.T) *Harness[R])
	}{
		{"Dedup", testDedup[R]},
		{"Shards", testShards[R]},
		{"Counts", testCounts[R]},
		{"Claim", testClaim[R]},
		{"Edges", testEdges[R]},
		{"Lease", testLease[R]},
		{"Retry", testRetry[R]},
		{"Concurrency", testConcurrency[R]},
		{"RoundTrips", testRoundTrips[R]},
		{"Counter", testCounter[R]},
		{"SweepTx", testSweepTx[R]},
		{"SweepAhead", testSweepAhead[R]},
		{"WindowClaim", testWindowClaim[R]},
		{"Messages", testMessages[R]},
		{"Limits", testLimits[R]},
		{"Complete", testComplete[R]},
		{"Snooze", testSnooze[R]},
		{"Extend", testExtend[R]},
		{"InvalidKeys", testInvalidKeys[R]},
		{"DeadLetters", testDeadLetters[R]},
		{"Scheduled", testScheduled[R]},
		{"NextDue", testNextDue[R]},
		{"Retention", testRetention[R]},
		{"Stats", testStats[R]},
		{"Operate", testOperate[R]},
		{"Audit", testAudit[R]},
		{"History", testHistory[R]},
		{"Notifier", testNotifier[R]},
		{"Pinger", testPinger[R]},
		{"Closed", testClosed[R]},
		{"Context", testContext[R]},
	}
	for _, a := range areas {
		t.Run(a.name, func(t *testing.T) { a.run(t, newHarness) })
	}
}

// Clock is a manual clock for stores under test: pass Now as the store's
// clock and Advance as the harness's. It starts at a fixed instant and
// moves only when told. The zero value is not usable; use [NewClock]. It is
// safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock set to 2025-01-01T00:00:00Z.
func NewClock() *Clock {
	return &Clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, rounded down to a whole millisecond
// so stores that keep millisecond precision see exactly the suite's times.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d.Truncate(time.Millisecond))
}
