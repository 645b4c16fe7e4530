package storetest

import (
	"errors"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// ox is one subtest's view of a fresh store that implements
// [outbox.Store]: the areas of the full outbox contract use it.
type ox struct {
	*env[outbox.Row]
	s outbox.Store
}

// setupStore builds a fresh store and returns it as an [outbox.Store],
// skipping the test when the store does not implement it.
func setupStore[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) *ox {
	t.Helper()
	e := setup(t, newHarness)
	s := e.h.Outbox
	if s == nil {
		t.Skipf("Harness.Outbox is nil (the store %T is only a backpressure.OutboxStore), so the full outbox contract (completion, extension, dead letters, retention, stats, closing) is not checked", e.h.Store)
	}
	// setup checked that a Harness with Outbox is a Harness[outbox.Row].
	h := any(e.h).(*Harness[outbox.Row])
	return &ox{env: &env[outbox.Row]{t: e.t, h: h, ctx: e.ctx, all: e.all}, s: s}
}

// claimN claims with claims on every shard and fails the test at once
// unless exactly n rows come back.
func (o *ox) claimN(step string, n int, claims ...backpressure.ScopedClaim) []outbox.Row {
	o.t.Helper()
	rows := o.claim(o.all, claims...)
	if len(rows) != n {
		o.t.Fatalf("%s: claim(%v) returned %d rows %v, want %d", step, claims, len(rows), o.keys(rows), n)
	}
	return rows
}

// complete calls Complete, failing the test at once on an error or a
// result count other than len(cs).
func (o *ox) complete(step string, cs ...outbox.Completion) []outbox.Result {
	o.t.Helper()
	res, err := o.s.Complete(o.ctx, cs)
	if err != nil {
		o.t.Fatalf("%s: Complete(%d completions): %v", step, len(cs), err)
	}
	if len(res) != len(cs) {
		o.t.Fatalf("%s: Complete(%d completions) returned %d results", step, len(cs), len(res))
	}
	return res
}

// extend calls ExtendLeases, failing the test at once on an error or a
// result count other than len(ls).
func (o *ox) extend(step string, ls ...outbox.Lease) []outbox.Result {
	o.t.Helper()
	res, err := o.s.ExtendLeases(o.ctx, ls)
	if err != nil {
		o.t.Fatalf("%s: ExtendLeases(%d leases): %v", step, len(ls), err)
	}
	if len(res) != len(ls) {
		o.t.Fatalf("%s: ExtendLeases(%d leases) returned %d results", step, len(ls), len(res))
	}
	return res
}

func (o *ox) get(key string) outbox.Row {
	o.t.Helper()
	r, err := o.s.Get(o.ctx, key)
	if err != nil {
		o.t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

// gone fails unless the store holds no row with key.
func (o *ox) gone(step, key string) {
	o.t.Helper()
	if r, err := o.s.Get(o.ctx, key); !errors.Is(err, outbox.ErrNotFound) {
		o.t.Errorf("%s: Get(%q) = %+v, %v; want ErrNotFound", step, key, r, err)
	}
}

func (o *ox) stats() outbox.Stats {
	o.t.Helper()
	st, err := o.s.Stats(o.ctx)
	if err != nil {
		o.t.Fatalf("Stats: %v", err)
	}
	return st
}

// applied fails unless res reports an entry that took effect, leaving its
// row in state.
func (o *ox) applied(step string, res outbox.Result, state outbox.State) {
	o.t.Helper()
	if res.Err != nil || res.State != state {
		o.t.Errorf("%s: Result = {Err: %v, State: %q}, want it applied, State %q", step, res.Err, res.State, state)
	}
}

// lost fails unless res reports lease l lost: a *LeaseLostError naming
// the key and token, matching ErrLeaseLost, with no State.
func (o *ox) lost(step string, res outbox.Result, l outbox.Lease) {
	o.t.Helper()
	var le *outbox.LeaseLostError
	switch {
	case !errors.Is(res.Err, outbox.ErrLeaseLost):
		o.t.Errorf("%s: Result.Err = %v, want one matching ErrLeaseLost", step, res.Err)
	case !errors.As(res.Err, &le):
		o.t.Errorf("%s: Result.Err = %v (%T), want a *outbox.LeaseLostError", step, res.Err, res.Err)
	case le.DispatchKey != l.DispatchKey || le.Token != l.Token:
		o.t.Errorf("%s: LeaseLostError names row %q token %d, want %q token %d", step, le.DispatchKey, le.Token, l.DispatchKey, l.Token)
	}
	if res.State != "" || !res.LeaseExpiresAt.IsZero() {
		o.t.Errorf("%s: a lost lease's Result has State %q, LeaseExpiresAt %v; want both zero", step, res.State, res.LeaseExpiresAt)
	}
}

// invalidArgument fails unless err matches ErrInvalidArgument as a
// *outbox.ArgumentError.
func (o *ox) invalidArgument(step string, err error) {
	o.t.Helper()
	var ae *outbox.ArgumentError
	if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ae) {
		o.t.Errorf("%s: error %v (%T), want a *outbox.ArgumentError matching ErrInvalidArgument", step, err, err)
	}
}

// rowKeys returns the keys of rows in their order.
func rowKeys(rows []outbox.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.DispatchKey
	}
	return out
}
