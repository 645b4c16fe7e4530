package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// The admin package's pages and views are tested end to end against real
// stores in cmd/outboxctl (a module that may import sqlitestore and
// pgstore); these are its pure parts.

func TestBackTo(t *testing.T) {
	for _, c := range []struct{ path, back, want string }{
		{"/pause", "./tenant?ns=a", "./tenant?ns=a"},
		{"/dead/requeue", "./dead?ns=a&after=k", "../dead?ns=a&after=k"},
		{"/dead/requeue", "./", "../"},
		{"/pause", "", "./"},
		{"/pause", "https://evil.example/", "./"},
		{"/pause", "//evil.example/", "./"},
		{"/pause", "./..//x", "./"},
		{"/pause", "./a\r\nSet-Cookie: x", "./"},
		{"/dead/purge", "./../../etc", "../"},
	} {
		if got := backTo(c.path, c.back); got != c.want {
			t.Errorf("backTo(%q, %q) = %q, want %q", c.path, c.back, got, c.want)
		}
	}
}

func TestAddPlan(t *testing.T) {
	var tn Tenant
	for i, e := range []outbox.PlanEntry{
		{Quota: 4, Weight: 1, Ceiling: 2, Granted: 1, Held: 3, Reason: "budget"},
		{Quota: 4, Weight: 1, Ceiling: 3, Held: 5, Reason: "at-ceiling"},
		{Quota: 5, Weight: 1, Ceiling: backpressure.Unlimited, Reason: ""},
	} {
		tn.addPlan(e)
		want := []Tenant{
			{Nodes: 1, Quota: 4, Weight: 1, Ceiling: 2, Granted: 1, Held: 3, Reason: "budget"},
			{Nodes: 2, Quota: 4, Weight: 1, Ceiling: 5, Granted: 1, Held: 8, Reason: "at-ceiling"},
			{Nodes: 3, Quota: 4, Weight: 1, Ceiling: backpressure.Unlimited, Granted: 1, Held: 8, Reason: "at-ceiling", Mixed: true},
		}[i]
		if tn != want {
			t.Errorf("step %d: addPlan(%+v) = %+v, want %+v", i, e, tn, want)
		}
	}
	tn.Settings.Paused = true
	tn.settle()
	if tn.Reason != "paused" {
		t.Errorf("a tenant paused by its settings says %q, want paused", tn.Reason)
	}
}

func TestCountAndAge(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if Count(backpressure.Unlimited) != "unlimited" || Count(7) != "7" {
		t.Errorf("Count: %q, %q", Count(backpressure.Unlimited), Count(7))
	}
	if Age(now, time.Time{}) != "-" || Age(now, now.Add(-90500*time.Millisecond)) != "1m30s" {
		t.Errorf("Age: %q, %q", Age(now, time.Time{}), Age(now, now.Add(-90500*time.Millisecond)))
	}
}

// TestEveryHoldReason (issue 29, item 13): a tenant that some node's plan
// holds has that plan's reason, whatever it is (rate included, and a
// reason a later planner adds), and the summary says what holds it.
func TestEveryHoldReason(t *testing.T) {
	reasons := []string{"overloaded"} // a reason no version knows yet
	for r := backpressure.HoldReason(1); !strings.HasPrefix(r.String(), "HoldReason("); r++ {
		reasons = append(reasons, r.String())
	}
	for _, reason := range reasons {
		var tn Tenant
		tn.Rows.Ready = 9
		tn.addPlan(outbox.PlanEntry{Quota: 10, Weight: 1, Ceiling: 10, Pending: 9, Granted: 2, Held: 7, Reason: reason})
		tn.settle()
		if tn.Reason != reason {
			t.Errorf("held for %q: Reason %q", reason, tn.Reason)
		}
		tn.Nodes = 1
		if s := (Explanation{Tenant: tn}).Summary(); strings.Contains(s, "nothing holds it") || (reason == "rate" || reason == "overloaded") && !strings.Contains(s, reason) {
			t.Errorf("held for %q: summary %q", reason, s)
		}
	}
	var tn Tenant
	tn.addPlan(outbox.PlanEntry{Held: 3, Reason: "rate"})
	tn.addPlan(outbox.PlanEntry{Held: 3, Reason: "at-ceiling"})
	if tn.Reason != "at-ceiling" {
		t.Errorf("held by rate on one node and at-ceiling on another: %q, want at-ceiling", tn.Reason)
	}
}
