package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// fakeOutbox answers the audit's Enqueue and Inspect from a map; the rest
// of the interface is not called.
type fakeOutbox struct {
	states map[string]rowState
}

func (f *fakeOutbox) Enqueue(_ context.Context, msgs []outbox.Message) (int, error) { return 0, nil }

func (f *fakeOutbox) Inspect(_ context.Context, key string) (rowState, error) {
	return f.states[key], nil
}

// TestAuditCountsRunTwiceWhateverTheState checks that a key claimed twice
// is reported run twice whether it ended settled or not, and that the
// verdict then fails.
func TestAuditCountsRunTwiceWhateverTheState(t *testing.T) {
	s := Scenario{Tenants: []Tenant{{Name: "a"}}}
	w := &workload{arrivals: []arrival{{key: "once"}, {key: "twice-settled"}, {key: "twice-claimed"}, {key: "lost"}}}
	ob := &fakeOutbox{states: map[string]rowState{
		"once":          {Found: true, Settled: true, State: "settled", Attempts: 1},
		"twice-settled": {Found: true, Settled: true, State: "settled", Attempts: 2},
		"twice-claimed": {Found: true, State: "claimed", Attempts: 2},
	}}
	var a Audit
	if err := audit(context.Background(), ob, s, w, []bool{false}, nil, nil, &a); err != nil {
		t.Fatal(err)
	}
	if a.Keys != 4 || a.SettledOnce != 1 || a.RunTwice != 2 || a.Unsettled != 1 || a.Lost != 1 || a.OK() {
		t.Errorf("audit = %+v, want 1 settled once, 2 run twice, 1 unsettled, 1 lost, FAILED", a)
	}
	if got := a.String(); !strings.Contains(got, "FAILED") || !strings.Contains(got, "2 run twice") ||
		!strings.Contains(got, "twice-claimed (2 claims, claimed)") {
		t.Errorf("verdict %q", got)
	}
	ok := Audit{Keys: 3, SettledOnce: 3, Redelivered: 3}
	if got := ok.String(); got != "exactly-once: ok — 3 of 3 dispatch keys settled once, none lost; 3 re-enqueued as duplicates, 0 inserted again" {
		t.Errorf("verdict %q", got)
	}

	// A paused tenant's rows left pending and unclaimed are held, not
	// unsettled; one claimed and left claimed is unsettled.
	s = Scenario{Tenants: []Tenant{{Name: "a"}, {Name: "p", Quota: 0}}}
	w = &workload{arrivals: []arrival{{key: "a1"}, {key: "p1", tenant: 1}, {key: "p2", tenant: 1}}}
	ob = &fakeOutbox{states: map[string]rowState{
		"a1": {Found: true, Settled: true, State: "settled", Attempts: 1},
		"p1": {Found: true, State: "pending"},
		"p2": {Found: true, State: "claimed", Attempts: 1},
	}}
	a = Audit{}
	if err := audit(context.Background(), ob, s, w, []bool{false, true}, nil, nil, &a); err != nil {
		t.Fatal(err)
	}
	if a.Held != 1 || a.Unsettled != 1 || a.SettledOnce != 1 || a.OK() {
		t.Errorf("audit with a paused tenant = %+v, want 1 held, 1 unsettled, FAILED", a)
	}
	a.Unsettled, a.SettledOnce = 0, 2
	if !a.OK() || !strings.Contains(a.String(), "1 of a paused tenant held pending") {
		t.Errorf("audit %+v: OK %v, %q", a, a.OK(), a.String())
	}
}
