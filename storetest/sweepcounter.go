package storetest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/outboxkit/backpressure"
)

// testSweepCounter checks [backpressure.SweepCounter] when the store
// implements it: CountSweep returns what the separate calls return (the
// claimed counts, and the full pending counts or, for a store that counts
// windows, the window); invalid arguments, a cancelled context and a
// mismatched shard count fail; and a call is one round trip.
func testSweepCounter[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("MatchesSeparateCounts", func(t *testing.T) {
		e, sc := setupWith[backpressure.SweepCounter](t, newHarness)
		seeded, partial := e.seedWindow()
		fractions := []backpressure.OwnedShardFraction{e.all}
		if partial != nil {
			fractions = append(fractions, *partial)
		}
		wc, windows := any(e.h.Store).(backpressure.PendingWindowCounter)
		for _, f := range fractions {
			wantClaimed := e.countClaimed(f)
			if len(wantClaimed) == 0 {
				t.Fatalf("seeding: no claimed rows on %v", f)
			}
			for _, capPerRoute := range []int{1, 2, 1000} {
				// Namespaces 0: the full counts, whatever After says.
				for _, after := range []string{"", "m"} {
					w := backpressure.PendingWindow{CapPerRoute: capPerRoute, After: after}
					claimed, pending := e.countSweep(sc, f, w)
					if !maps.Equal(claimed, wantClaimed) {
						t.Errorf("CountSweep(%v, %+v) claimed %v, CountClaimedOutboxRows %v", f, w, claimed, wantClaimed)
					}
					slices.SortFunc(pending, compareRouteCounts)
					if want := e.fullCounts(f, capPerRoute); !slices.Equal(pending, want) {
						t.Errorf("CountSweep(%v, %+v) pending\n\t%v\nCountPendingOutboxRows\n\t%v", f, w, pending, want)
					}
				}
				if !windows {
					continue
				}
				for _, after := range []string{"", seeded[len(seeded)/2], "\U0010FFFF"} {
					for _, n := range []int{1, 3, 1000, math.MaxInt} {
						w := backpressure.PendingWindow{CapPerRoute: capPerRoute, After: after, Namespaces: n}
						claimed, pending := e.countSweep(sc, f, w)
						if !maps.Equal(claimed, wantClaimed) {
							t.Errorf("CountSweep(%v, %+v) claimed %v, CountClaimedOutboxRows %v", f, w, claimed, wantClaimed)
						}
						if want := e.window(wc, f, w); !slices.Equal(pending, want) {
							t.Errorf("CountSweep(%v, %+v) pending\n\t%v\nCountPendingOutboxRowsWindow\n\t%v", f, w, pending, want)
						}
					}
				}
			}
		}
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		e, sc := setupWith[backpressure.SweepCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		for _, w := range []backpressure.PendingWindow{
			{CapPerRoute: 0},
			{CapPerRoute: -1},
			{CapPerRoute: 0, Namespaces: 1},
			{CapPerRoute: 10, Namespaces: -1},
		} {
			if claimed, pending, err := sc.CountSweep(e.ctx, e.all, w); err == nil {
				t.Errorf("CountSweep(%+v) = %v, %v, nil; want an error", w, claimed, pending)
			}
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		e, sc := setupWith[backpressure.SweepCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		if claimed, pending, err := sc.CountSweep(ctx, e.all, backpressure.PendingWindow{CapPerRoute: 10}); err == nil {
			t.Errorf("CountSweep(cancelled context) = %v, %v, nil; want an error", claimed, pending)
		}
	})

	t.Run("ShardCountMismatch", func(t *testing.T) {
		e, sc := setupWith[backpressure.SweepCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		other, err := backpressure.AllShards(e.h.ShardCount + 1)
		if err != nil {
			t.Fatal(err)
		}
		if claimed, pending, err := sc.CountSweep(e.ctx, other, backpressure.PendingWindow{CapPerRoute: 10}); err == nil {
			t.Errorf("CountSweep(shard count %d on a %d-shard store) = %v, %v, nil; want an error", other.ShardCount(), e.h.ShardCount, claimed, pending)
		}
	})

	t.Run("OneRoundTrip", func(t *testing.T) {
		e, sc := setupWith[backpressure.SweepCounter](t, newHarness)
		if e.h.RoundTrips == nil {
			t.Skip("Harness.RoundTrips is nil")
		}
		e.seedWindow()
		ws := []backpressure.PendingWindow{{CapPerRoute: 2}, {CapPerRoute: 1000}}
		if _, ok := any(e.h.Store).(backpressure.PendingWindowCounter); ok {
			ws = append(ws, backpressure.PendingWindow{CapPerRoute: 1, After: "b", Namespaces: 2})
		}
		for _, w := range ws {
			e.oneRoundTrip(fmt.Sprintf("CountSweep(%+v)", w), func() { e.countSweep(sc, e.all, w) })
		}
	})
}

// countSweep calls CountSweep, failing the test on an error, and returns
// the claimed counts without zero entries.
func (e *env[R]) countSweep(sc backpressure.SweepCounter, shards backpressure.OwnedShardFraction, w backpressure.PendingWindow) (map[string]int, []backpressure.RouteCount) {
	e.t.Helper()
	claimed, pending, err := sc.CountSweep(e.ctx, shards, w)
	if err != nil {
		e.t.Fatalf("CountSweep(%v, %+v): %v", shards, w, err)
	}
	out := make(map[string]int, len(claimed))
	for ns, n := range claimed {
		if n < 0 {
			e.t.Errorf("CountSweep(%v, %+v): namespace %q has claimed count %d", shards, w, ns, n)
		}
		if n > 0 {
			out[ns] = n
		}
	}
	return out, pending
}
