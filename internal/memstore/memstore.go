// Package memstore is an in-memory outbox store: a naive, obviously correct
// implementation of [outbox.Store] and [outbox.Notifier], against which the
// storetest conformance suite is checked, and a fake for the unit tests of
// packages built on outbox.Store.
//
// Most callers need only [New] with a manual clock:
//
//	clock := storetest.NewClock()
//	s, err := memstore.New(memstore.Options{Now: clock.Now})
//
// It favours being plainly right over being fast: every call scans every row
// (O(n log n) for n rows held), and every call that writes works on a copy
// of the whole outbox that replaces the old one only when the call
// succeeds, so a failed call changes nothing by construction.
package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// DefaultShardCount is the shard count of a store whose Options leave it 0.
const DefaultShardCount = 64

// Options configures a [Store]. The zero value is a valid configuration:
// the wall clock, 64 shards, [outbox.DefaultLease] and
// [outbox.DefaultMaxAttempts].
type Options struct {
	// Now is the store's clock: every lease, delay and schedule is judged
	// on it. nil means time.Now.
	Now func() time.Time

	// ShardCount is the number of virtual shards rows are placed over,
	// shard = backpressure.ShardFor(dispatch key, ShardCount); 1 to
	// backpressure.MaxShardCount. 0 means DefaultShardCount.
	ShardCount int

	// Lease is the length of a claim's lease and of an extension; at
	// least [outbox.MinLease]. 0 means [outbox.DefaultLease].
	Lease time.Duration

	// MaxAttempts is the most claims a row gets when its message sets
	// none (≥ 0). 0 means [outbox.DefaultMaxAttempts].
	MaxAttempts int
}

// Store is an in-memory outbox store. It is safe for concurrent use: one
// mutex serialises every call, so each call is atomic and isolated.
//
// The zero Store is closed: every method returns an error matching
// [outbox.ErrClosed]. Use [New].
type Store struct {
	now         func() time.Time
	shardCount  int
	lease       time.Duration
	maxAttempts int

	mu     sync.Mutex
	st     *state // nil when closed or never opened
	subs   map[*subscriber]struct{}
	done   chan struct{} // closed by Close; wakes subscribers' watchers
	trips  int64
	failAt int64 // the step that fails, counted down by step; 0: none
}

// state is the whole outbox. A call that writes builds a new state from a
// clone and installs it only on success.
type state struct {
	rows      map[string]outbox.Row // by dispatch key
	nextID    int64
	nextToken int64
	history   []outbox.HistoryPoint // in the order appended (history.go)
}

func (st *state) clone() *state {
	c := *st
	c.rows = maps.Clone(st.rows)
	return &c
}

// claim claims r in st at now for lease (one more attempt, a new token)
// and returns a copy of the claimed row for the caller.
func (st *state) claim(r outbox.Row, now time.Time, lease time.Duration) outbox.Row {
	st.nextToken++
	r.State = outbox.StateClaimed
	r.Attempts++
	r.Token = st.nextToken
	r.ClaimedAt = now
	r.LeaseExpiresAt = now.Add(lease)
	st.rows[r.DispatchKey] = r
	return copyRow(r)
}

// New returns an empty store. It returns an error matching
// [outbox.ErrInvalidArgument] (a [*outbox.ArgumentError]) if an option is
// out of range.
func New(opts Options) (*Store, error) {
	bad := func(arg, reason string) error {
		return call("New").Arg("Options."+arg, reason)
	}
	switch {
	case opts.ShardCount < 0 || opts.ShardCount > backpressure.MaxShardCount:
		return nil, bad("ShardCount", fmt.Sprintf("%d is outside 0 to backpressure.MaxShardCount (%d)", opts.ShardCount, backpressure.MaxShardCount))
	case opts.Lease < 0 || (opts.Lease > 0 && opts.Lease < outbox.MinLease):
		return nil, bad("Lease", fmt.Sprintf("%v is below the floor of %v", opts.Lease, outbox.MinLease))
	case opts.Lease > outbox.MaxLease:
		return nil, bad("Lease", fmt.Sprintf("%v is above outbox.MaxLease (%v)", opts.Lease, outbox.MaxLease))
	case opts.MaxAttempts < 0 || int64(opts.MaxAttempts) > outbox.MaxAttemptsLimit:
		return nil, bad("MaxAttempts", fmt.Sprintf("%d is outside 0 to outbox.MaxAttemptsLimit (%d)", opts.MaxAttempts, outbox.MaxAttemptsLimit))
	}
	s := &Store{
		now:         opts.Now,
		shardCount:  opts.ShardCount,
		lease:       opts.Lease,
		maxAttempts: opts.MaxAttempts,
		st:          &state{rows: map[string]outbox.Row{}},
		subs:        map[*subscriber]struct{}{},
		done:        make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.shardCount == 0 {
		s.shardCount = DefaultShardCount
	}
	if s.lease == 0 {
		s.lease = outbox.DefaultLease
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = outbox.DefaultMaxAttempts
	}
	return s, nil
}

// Lease returns the length of a claim's lease.
func (s *Store) Lease() time.Duration { return s.lease }

// ShardCount returns the shard count rows are placed with.
func (s *Store) ShardCount() int { return s.shardCount }

// MaxAttempts returns the most claims a row gets when its message sets
// none.
func (s *Store) MaxAttempts() int { return s.maxAttempts }

// RoundTrips returns how many calls the store has served: each call is one
// round trip, as each is one transaction. Close, Lease, ShardCount and the
// counters themselves do not count.
func (s *Store) RoundTrips() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trips
}

// FailNth arms a fault for tests of atomicity: the n-th step (1-based) the
// store takes from now on fails with an error, and the fault is then
// disarmed; n ≤ 0 disarms it. A step is the start of a call or one row that
// call reads for a claim or writes, so a fault can strike a batch part-way;
// the call then returns the error and changes nothing.
func (s *Store) FailNth(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAt = max(int64(n), 0)
}

// errFault is the error of a step that FailNth armed to fail.
type faultError struct{ op string }

func (e *faultError) Error() string { return "memstore: " + e.op + ": injected fault" }

// step counts one step of op against an armed fault. Called with mu held.
func (s *Store) step(op string) error {
	if s.failAt == 0 {
		return nil
	}
	s.failAt--
	if s.failAt == 0 {
		return &faultError{op: op}
	}
	return nil
}

// begin locks the store for one call of op and checks that the store is
// open and ctx live; on success the caller must call s.mu.Unlock.
func (s *Store) begin(ctx context.Context, op string) error {
	s.mu.Lock()
	if s.st == nil {
		s.mu.Unlock()
		return fmt.Errorf("memstore: %s: %w", op, outbox.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	s.trips++
	if err := s.step(op); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

// checkShards returns a [*outbox.ShardCountError] unless f has the store's
// shard count.
func (s *Store) checkShards(f backpressure.OwnedShardFraction) error {
	if f.ShardCount() != s.shardCount {
		return &outbox.ShardCountError{Store: s.shardCount, Given: f.ShardCount()}
	}
	return nil
}

// claimable reports whether r may be claimed at now: pending and visible,
// or claimed with an expired lease.
func claimable(r *outbox.Row, now time.Time) bool {
	switch r.State {
	case outbox.StatePending:
		return !now.Before(r.RunAt)
	case outbox.StateClaimed:
		return !now.Before(r.LeaseExpiresAt)
	}
	return false
}

// live reports whether r is claimed under a lease that has not expired at
// now.
func live(r *outbox.Row, now time.Time) bool {
	return r.State == outbox.StateClaimed && now.Before(r.LeaseExpiresAt)
}

// byID returns the rows of st for which keep is true, in enqueue order.
func (st *state) byID(keep func(*outbox.Row) bool) []outbox.Row {
	var out []outbox.Row
	for _, r := range st.rows {
		if keep(&r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b outbox.Row) int { return compareInt64(a.ID, b.ID) })
	return out
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// copyRow returns r with its own copy of the payload, so a caller cannot
// change a stored row through it.
func copyRow(r outbox.Row) outbox.Row {
	r.Payload = slices.Clone(r.Payload)
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	r.Headers = cloneHeaders(r.Headers)
	return r
}

// cloneHeaders returns a copy of h, nil for none (as the stores read them
// back).
func cloneHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	return maps.Clone(h)
}

// Claimer returns s itself: the reference store keeps its planner calls on
// the Store, which [outbox.Store.Claimer] allows.
func (s *Store) Claimer() backpressure.OutboxStore[outbox.Row] { return s }

var (
	_ outbox.Store                         = (*Store)(nil)
	_ outbox.Notifier                      = (*Store)(nil)
	_ backpressure.OutboxStore[outbox.Row] = (*Store)(nil)
)

// call names op of this package in the errors internal/validate returns.
func call(op string) validate.Call { return validate.Call{Pkg: "memstore", Op: op} }
