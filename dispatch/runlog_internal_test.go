package dispatch

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure"
)

// Against a naive reference that remembers every line forever: the limiter
// emits a line for a namespace held for a reason of its own exactly when
// it has had none in the interval before now, and keeps no more entries
// than the namespaces it logged in the last two intervals.
func TestHeldLimiterAgainstReference(t *testing.T) {
	reasons := []backpressure.HoldReason{backpressure.HeldNone, backpressure.HeldAtCeiling, backpressure.HeldBudget,
		backpressure.HeldPaused, backpressure.HeldInvalidRoute}
	rapid.Check(t, func(t *rapid.T) {
		const interval = 10 * time.Second
		h := heldLimiter{interval: interval}
		ref := map[string]time.Time{}
		var lines []struct {
			ns string
			at time.Time
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(15*time.Second)).Draw(t, "advance")))
			var plan backpressure.Plan
			for i := range rapid.IntRange(0, 6).Draw(t, "namespaces") {
				plan.Namespaces = append(plan.Namespaces, backpressure.NamespaceReport{
					Namespace: fmt.Sprint("ns-", i),
					Held:      rapid.IntRange(0, 2).Draw(t, "held"),
					Reason:    rapid.SampledFrom(reasons).Draw(t, "reason"),
				})
			}
			var want []string
			for _, rep := range plan.Namespaces {
				own := rep.Reason == backpressure.HeldAtCeiling || rep.Reason == backpressure.HeldPaused || rep.Reason == backpressure.HeldInvalidRoute
				if last, ok := ref[rep.Namespace]; rep.Held > 0 && own && (!ok || now.Sub(last) >= interval) {
					ref[rep.Namespace] = now
					want = append(want, rep.Namespace)
				}
			}
			var got []string
			h.note(now, plan, func(rep backpressure.NamespaceReport) {
				got = append(got, rep.Namespace)
				lines = append(lines, struct {
					ns string
					at time.Time
				}{rep.Namespace, now})
			})
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d at %v: lines for %v, want %v", step, now, got, want)
			}
			recent := map[string]bool{}
			for _, l := range lines {
				if now.Sub(l.at) < 2*interval {
					recent[l.ns] = true
				}
			}
			if len(h.last) > len(recent) {
				t.Fatalf("step %d: the limiter keeps %d entries, but only %d namespaces were logged in the last two intervals", step, len(h.last), len(recent))
			}
		}
	})
}
