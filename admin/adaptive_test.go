package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// TestAdaptiveTenant: the nodes' adaptive ceilings and holds add up in a
// tenant, and its summary says "held: downstream overloaded, ceiling 7 of
// 20, retry in 2.1s"; nodes without one count in neither sum.
func TestAdaptiveTenant(t *testing.T) {
	var tn Tenant
	tn.addPlan(outbox.PlanEntry{Namespace: "a", Quota: 30, Ceiling: 10, Adaptive: 3, Hold: 2100 * time.Millisecond, Reason: "adaptive", Held: 4})
	tn.addPlan(outbox.PlanEntry{Namespace: "a", Quota: 30, Ceiling: 10, Adaptive: 4, Hold: time.Second, Reason: "adaptive", Held: 1})
	tn.addPlan(outbox.PlanEntry{Namespace: "a", Quota: 30, Ceiling: 10, Reason: "budget"})
	if tn.Adaptive != 7 || tn.AdaptiveOf != 20 || tn.Hold != 2100*time.Millisecond || tn.Reason != "adaptive" || tn.Ceiling != 30 {
		t.Fatalf("tenant %+v", tn)
	}
	want := "held: downstream overloaded, ceiling 7 of 20, retry in 2.1s"
	if got := AdaptiveText(tn); got != want {
		t.Fatalf("AdaptiveText = %q, want %q", got, want)
	}
	if s := (Explanation{Tenant: tn}).Summary(); !strings.HasPrefix(s, want) {
		t.Fatalf("Summary = %q", s)
	}
	var plain Tenant
	plain.addPlan(outbox.PlanEntry{Namespace: "b", Quota: 5, Ceiling: backpressure.Unlimited, Reason: "at-ceiling"})
	if AdaptiveText(plain) != "" || plain.Adaptive != 0 || plain.AdaptiveOf != 0 {
		t.Fatalf("no adaptive ceiling: %+v, %q", plain, AdaptiveText(plain))
	}
	// A pin is a shared setting like a quota: changed, cleared, validated.
	n := 7
	s := Setting{Namespace: "a", AdaptivePin: &n}.change(outbox.NamespaceSettings{Namespace: "a"})
	if s.AdaptivePin == nil || *s.AdaptivePin != 7 || outbox.CheckSettings(s) != nil {
		t.Fatalf("pin set: %+v", s)
	}
	if s = (Setting{Namespace: "a", ClearAdaptivePin: true}).change(s); s.AdaptivePin != nil {
		t.Fatalf("pin cleared: %+v", s)
	}
}
