package keptcount_test

import (
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/keptcount"
	"github.com/outboxkit/backpressure/outbox"
)

func TestParseSnapshot(t *testing.T) {
	snap, ok := keptcount.ParseSnapshot("100:105:101,103")
	if !ok {
		t.Fatal("100:105:101,103 not read")
	}
	for x, want := range map[uint64]bool{99: true, 100: true, 101: false, 102: true, 103: false, 104: true, 105: false, 200: false} {
		if snap.Sees(x) != want {
			t.Errorf("Sees(%d) = %v, want %v", x, !want, want)
		}
	}
	for _, bad := range []string{"", "1:2", "a:2:", "5:4:", "1:5:x"} {
		if _, ok := keptcount.ParseSnapshot(bad); ok {
			t.Errorf("ParseSnapshot(%q) read", bad)
		}
	}
	if (keptcount.Snapshot{}).Sees(1) {
		t.Error("the zero Snapshot sees a transaction")
	}
}

// TestNotified: a notice adds its rows unless the read that set the
// namespace saw its transaction; a notice of a transaction a claim saw
// makes the namespace stale; a notice heard while a change is in flight
// waits for it; a read in flight replays the notices it did not see.
func TestNotified(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all, _ := backpressure.AllShards(4)
	a, b := outbox.Route{Namespace: "a", TaskQueue: "q"}, outbox.Route{Namespace: "b", TaskQueue: "q"}
	snap := func(s string) keptcount.Snapshot {
		x, ok := keptcount.ParseSnapshot(s)
		if !ok {
			t.Fatal(s)
		}
		return x
	}
	k := keptcount.New(10 * time.Second)
	k.Listening(true)
	if _, ok := k.Refreshed(k.Ticket(now), snap("100:105:102"), all, map[string]int{}, nil, []keptcount.RouteRead{{Route: a, Count: 1}}, 100); !ok {
		t.Fatal("full read not kept")
	}
	pending := func() map[outbox.Route]int {
		t.Helper()
		got, ok := k.Pending(all, now, 100)
		if !ok {
			return nil
		}
		m := map[outbox.Route]int{}
		for _, rc := range got {
			m[rc.Route] = rc.Count
		}
		return m
	}
	notice := func(x uint64, r outbox.Route, n int) keptcount.Notice {
		return keptcount.Notice{Xact: x, Rows: []keptcount.Added{{Route: r, Shard: 1, Count: n}}}
	}
	k.Notified(notice(102, a, 2)) // in progress for the read: not seen
	k.Notified(notice(101, a, 5)) // seen by the read
	if got := pending(); got[a] != 3 || len(got) != 1 {
		t.Fatalf("after two notices: %v, want a: 3", got)
	}
	// A read in flight: a notice it saw and one it did not.
	tk := k.Ticket(now)
	k.Notified(notice(106, b, 1))
	k.Notified(notice(107, b, 4))
	if _, ok := k.Refreshed(tk, snap("107:108:107"), all, map[string]int{}, nil, []keptcount.RouteRead{{Route: a, Count: 3}, {Route: b, Count: 1}}, 100); !ok {
		t.Fatal("read with notices in flight not kept")
	}
	if got := pending(); got[a] != 3 || got[b] != 5 {
		t.Fatalf("after the read: %v, want a: 3, b: 5", got)
	}
	// A claim that saw transaction 109, whose notice comes after it.
	ch := k.Begin()
	k.Notified(notice(108, b, 1)) // waits for the claim: which did not see it
	row := outbox.Row{ID: 1, Namespace: "a", TaskQueue: "q", Shard: 1, Token: 1, LeaseExpiresAt: now.Add(time.Minute)}
	ch.ClaimedSeen([]outbox.Row{row}, snap("108:110:108"))
	if got := pending(); got[a] != 2 || got[b] != 6 {
		t.Fatalf("after the claim: %v, want a: 2, b: 6", got)
	}
	k.Notified(notice(109, a, 1)) // the claim saw it: may have taken its row
	if got := pending(); got != nil {
		t.Fatalf("after a notice the claim saw: %v, want a stale namespace", got)
	}
}
