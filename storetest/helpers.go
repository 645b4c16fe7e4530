package storetest

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// env is one subtest's view of a fresh store.
type env[R any] struct {
	t   *testing.T
	h   *Harness[R]
	ctx context.Context
	all backpressure.OwnedShardFraction
}

// setupWith builds a fresh store and returns it as the optional
// extension I, skipping the test when the store does not implement it.
func setupWith[I any, R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) (*env[R], I) {
	t.Helper()
	e := setup(t, newHarness)
	ext, ok := any(e.h.Store).(I)
	if !ok {
		t.Skipf("the store (%T) does not implement the optional %v", e.h.Store, reflect.TypeFor[I]())
	}
	return e, ext
}

// oneRoundTrip fails the test unless call makes exactly one round trip;
// name says which call it is.
func (e *env[R]) oneRoundTrip(name string, call func()) {
	e.t.Helper()
	e.tripsBetween(name, call, 1)
}

// tripsBetween fails the test unless call makes from least to 1 round
// trips: a count a store keeps from its own statements may need none.
func (e *env[R]) tripsBetween(name string, call func(), least int64) {
	e.t.Helper()
	before := e.h.RoundTrips()
	call()
	if n := e.h.RoundTrips() - before; n < least || n > 1 {
		e.t.Errorf("%s made %d round trips, want %d to 1", name, n, least)
	}
}

// setup builds a fresh store with newHarness, fills the fields an
// [outbox.Store] defaults, and checks the harness is complete, so a missing
// field fails with a clear message, not a nil call.
func setup[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) *env[R] {
	t.Helper()
	h := newHarness(t)
	if h == nil {
		t.Fatal("storetest: newHarness returned nil")
	}
	hc := *h
	h = &hc
	if err := fillDefaults(h); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	var missing []string
	for _, f := range []struct {
		name string
		nil  bool
	}{
		{"Store", h.Store == nil},
		{"Enqueue", h.Enqueue == nil},
		{"Settle", h.Settle == nil},
		{"Retry", h.Retry == nil},
		{"Inspect", h.Inspect == nil},
		{"Key", h.Key == nil},
		{"Now", h.Now == nil},
		{"Advance", h.Advance == nil},
		{"ErrLeaseLost", h.ErrLeaseLost == nil},
	} {
		if f.nil {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("storetest: Harness is missing %v", missing)
	}
	if h.ShardCount < 1 {
		t.Fatalf("storetest: Harness.ShardCount = %d, want ≥ 1", h.ShardCount)
	}
	if h.Lease < outbox.MinLease || h.Lease%time.Millisecond != 0 {
		t.Fatalf("storetest: Harness.Lease = %v, want ≥ %v and a whole number of milliseconds", h.Lease, outbox.MinLease)
	}
	if h.MaxAttempts < 0 {
		t.Fatalf("storetest: Harness.MaxAttempts = %d, want ≥ 0", h.MaxAttempts)
	}
	all, err := backpressure.AllShards(h.ShardCount)
	if err != nil {
		t.Fatalf("storetest: AllShards(%d): %v", h.ShardCount, err)
	}
	return &env[R]{t: t, h: h, ctx: t.Context(), all: all}
}

// fillDefaults sets the fields of h an [outbox.Store] provides and h
// leaves zero, and checks those it sets against the store.
func fillDefaults[R any](h *Harness[R]) error {
	if h.MaxAttempts == 0 {
		h.MaxAttempts = outbox.DefaultMaxAttempts
	}
	if h.ErrLeaseLost == nil {
		h.ErrLeaseLost = outbox.ErrLeaseLost
	}
	s := h.Outbox
	if s == nil {
		return nil
	}
	if h.Store == nil {
		c := s.Claimer()
		if c == nil {
			return fmt.Errorf("Harness.Outbox.Claimer() returned nil")
		}
		st, ok := any(c).(backpressure.OutboxStore[R])
		if !ok {
			return fmt.Errorf("Harness.Outbox is set, so the Harness must be a Harness[outbox.Row], not a %T", h)
		}
		h.Store = st
	}
	if _, ok := any(h).(*Harness[outbox.Row]); !ok {
		return fmt.Errorf("Harness.Outbox is set, so the Harness must be a Harness[outbox.Row], not a %T", h)
	}
	// R is outbox.Row, checked above.
	row := func(r R) outbox.Row { return any(r).(outbox.Row) }
	switch {
	case h.ShardCount == 0:
		h.ShardCount = s.ShardCount()
	case h.ShardCount != s.ShardCount():
		return fmt.Errorf("Harness.ShardCount = %d, but the store's ShardCount() = %d", h.ShardCount, s.ShardCount())
	}
	switch {
	case h.Lease == 0:
		h.Lease = s.Lease()
	case h.Lease != s.Lease():
		return fmt.Errorf("Harness.Lease = %v, but the store's Lease() = %v", h.Lease, s.Lease())
	}
	if h.Enqueue == nil {
		h.Enqueue = s.Enqueue
	}
	if h.Settle == nil {
		h.Settle = func(ctx context.Context, r R) error { return s.Settle(ctx, row(r).Lease()) }
	}
	if h.Retry == nil {
		h.Retry = func(ctx context.Context, r R, d time.Duration) error { return s.Retry(ctx, row(r).Lease(), d, nil) }
	}
	if h.Key == nil {
		h.Key = func(r R) string { return row(r).DispatchKey }
	}
	if h.Inspect == nil {
		h.Inspect = func(ctx context.Context, key string) (RowState, error) {
			r, err := s.Get(ctx, key)
			return RowState{Row: r}, err
		}
	}
	return nil
}

// msg builds a message with a payload derived from the key.
func msg(namespace, taskQueue, key string) outbox.Message {
	return outbox.Message{DispatchKey: key, Namespace: namespace, TaskQueue: taskQueue, Payload: []byte("payload:" + key)}
}

// msgs builds n messages on one route with keys prefix-0 … prefix-(n-1).
func msgs(namespace, taskQueue, prefix string, n int) []outbox.Message {
	out := make([]outbox.Message, n)
	for i := range out {
		out[i] = msg(namespace, taskQueue, prefix+"-"+strconv.Itoa(i))
	}
	return out
}

func (e *env[R]) enqueue(ms ...outbox.Message) int {
	e.t.Helper()
	n, err := e.h.Enqueue(e.ctx, ms)
	if err != nil {
		e.t.Fatalf("Enqueue(%d messages): %v", len(ms), err)
	}
	return n
}

func (e *env[R]) inspect(key string) RowState {
	e.t.Helper()
	s, err := e.h.Inspect(e.ctx, key)
	if err != nil {
		e.t.Fatalf("Inspect(%q): %v", key, err)
	}
	return s
}

// snapshot inspects every key.
func (e *env[R]) snapshot(keys []string) map[string]RowState {
	e.t.Helper()
	out := make(map[string]RowState, len(keys))
	for _, k := range keys {
		out[k] = e.inspect(k)
	}
	return out
}

// unchanged fails for every key in before whose row differs now, except
// those in except.
func (e *env[R]) unchanged(step string, before map[string]RowState, except map[string]bool) {
	e.t.Helper()
	for _, k := range sortedKeys(before) {
		if except[k] {
			continue
		}
		if d := diffRow(before[k], e.inspect(k)); d != "" {
			e.t.Errorf("%s: row %q changed though it was not claimed: %s", step, k, d)
		}
	}
}

func (e *env[R]) claim(shards backpressure.OwnedShardFraction, claims ...backpressure.ScopedClaim) []R {
	e.t.Helper()
	rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, shards, claims)
	if err != nil {
		e.t.Fatalf("ClaimOutboxRowsScoped(%v, %v): %v", shards, claims, err)
	}
	return rows
}

// need fails the test at once, naming step, unless rows holds at least n
// rows, so a store returning too few rows fails that check instead of
// panicking the whole run when the check indexes them.
func (e *env[R]) need(step string, rows []R, n int) []R {
	e.t.Helper()
	if len(rows) < n {
		e.t.Fatalf("%s returned %d rows %v, want at least %d", step, len(rows), e.keys(rows), n)
	}
	return rows
}

func (e *env[R]) countPending(shards backpressure.OwnedShardFraction, capPerRoute int) map[backpressure.Route]int {
	e.t.Helper()
	rc, err := e.h.Store.CountPendingOutboxRows(e.ctx, shards, capPerRoute)
	if err != nil {
		e.t.Fatalf("CountPendingOutboxRows(%v, %d): %v", shards, capPerRoute, err)
	}
	out := make(map[backpressure.Route]int, len(rc))
	for _, c := range rc {
		if _, dup := out[c.Route]; dup {
			e.t.Errorf("CountPendingOutboxRows(%v, %d): route %v appears twice in %v", shards, capPerRoute, c.Route, rc)
		}
		if c.Count < 1 {
			e.t.Errorf("CountPendingOutboxRows(%v, %d): route %v has count %d, want ≥ 1", shards, capPerRoute, c.Route, c.Count)
		}
		out[c.Route] = c.Count
	}
	return out
}

func (e *env[R]) countClaimed(shards backpressure.OwnedShardFraction) map[string]int {
	e.t.Helper()
	m, err := e.h.Store.CountClaimedOutboxRows(e.ctx, shards)
	if err != nil {
		e.t.Fatalf("CountClaimedOutboxRows(%v): %v", shards, err)
	}
	out := make(map[string]int, len(m))
	for ns, n := range m {
		if n < 0 {
			e.t.Errorf("CountClaimedOutboxRows(%v): namespace %q has count %d", shards, ns, n)
		}
		if n > 0 {
			out[ns] = n
		}
	}
	return out
}

func (e *env[R]) settle(row R) {
	e.t.Helper()
	if err := e.h.Settle(e.ctx, row); err != nil {
		e.t.Fatalf("Settle(%q): %v", e.h.Key(row), err)
	}
}

func (e *env[R]) retry(row R, delay time.Duration) {
	e.t.Helper()
	if err := e.h.Retry(e.ctx, row, delay); err != nil {
		e.t.Fatalf("Retry(%q, %v): %v", e.h.Key(row), delay, err)
	}
}

// keys returns the dispatch keys of rows, sorted.
func (e *env[R]) keys(rows []R) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = e.h.Key(r)
	}
	slices.Sort(out)
	return out
}

// keySet returns the dispatch keys of rows as a set, failing on duplicates.
func (e *env[R]) keySet(step string, rows []R) map[string]bool {
	e.t.Helper()
	out := make(map[string]bool, len(rows))
	for _, r := range rows {
		k := e.h.Key(r)
		if out[k] {
			e.t.Errorf("%s: row %q returned twice by one claim", step, k)
		}
		out[k] = true
	}
	return out
}

// fraction builds the fraction owning the shards for which own is true.
func (e *env[R]) fraction(own func(shard int) bool) backpressure.OwnedShardFraction {
	e.t.Helper()
	var ids []int
	for s := 0; s < e.h.ShardCount; s++ {
		if own(s) {
			ids = append(ids, s)
		}
	}
	f, err := backpressure.NewOwnedShardFraction(ids, e.h.ShardCount)
	if err != nil {
		e.t.Fatalf("NewOwnedShardFraction(%v, %d): %v", ids, e.h.ShardCount, err)
	}
	return f
}

func route(namespace, taskQueue string) backpressure.Route {
	return backpressure.Route{Namespace: namespace, TaskQueue: taskQueue}
}

func scope(namespace, taskQueue string, limit int) backpressure.ScopedClaim {
	return backpressure.ScopedClaim{Route: route(namespace, taskQueue), Limit: limit}
}

// diffRow describes how two states of a row differ, or returns "".
func diffRow(a, b RowState) string {
	var d []string
	add := func(field string, x, y any) { d = append(d, fmt.Sprintf("%s %v → %v", field, x, y)) }
	for _, f := range []struct {
		name string
		x, y any
	}{
		{"ID", a.ID, b.ID},
		{"DispatchKey", a.DispatchKey, b.DispatchKey},
		{"Namespace", a.Namespace, b.Namespace},
		{"TaskQueue", a.TaskQueue, b.TaskQueue},
		{"Shard", a.Shard, b.Shard},
		{"State", a.State, b.State},
		{"Attempts", a.Attempts, b.Attempts},
		{"MaxAttempts", a.MaxAttempts, b.MaxAttempts},
		{"Token", a.Token, b.Token},
		{"LastError", a.LastError, b.LastError},
	} {
		if f.x != f.y {
			add(f.name, f.x, f.y)
		}
	}
	if !bytes.Equal(a.Payload, b.Payload) {
		add("Payload", a.Payload, b.Payload)
	}
	for _, f := range []struct {
		name string
		x, y time.Time
	}{
		{"EnqueuedAt", a.EnqueuedAt, b.EnqueuedAt},
		{"RunAt", a.RunAt, b.RunAt},
		{"ClaimedAt", a.ClaimedAt, b.ClaimedAt},
		{"LeaseExpiresAt", a.LeaseExpiresAt, b.LeaseExpiresAt},
		{"FinishedAt", a.FinishedAt, b.FinishedAt},
	} {
		if !f.x.Equal(f.y) {
			add(f.name, f.x, f.y)
		}
	}
	if !reflect.DeepEqual(a.Extra, b.Extra) {
		add("Extra", a.Extra, b.Extra)
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func messageKeys(ms []outbox.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.DispatchKey
	}
	return out
}
