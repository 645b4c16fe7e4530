package backpressure

import (
	"testing"
	"time"
)

// TestNextTokenAtKeepsTheRate: a backlogged namespace alone at r = 40/s,
// burst 10, swept at the instants NextTokenAt names (a fake clock: each
// sweep plans at the due time and claims every token it grants) starts at
// least 0.95·r over 60s, and never more than r·T + b in any window from
// the start. Without a rate NextTokenAt says no; the first token of an
// empty bucket is due 1/r after the start.
func TestNextTokenAtKeepsTheRate(t *testing.T) {
	const perSecond, burst, span = 40.0, 10, 60 * time.Second
	now := epoch
	b, err := newAt(Config{BatchSize: 100, DefaultQuota: Unlimited, Rates: map[string]Rate{"a": {PerSecond: perSecond, Burst: burst}}},
		mustAllShards(t, 4), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.NextTokenAt("free", now); ok {
		t.Fatal("NextTokenAt of a namespace without a rate: ok")
	}
	due, ok := b.NextTokenAt("a", now)
	if want := now.Add(25 * time.Millisecond); !ok || due.Before(want) || due.After(want.Add(time.Microsecond)) {
		t.Fatalf("first token due %v (ok %v), want %v", due.Sub(epoch), ok, want.Sub(epoch))
	}
	now = due
	snap := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 1_000_000}}}
	started := 0
	for now.Sub(epoch) < span {
		p, err := b.PlanAt(snap, now)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := p.Namespace("a")
		if r.Granted == 0 {
			t.Fatalf("at %v: a sweep at the due time granted nothing: %+v", now.Sub(epoch), r)
		}
		if err := b.SpendTokensAt(map[string]int{"a": r.Granted}, now); err != nil {
			t.Fatal(err)
		}
		started += r.Granted
		if bound := perSecond*now.Sub(epoch).Seconds() + burst; float64(started) > bound {
			t.Fatalf("at %v: %d started, above r·T + b = %v", now.Sub(epoch), started, bound)
		}
		next, ok := b.NextTokenAt("a", now)
		if !ok || !next.After(now) {
			t.Fatalf("at %v: next token due %v (ok %v), want after now: the bucket was emptied", now.Sub(epoch), next.Sub(epoch), ok)
		}
		now = next
	}
	if got := float64(started) / now.Sub(epoch).Seconds(); got < 0.95*perSecond {
		t.Fatalf("started %.2f rows/s, below 0.95·r = %v", got, 0.95*perSecond)
	}
}

func mustAllShards(t *testing.T, n int) OwnedShardFraction {
	t.Helper()
	f, err := AllShards(n)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
