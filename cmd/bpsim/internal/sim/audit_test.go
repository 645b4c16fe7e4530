package sim

import (
	"context"
	"strings"
	"testing"
)

// fakeOutbox answers the audit's Enqueue and Inspect from a map; the rest
// of the interface is not called.
type fakeOutbox struct {
	outbox
	states map[string]rowState
}

func (f *fakeOutbox) Enqueue(_ context.Context, msgs []message) (int, error) { return 0, nil }

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
	if err := audit(context.Background(), ob, s, w, &a); err != nil {
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
}
