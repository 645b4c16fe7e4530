package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// countShape is one combination of [backpressure.CountParams] a Counter
// serves or refuses as a whole: with or without the claimed counts, a
// window or every namespace.
type countShape struct {
	claimed, window bool
}

var countShapes = []countShape{{false, false}, {false, true}, {true, false}, {true, true}}

func (c countShape) String() string {
	s := "full counts"
	if c.window {
		s = "a window"
	}
	if c.claimed {
		s += " with claimed"
	}
	return s
}

// params returns the CountParams of the shape: n namespaces (≥ 1) from
// after for a window, else every namespace, each route capped at cap.
func (c countShape) params(capPerRoute int, after string, n int) backpressure.CountParams {
	p := backpressure.CountParams{CapPerRoute: capPerRoute, After: after, Claimed: c.claimed}
	if c.window {
		p.Namespaces = n
	}
	return p
}

// servedShapes returns the shapes c serves, asking for each with ctx: a
// shape c does not serve is refused with ErrNotSupported whatever the
// context, and any other answer means c serves it. With a cancelled ctx
// (see cancelled) it costs no I/O and works on a closed store too.
func servedShapes(ctx context.Context, c backpressure.Counter, shards backpressure.OwnedShardFraction) []countShape {
	var out []countShape
	for _, sh := range countShapes {
		if _, _, err := c.CountOutboxRows(ctx, shards, sh.params(1, "", 1)); !errors.Is(err, backpressure.ErrNotSupported) {
			out = append(out, sh)
		}
	}
	return out
}

// setupCounter builds a fresh store and returns it as a Counter with the
// shapes it serves, skipping the test when it is not one and failing it
// when it serves none.
func setupCounter[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) (*env[R], backpressure.Counter, []countShape) {
	t.Helper()
	e, c := setupWith[backpressure.Counter](t, newHarness)
	served := servedShapes(cancelled(e.ctx), c, e.all)
	if len(served) == 0 {
		t.Fatalf("the store's Counter serves none of %v", countShapes)
	}
	return e, c, served
}

// testCounter checks [backpressure.Counter] when the store implements it,
// for each shape of CountParams it serves (each combination of Claimed and
// window or not; it must serve at least one): the pending counts are
// exactly the full CountPendingOutboxRows counts or, for a window, those
// restricted to the first Namespaces namespaces with claimable rows in the
// cyclic order after After, sorted by namespace then task queue; the
// claimed counts, when asked for, are CountClaimedOutboxRows's, and nil
// otherwise; invalid params, a cancelled context and a mismatched shard
// count fail; and a call is one round trip. A shape it does not serve is
// refused with ErrNotSupported at once, whatever the context, the shards
// and the other fields, without a round trip.
func testCounter[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("EmptyStore", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		for _, sh := range served {
			for _, n := range []int{1, 3} {
				p := sh.params(10, "m", n)
				if claimed, got := e.count(c, e.all, p); len(got) != 0 || len(claimed) != 0 {
					t.Errorf("CountOutboxRows(empty, %+v) = %v, %v; want none", p, claimed, got)
				}
			}
		}
	})

	t.Run("MatchesSeparateCounts", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
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
			wantClaimed := e.countClaimed(f.shards)
			if len(wantClaimed) == 0 {
				t.Fatalf("seeding: no claimed rows on %s", f.name)
			}
			for _, capPerRoute := range []int{1, 2, 1000} {
				full := e.fullCounts(f.shards, capPerRoute)
				qualifying := namespacesOf(full)
				if f.name == "all shards" && capPerRoute == 1 {
					want := []string{"Zeta", "alpha", "alpha2", "delta", "epsilon", "gamma", "odd", "é"}
					if !slices.Equal(qualifying, want) {
						t.Fatalf("seeding: namespaces with claimable rows on all shards = %q, want %q", qualifying, want)
					}
				}
				sizes := slices.Compact(slices.Sorted(slices.Values([]int{1, 2, 3, len(qualifying), len(qualifying) + 1, 1000, math.MaxInt})))
				for _, sh := range served {
					if !sh.window {
						// Every namespace, whatever After says.
						for _, after := range []string{"", "m"} {
							p := sh.params(capPerRoute, after, 0)
							claimed, got := e.count(c, f.shards, p)
							slices.SortFunc(got, compareRouteCounts)
							if !slices.Equal(got, full) {
								t.Errorf("%s: CountOutboxRows(%+v) pending\n\t%v\nwant (from CountPendingOutboxRows)\n\t%v", f.name, p, got, full)
							}
							e.checkClaimed(f.name, p, claimed, wantClaimed)
						}
						continue
					}
					for _, after := range afters {
						for _, n := range sizes {
							p := sh.params(capPerRoute, after, n)
							want := windowReference(full, qualifying, p)
							claimed, got := e.count(c, f.shards, p)
							if !slices.Equal(got, want) {
								t.Errorf("%s: CountOutboxRows(%+v) pending\n\t%v\nwant (from CountPendingOutboxRows)\n\t%v", f.name, p, got, want)
							}
							e.checkClaimed(f.name, p, claimed, wantClaimed)
						}
					}
				}
			}
		}
	})

	t.Run("HugeWindow", func(t *testing.T) {
		// A window larger than any count of namespaces is every
		// namespace: the full counts, sorted.
		e, c, served := setupCounter(t, newHarness)
		e.seedWindow()
		want := e.fullCounts(e.all, 3)
		for _, sh := range served {
			if !sh.window {
				continue
			}
			for _, n := range []int{1<<31 - 1, 1 << 31, math.MaxInt} {
				p := sh.params(3, "delta", n)
				if _, got := e.count(c, e.all, p); !slices.Equal(got, want) {
					t.Errorf("CountOutboxRows(%+v) =\n\t%v\nwant every namespace\n\t%v", p, got, want)
				}
			}
		}
	})

	t.Run("NoShardsOwned", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 20)...)
		e.need("claim", e.claim(e.all, scope("acme", "emails", 5)), 5)
		none := e.fraction(func(int) bool { return false })
		for _, sh := range served {
			p := sh.params(10, "", 2)
			if claimed, got := e.count(c, none, p); len(got) != 0 || len(claimed) != 0 {
				t.Errorf("CountOutboxRows(no shards, %+v) = %v, %v; want none", p, claimed, got)
			}
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		for _, sh := range served {
			bad := []backpressure.CountParams{sh.params(0, "", 1), sh.params(-1, "", 1)}
			if sh.window {
				bad = append(bad, backpressure.CountParams{CapPerRoute: 10, Namespaces: -3, Claimed: sh.claimed})
			}
			for _, p := range bad {
				if claimed, got, err := c.CountOutboxRows(e.ctx, e.all, p); err == nil || errors.Is(err, backpressure.ErrNotSupported) {
					t.Errorf("CountOutboxRows(%+v) = %v, %v, %v; want an error other than ErrNotSupported", p, claimed, got, err)
				}
			}
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		for _, sh := range served {
			p := sh.params(10, "", 1)
			if claimed, got, err := c.CountOutboxRows(ctx, e.all, p); !errors.Is(err, context.Canceled) {
				t.Errorf("CountOutboxRows(cancelled context, %+v) = %v, %v, %v; want an error matching context.Canceled", p, claimed, got, err)
			}
		}
	})

	t.Run("ShardCountMismatch", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		e.enqueue(msgs("acme", "emails", "k", 5)...)
		other, err := backpressure.AllShards(e.h.ShardCount + 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range served {
			p := sh.params(10, "", 1)
			if claimed, got, err := c.CountOutboxRows(e.ctx, other, p); err == nil || errors.Is(err, backpressure.ErrNotSupported) {
				t.Errorf("CountOutboxRows(shard count %d on a %d-shard store, %+v) = %v, %v, %v; want an error", other.ShardCount(), e.h.ShardCount, p, claimed, got, err)
			}
		}
	})

	t.Run("NotSupportedAtOnce", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		e.seedWindow()
		other, err := backpressure.AllShards(e.h.ShardCount + 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range countShapes {
			if slices.Contains(served, sh) {
				continue
			}
			// Refused with any context, shards and fields, without a
			// round trip.
			for _, p := range []backpressure.CountParams{sh.params(1, "", 1), sh.params(1000, "m", 1000), sh.params(0, "", 1)} {
				for _, shards := range []backpressure.OwnedShardFraction{e.all, other} {
					before := e.roundTrips()
					if claimed, got, err := c.CountOutboxRows(e.ctx, shards, p); !errors.Is(err, backpressure.ErrNotSupported) || claimed != nil || got != nil {
						t.Errorf("%v is not served (refused with a cancelled context), but CountOutboxRows(%v, %+v) = %v, %v, %v", sh, shards, p, claimed, got, err)
					}
					if n := e.roundTrips() - before; n != 0 {
						t.Errorf("CountOutboxRows(%+v), not served, made %d round trips, want 0", p, n)
					}
				}
			}
		}
	})

	t.Run("OneRoundTrip", func(t *testing.T) {
		e, c, served := setupCounter(t, newHarness)
		if e.h.RoundTrips == nil {
			t.Skip("Harness.RoundTrips is nil")
		}
		seeded, _ := e.seedWindow()
		for _, sh := range served {
			var ps []backpressure.CountParams
			if !sh.window {
				ps = []backpressure.CountParams{sh.params(2, "", 0), sh.params(1000, "", 0)}
			}
			for _, after := range []string{"", seeded[len(seeded)/2], "\U0010FFFF"} {
				for _, n := range []int{1, 3, 1000} {
					if sh.window {
						ps = append(ps, sh.params(2, after, n))
					}
				}
			}
			for _, p := range ps {
				e.oneRoundTrip(fmt.Sprintf("CountOutboxRows(%+v)", p), func() { e.count(c, e.all, p) })
			}
		}
	})
}

// count calls CountOutboxRows, failing the test on an error, and returns
// the claimed counts without zero entries (nil if the call returned nil).
func (e *env[R]) count(c backpressure.Counter, shards backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount) {
	e.t.Helper()
	claimed, pending, err := c.CountOutboxRows(e.ctx, shards, p)
	if err != nil {
		e.t.Fatalf("CountOutboxRows(%v, %+v): %v", shards, p, err)
	}
	if claimed == nil {
		return nil, pending
	}
	out := make(map[string]int, len(claimed))
	for ns, n := range claimed {
		if n < 0 {
			e.t.Errorf("CountOutboxRows(%v, %+v): namespace %q has claimed count %d", shards, p, ns, n)
		}
		if n > 0 {
			out[ns] = n
		}
	}
	return out, pending
}

// checkClaimed checks the claimed counts of CountOutboxRows(p): those of
// CountClaimedOutboxRows when p.Claimed, else nil.
func (e *env[R]) checkClaimed(where string, p backpressure.CountParams, claimed, want map[string]int) {
	e.t.Helper()
	switch {
	case p.Claimed && (claimed == nil || !maps.Equal(claimed, want)):
		e.t.Errorf("%s: CountOutboxRows(%+v) claimed %v, CountClaimedOutboxRows %v", where, p, claimed, want)
	case !p.Claimed && claimed != nil:
		e.t.Errorf("%s: CountOutboxRows(%+v) claimed %v, want nil: not asked for", where, p, claimed)
	}
}

// cancelled returns a context derived from ctx and already cancelled.
func cancelled(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return ctx
}

// roundTrips returns the harness's round-trip count, 0 without one.
func (e *env[R]) roundTrips() int64 {
	if e.h.RoundTrips == nil {
		return 0
	}
	return e.h.RoundTrips()
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
// [outbox.Route.Compare]).
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

// windowReference is the window p describes of the full counts (sorted,
// with qualifying their sorted namespaces), as [backpressure.CountParams]
// specifies it: the namespaces greater than p.After in ascending byte
// order, then the rest from the smallest (After itself last), the first
// p.Namespaces of them, with all their routes, sorted.
func windowReference(full []backpressure.RouteCount, qualifying []string, w backpressure.CountParams) []backpressure.RouteCount {
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
