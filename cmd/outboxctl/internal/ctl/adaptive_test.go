package ctl

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// TestSetAdaptive runs set adaptive against both stores: a pin is a
// shared setting (shown, audited with its before and after, validated as
// CheckSettings validates it: 0 is bad usage and changes nothing), auto
// clears it; and the nodes' adaptive ceilings and holds show in tenants
// and why: "held: downstream overloaded, ceiling 3 of 10, retry in 2.1s".
func TestSetAdaptive(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			fill(t, s, c)
			expect := func(wantCode int, want string, args ...string) string {
				t.Helper()
				code, out, errOut := run(t, b, c, args...)
				if code != wantCode || !strings.Contains(out+errOut, want) {
					t.Fatalf("outboxctl %s: exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(args, " "), code, out, errOut, wantCode, want)
				}
				return out
			}
			expect(0, "adaptive=pin:7", "set", "adaptive", "alpha", "pin", "7")
			expect(ExitUsage, "AdaptivePin", "set", "adaptive", "alpha", "pin", "0")
			expect(ExitUsage, "pin N | auto", "set", "adaptive", "alpha", "sometimes")
			expect(ExitUsage, "not a number", "set", "adaptive", "alpha", "pin", "many")
			expect(0, "adaptive=pin:7", "why", "alpha") // the refused calls changed nothing
			audit := expect(0, "adaptive=pin:7", "audit", "-namespace", "alpha")
			if !strings.Contains(audit, "tester") || strings.Count(audit, "\n") != 2 {
				t.Fatalf("audit does not name the operator: %s", audit)
			}
			if out := expect(0, "alpha: -", "set", "adaptive", "alpha", "auto"); strings.Contains(out, "pin") {
				t.Fatalf("auto left a pin: %s", out)
			}
			expect(0, "adaptive=pin:7  -", "audit", "-namespace", "alpha", "-limit", "1") // before and after
			for i, e := range []outbox.PlanEntry{
				{Namespace: "alpha", Quota: 20, Weight: 1, Ceiling: 10, Adaptive: 3, Hold: 2100 * time.Millisecond, Claimed: 3, Pending: 5, Held: 5, Reason: "adaptive"},
				{Namespace: "alpha", Quota: 20, Weight: 1, Ceiling: 10, Claimed: 2, Pending: 3, Granted: 3},
			} {
				rep := outbox.NodeReport{Node: fmt.Sprintf("node-%d", i), OwnedShards: 8, ShardCount: 16, Workers: 4, Plan: []outbox.PlanEntry{e}}
				if err := s.PutNodeReport(t.Context(), rep, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			want := "held: downstream overloaded, ceiling 3 of 10, retry in 2.1s"
			expect(0, want, "tenants")
			why := expect(0, "alpha: "+want, "why", "alpha")
			if !strings.Contains(why, "3 of 10") || !strings.Contains(why, "adaptive (retry in 2.1s)") {
				t.Fatalf("why's node table lacks the adaptive ceiling and hold:\n%s", why)
			}
		})
	}
}
