package storetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testWindow checks [backpressure.PendingWindowCounter] when the store
// implements it: a window's counts are exactly the full
// CountPendingOutboxRows counts restricted to the first Namespaces
// namespaces with claimable rows in the cyclic order after After, sorted by
// namespace then task queue; invalid windows, a cancelled context and a
// mismatched shard count fail; and a window is one round trip.
func testWindow[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("EmptyStore", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		for _, n := range []int{1, 3} {
			w := backpressure.PendingWindow{CapPerRoute: 10, After: "m", Namespaces: n}
			if got := e.window(wc, e.all, w); len(got) != 0 {
				t.Errorf("CountPendingOutboxRowsWindow(empty, %+v) = %v, want none", w, got)
			}
		}
	})

	t.Run("MatchesFullCounts", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		seeded, partial := e.seedWindow()
		fractions := []struct {
			name   string
			shards backpressure.OwnedShardFraction
		}{{"all shards", e.all}}
		if partial != nil {
			fractions = append(fractions, struct {
				name   string
				shards backpressure.OwnedShardFraction
			}{"even shards", *partial})
		}
		// Afters: "", before the first namespace, every seeded namespace
		// (with and without claimable rows), between two, after the last.
		afters := []string{"", "0", "A"}
		for _, ns := range seeded {
			afters = append(afters, ns, ns+"0")
		}
		afters = append(afters, "zzzz", "\u00ff", "\U0010FFFF")
		for _, f := range fractions {
			for _, capPerRoute := range []int{1, 2, 1000} {
				full := e.fullCounts(f.shards, capPerRoute)
				qualifying := namespacesOf(full)
				if f.name == "all shards" && capPerRoute == 1 {
					want := []string{"Zeta", "alpha", "alpha2", "delta", "epsilon", "gamma", "odd", "é"}
					if !slices.Equal(qualifying, want) {
						t.Fatalf("seeding: namespaces with claimable rows on all shards = %q, want %q", qualifying, want)
					}
				}
				sizes := slices.Compact(slices.Sorted(slices.Values([]int{1, 2, 3, len(qualifying), len(qualifying) + 1, 1000})))
				for _, after := range afters {
					for _, n := range sizes {
						w := backpressure.PendingWindow{CapPerRoute: capPerRoute, After: after, Namespaces: n}
						want := windowReference(full, qualifying, w)
						got := e.window(wc, f.shards, w)
						if !slices.Equal(got, want) {
							t.Errorf("%s: CountPendingOutboxRowsWindow(%+v) =\n\t%v\nwant (from CountPendingOutboxRows)\n\t%v", f.name, w, got, want)
						}
					}
				}
			}
		}
	})

	t.Run("HugeWindow", func(t *testing.T) {
		// A window larger than any count of namespaces is every
		// namespace: the full counts, sorted.
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		e.seedWindow()
		want := e.fullCounts(e.all, 3)
		for _, n := range []int{1<<31 - 1, 1 << 31, math.MaxInt} {
			w := backpressure.PendingWindow{CapPerRoute: 3, After: "delta", Namespaces: n}
			if got := e.window(wc, e.all, w); !slices.Equal(got, want) {
				t.Errorf("CountPendingOutboxRowsWindow(%+v) =\n\t%v\nwant every namespace\n\t%v", w, got, want)
			}
		}
	})

	t.Run("NoShardsOwned", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 20)...)
		none := e.fraction(func(int) bool { return false })
		w := backpressure.PendingWindow{CapPerRoute: 10, Namespaces: 2}
		if got := e.window(wc, none, w); len(got) != 0 {
			t.Errorf("CountPendingOutboxRowsWindow(no shards, %+v) = %v, want none", w, got)
		}
	})

	t.Run("InvalidWindow", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		for _, w := range []backpressure.PendingWindow{
			{CapPerRoute: 0, Namespaces: 1},
			{CapPerRoute: -1, Namespaces: 1},
			{CapPerRoute: 10, Namespaces: 0},
			{CapPerRoute: 10, Namespaces: -3},
			{CapPerRoute: 0, Namespaces: 0},
		} {
			if got, err := wc.CountPendingOutboxRowsWindow(e.ctx, e.all, w); err == nil {
				t.Errorf("CountPendingOutboxRowsWindow(%+v) = %v, nil; want an error", w, got)
			}
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		w := backpressure.PendingWindow{CapPerRoute: 10, Namespaces: 1}
		if got, err := wc.CountPendingOutboxRowsWindow(ctx, e.all, w); err == nil {
			t.Errorf("CountPendingOutboxRowsWindow(cancelled context) = %v, nil; want an error", got)
		}
	})

	t.Run("ShardCountMismatch", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		other, err := backpressure.AllShards(e.h.ShardCount + 1)
		if err != nil {
			t.Fatal(err)
		}
		w := backpressure.PendingWindow{CapPerRoute: 10, Namespaces: 1}
		if got, err := wc.CountPendingOutboxRowsWindow(e.ctx, other, w); err == nil {
			t.Errorf("CountPendingOutboxRowsWindow(shard count %d on a %d-shard store) = %v, nil; want an error", other.ShardCount(), e.h.ShardCount, got)
		}
	})

	t.Run("OneRoundTrip", func(t *testing.T) {
		e, wc := setupWith[backpressure.PendingWindowCounter](t, newHarness)
		if e.h.RoundTrips == nil {
			t.Skip("Harness.RoundTrips is nil")
		}
		seeded, _ := e.seedWindow()
		var windows []backpressure.PendingWindow
		for _, after := range []string{"", seeded[len(seeded)/2], "\U0010FFFF"} {
			for _, n := range []int{1, 3, 1000} {
				windows = append(windows, backpressure.PendingWindow{CapPerRoute: 2, After: after, Namespaces: n})
			}
		}
		for _, w := range windows {
			e.oneRoundTrip(fmt.Sprintf("CountPendingOutboxRowsWindow(%+v)", w), func() { e.window(wc, e.all, w) })
		}
	})
}

// seedWindow enqueues rows in namespaces of every kind a window walk meets
// and returns the namespaces, sorted, with, when the store has at least two
// shards, the fraction owning the even shards:
//
//   - "Zeta", "alpha", "alpha2", "delta", "epsilon", "é": claimable rows on
//     one or more routes, on all shards (names that sort differently by
//     byte than by any locale's collation, and a prefix of another);
//   - "beta": every row under a live lease;
//   - "gamma": one route leased, the other claimable;
//   - "eta": every row retried with a delay still running;
//   - "odd": claimable rows, all on odd shards (none on the even fraction).
func (e *env[R]) seedWindow() ([]string, *backpressure.OwnedShardFraction) {
	e.t.Helper()
	var ms []outbox.Message
	add := func(ns, tq string, n int) {
		ms = append(ms, msgs(ns, tq, ns+"/"+tq, n)...)
	}
	add("Zeta", "q", 3)
	add("alpha", "q1", 5)
	add("alpha", "q2", 1)
	add("alpha2", "q", 2)
	add("beta", "q1", 4)
	add("beta", "q2", 2)
	add("delta", "a", 1)
	add("delta", "b", 4)
	add("delta", "c", 2)
	add("epsilon", "q", 6)
	add("eta", "q", 3)
	add("gamma", "leased", 3)
	add("gamma", "open", 2)
	add("é", "q", 2)
	// "odd": rows whose keys land on odd shards only, so a node owning the
	// even shards sees nothing of it.
	for i, n := 0, 0; n < 4 && e.h.ShardCount >= 2; i++ {
		key := "odd/q-" + strconv.Itoa(i)
		if backpressure.ShardFor(key, e.h.ShardCount)%2 == 1 {
			ms = append(ms, msg("odd", "q", key))
			n++
		}
	}
	if e.h.ShardCount < 2 {
		add("odd", "q", 2)
	}
	e.enqueue(ms...)
	e.need("claim beta and gamma/leased", e.claim(e.all, scope("beta", "q1", 100), scope("beta", "q2", 100), scope("gamma", "leased", 100)), 9)
	for _, r := range e.need("claim eta", e.claim(e.all, scope("eta", "q", 100)), 3) {
		e.retry(r, time.Hour)
	}
	var seeded []string
	for _, m := range ms {
		if !slices.Contains(seeded, m.Namespace) {
			seeded = append(seeded, m.Namespace)
		}
	}
	slices.Sort(seeded)
	if e.h.ShardCount < 2 {
		return seeded, nil
	}
	even := e.fraction(func(s int) bool { return s%2 == 0 })
	return seeded, &even
}

// window calls CountPendingOutboxRowsWindow, failing the test on an error.
func (e *env[R]) window(wc backpressure.PendingWindowCounter, shards backpressure.OwnedShardFraction, w backpressure.PendingWindow) []backpressure.RouteCount {
	e.t.Helper()
	rc, err := wc.CountPendingOutboxRowsWindow(e.ctx, shards, w)
	if err != nil {
		e.t.Fatalf("CountPendingOutboxRowsWindow(%v, %+v): %v", shards, w, err)
	}
	return rc
}

// fullCounts returns CountPendingOutboxRows(shards, capPerRoute), checked
// (no route twice, counts ≥ 1) and sorted by namespace then task queue.
func (e *env[R]) fullCounts(shards backpressure.OwnedShardFraction, capPerRoute int) []backpressure.RouteCount {
	e.t.Helper()
	m := e.countPending(shards, capPerRoute)
	out := make([]backpressure.RouteCount, 0, len(m))
	for r, n := range m {
		out = append(out, backpressure.RouteCount{Route: r, Count: n})
	}
	slices.SortFunc(out, compareRouteCounts)
	return out
}

// compareRouteCounts orders route counts by route (see
// [backpressure.Route.Compare]).
func compareRouteCounts(a, b backpressure.RouteCount) int { return a.Route.Compare(b.Route) }

// namespacesOf returns the distinct namespaces of sorted counts, in order.
func namespacesOf(counts []backpressure.RouteCount) []string {
	var out []string
	for _, c := range counts {
		if len(out) == 0 || out[len(out)-1] != c.Route.Namespace {
			out = append(out, c.Route.Namespace)
		}
	}
	return out
}

// windowReference is the window w of the full counts (sorted, with
// qualifying their sorted namespaces), as PendingWindowCounter specifies
// it: the namespaces greater than w.After in ascending byte order, then the
// rest from the smallest (After itself last), the first w.Namespaces of
// them, with all their routes, sorted.
func windowReference(full []backpressure.RouteCount, qualifying []string, w backpressure.PendingWindow) []backpressure.RouteCount {
	i, _ := slices.BinarySearchFunc(qualifying, w.After, func(ns, after string) int {
		if ns <= after {
			return -1
		}
		return 1
	})
	cyclic := append(slices.Clone(qualifying[i:]), qualifying[:i]...)
	in := map[string]bool{}
	for _, ns := range cyclic[:min(w.Namespaces, len(cyclic))] {
		in[ns] = true
	}
	out := []backpressure.RouteCount{}
	for _, c := range full {
		if in[c.Route.Namespace] {
			out = append(out, c)
		}
	}
	return out
}
