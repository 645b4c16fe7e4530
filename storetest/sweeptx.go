package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testSweepTx checks [backpressure.TxSweeper] when the store implements it:
// the view's counts are the store's own, its claim takes exactly the rows
// the store's claim takes on a twin store (whether or not a count preceded
// it), a fn that fails after claiming leaves every row unchanged, as does a
// fault at any statement, whole sweeps through the view claim what sweeps
// through the plain store do, a sweep is one round trip, and the view
// refuses use after fn returns.
func testSweepTx[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("CountsMatchStore", func(t *testing.T) {
		e, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		_, partial := e.seedWindow()
		fractions := []backpressure.OwnedShardFraction{e.all}
		if partial != nil {
			fractions = append(fractions, *partial)
		}
		for _, f := range fractions {
			wantClaimed := e.countClaimed(f)
			wantPending := map[int][]backpressure.RouteCount{}
			for _, c := range []int{1, 2, 1000} {
				wantPending[c] = e.fullCounts(f, c)
			}
			// For each shape the store's Counter serves, what it
			// returns; the view must serve the same and return the same.
			storeCounter, isCounter := any(e.h.Store).(backpressure.Counter)
			type counted struct {
				p       backpressure.CountParams
				claimed map[string]int
				pending []backpressure.RouteCount
			}
			var wantCounts []counted
			var storeShapes []countShape
			if isCounter {
				storeShapes = servedShapes(cancelled(e.ctx), storeCounter, f)
				for _, sh := range storeShapes {
					p := sh.params(2, "beta", 3)
					claimed, pending := e.count(storeCounter, f, p)
					wantCounts = append(wantCounts, counted{p, claimed, pending})
				}
			}
			e.inTx(ts, func(tx backpressure.OutboxStore[R]) error {
				claimed, err := tx.CountClaimedOutboxRows(e.ctx, f)
				if err != nil {
					return fmt.Errorf("view CountClaimedOutboxRows: %w", err)
				}
				for ns, n := range claimed {
					if n == 0 {
						delete(claimed, ns)
					}
				}
				if !maps.Equal(claimed, wantClaimed) {
					t.Errorf("view CountClaimedOutboxRows = %v, store's %v", claimed, wantClaimed)
				}
				for c, want := range wantPending {
					got, err := tx.CountPendingOutboxRows(e.ctx, f, c)
					if err != nil {
						return fmt.Errorf("view CountPendingOutboxRows(cap %d): %w", c, err)
					}
					if slices.SortFunc(got, compareRouteCounts); !slices.Equal(got, want) {
						t.Errorf("view CountPendingOutboxRows(cap %d) = %v, store's %v", c, got, want)
					}
				}
				vc, ok := tx.(backpressure.Counter)
				if !ok {
					if isCounter {
						t.Errorf("the store implements Counter but its view (%T) does not", tx)
					}
					return nil
				}
				if got := servedShapes(e.ctx, vc, f); !slices.Equal(got, storeShapes) {
					t.Errorf("the view's Counter serves %v, the store's %v", got, storeShapes)
				}
				for _, w := range wantCounts {
					claimed, pending, err := vc.CountOutboxRows(e.ctx, f, w.p)
					if err != nil {
						return fmt.Errorf("view CountOutboxRows(%+v): %w", w.p, err)
					}
					if w.p.Namespaces == 0 {
						slices.SortFunc(pending, compareRouteCounts)
						slices.SortFunc(w.pending, compareRouteCounts)
					}
					for ns, n := range claimed {
						if n == 0 {
							delete(claimed, ns)
						}
					}
					if !slices.Equal(pending, w.pending) || !maps.Equal(claimed, w.claimed) || (claimed == nil) != (w.claimed == nil) {
						t.Errorf("view CountOutboxRows(%+v) = %v, %v; store's %v, %v", w.p, claimed, pending, w.claimed, w.pending)
					}
				}
				return nil
			})
		}
	})

	t.Run("ClaimMatchesStore", func(t *testing.T) {
		// Each case claims on two identical stores, one through the view
		// (after counting at countCap, or not at all when 0) and one
		// directly; the rows and their states must be the same. The claims
		// stay within what a count to 3 or more finds, or go beyond it (a
		// route with fewer rows than its limit, a route with none).
		within := []backpressure.ScopedClaim{scope("a", "q1", 2), scope("a", "q2", 2), scope("b", "q", 3), scope("c", "q", 1)}
		beyond := []backpressure.ScopedClaim{scope("a", "q1", 2), scope("a", "q2", 5), scope("b", "q", 3), scope("c", "q", 1), scope("none", "q", 4)}
		for _, tc := range []struct {
			countCap int
			claims   []backpressure.ScopedClaim
		}{{0, within}, {1, within}, {3, within}, {1000, within}, {3, beyond}, {1000, beyond}} {
			countCap, claims := tc.countCap, tc.claims
			t.Run("count cap "+strconv.Itoa(countCap)+", claims "+strconv.Itoa(len(claims)), func(t *testing.T) {
				via, _ := setupWith[backpressure.TxSweeper[R]](t, newHarness)
				direct := setup(t, newHarness)
				var keys []string
				for _, e := range []*env[R]{via, direct} {
					keys, _ = seedMixed(e)
				}
				want := direct.claim(direct.all, claims...)
				var got []R
				via.inTx(any(via.h.Store).(backpressure.TxSweeper[R]), func(tx backpressure.OutboxStore[R]) error {
					if countCap > 0 {
						if _, err := tx.CountPendingOutboxRows(via.ctx, via.all, countCap); err != nil {
							return fmt.Errorf("view CountPendingOutboxRows: %w", err)
						}
					}
					var err error
					got, err = tx.ClaimOutboxRowsScoped(via.ctx, via.all, claims)
					if err != nil {
						return fmt.Errorf("view ClaimOutboxRowsScoped: %w", err)
					}
					return nil
				})
				if g, w := via.keys(got), direct.keys(want); !slices.Equal(g, w) {
					t.Fatalf("view claimed %v, the store's claim %v", g, w)
				}
				for _, k := range keys {
					a, b := via.inspect(k), direct.inspect(k)
					a.Token, b.Token = 0, 0
					if d := diffRow(b, a); d != "" {
						t.Errorf("row %q after the view's claim differs from the store's: %s", k, d)
					}
				}
			})
		}
	})

	t.Run("ClaimAfterCountOnOtherShards", func(t *testing.T) {
		// Counting on some shards, then claiming on others, must claim
		// what the store's claim takes on those others, and only there.
		for _, countEven := range []bool{false, true} {
			via, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
			if via.h.ShardCount < 2 {
				t.Skip("needs at least two shards")
			}
			direct := setup(t, newHarness)
			ms := msgs("n", "q", "k", 40)
			for _, e := range []*env[R]{via, direct} {
				e.enqueue(ms...)
			}
			even := via.fraction(func(s int) bool { return s%2 == 0 })
			countOn, claimOn := via.all, even
			if countEven {
				countOn, claimOn = even, via.all
			}
			claims := []backpressure.ScopedClaim{scope("n", "q", 6)}
			want := direct.claim(claimOn, claims...)
			if len(want) == 0 {
				t.Fatal("the store's claim took nothing: no row of n/q on the claimed shards")
			}
			var got []R
			via.inTx(ts, func(tx backpressure.OutboxStore[R]) error {
				if _, err := tx.CountPendingOutboxRows(via.ctx, countOn, 100); err != nil {
					return fmt.Errorf("view CountPendingOutboxRows: %w", err)
				}
				var err error
				got, err = tx.ClaimOutboxRowsScoped(via.ctx, claimOn, claims)
				return err
			})
			if g, w := via.keys(got), direct.keys(want); !slices.Equal(g, w) {
				t.Fatalf("counted on %v, the view claimed %v on %v; the store's claim %v", countOn, g, claimOn, w)
			}
			for _, k := range messageKeys(ms) {
				if st := via.inspect(k); st.State == outbox.StateClaimed && !claimOn.Owns(st.Shard) {
					t.Errorf("row %q on shard %d, which %v does not own, was claimed", k, st.Shard, claimOn)
				}
			}
		}
	})

	t.Run("SecondClaimWithoutRecount", func(t *testing.T) {
		// Two claims after one count: the second must take the next
		// oldest rows, as two claims on the store do.
		via, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		direct := setup(t, newHarness)
		for _, e := range []*env[R]{via, direct} {
			e.enqueue(msgs("n", "q", "k", 10)...)
		}
		claims := []backpressure.ScopedClaim{scope("n", "q", 3)}
		want := append(direct.claim(direct.all, claims...), direct.claim(direct.all, claims...)...)
		var got []R
		via.inTx(ts, func(tx backpressure.OutboxStore[R]) error {
			if _, err := tx.CountPendingOutboxRows(via.ctx, via.all, 100); err != nil {
				return fmt.Errorf("view CountPendingOutboxRows: %w", err)
			}
			for i := 0; i < 2; i++ {
				rows, err := tx.ClaimOutboxRowsScoped(via.ctx, via.all, claims)
				if err != nil {
					return err
				}
				got = append(got, rows...)
			}
			return nil
		})
		if g, w := via.keys(got), direct.keys(want); !slices.Equal(g, w) {
			t.Fatalf("two claims after one count took %v, two claims on the store %v", g, w)
		}
	})

	t.Run("ClaimOrder", func(t *testing.T) {
		// The view's claim returns rows in the claim's order (grouped by
		// claim, highest priority first, then oldest), whether it claims
		// the rows a count recorded (count cap 100) or searches (no count),
		// and exactly as the store's own claim does.
		for _, countCap := range []int{0, 1, 100} {
			via, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
			direct := setup(t, newHarness)
			for _, e := range []*env[R]{via, direct} {
				seedPriorities(e)
			}
			claims := []backpressure.ScopedClaim{scope("b", "q", 4), scope("a", "q", 5)}
			want := direct.claim(direct.all, claims...)
			direct.checkClaimOrder("the store's claim", claims, want)
			var got []R
			via.inTx(ts, func(tx backpressure.OutboxStore[R]) error {
				if countCap > 0 {
					if _, err := tx.CountPendingOutboxRows(via.ctx, via.all, countCap); err != nil {
						return fmt.Errorf("view CountPendingOutboxRows: %w", err)
					}
				}
				var err error
				got, err = tx.ClaimOutboxRowsScoped(via.ctx, via.all, claims)
				return err
			})
			step := "the view's claim after a count to " + strconv.Itoa(countCap)
			via.checkClaimOrder(step, claims, got)
			if g, w := via.keysInOrder(got), direct.keysInOrder(want); !slices.Equal(g, w) {
				t.Errorf("%s returned %v, the store's claim %v", step, g, w)
			}
		}
	})

	t.Run("RollbackOnError", func(t *testing.T) {
		e, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		keys, claims := seedMixed(e)
		before := e.snapshot(keys)
		boom := errors.New("storetest: fn failed after claiming")
		var claimed int
		err := ts.InSweepTx(e.ctx, func(tx backpressure.OutboxStore[R]) error {
			if _, err := tx.CountPendingOutboxRows(e.ctx, e.all, 10); err != nil {
				return fmt.Errorf("view CountPendingOutboxRows: %w", err)
			}
			rows, err := tx.ClaimOutboxRowsScoped(e.ctx, e.all, claims)
			if err != nil {
				return fmt.Errorf("view ClaimOutboxRowsScoped: %w", err)
			}
			claimed = len(rows)
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InSweepTx = %v, want fn's error", err)
		}
		if claimed == 0 {
			t.Fatal("the view's claim took no row, so the rollback was not tested")
		}
		e.unchanged("a sweep transaction whose fn failed", before, nil)
	})

	t.Run("AtomicOnFault", func(t *testing.T) {
		// Claims within what the count found (a store may claim them by
		// what it counted) and beyond it.
		for _, within := range []bool{true, false} {
			e, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
			if e.h.FailNth == nil {
				t.Skip("Harness.FailNth is nil")
			}
			keys, claims := seedMixed(e)
			if within {
				claims = []backpressure.ScopedClaim{scope("a", "q1", 2), scope("b", "q", 3), scope("c", "q", 1)}
			}
			before := e.snapshot(keys)
			for n := 1; ; n++ {
				if n > 1000 {
					t.Fatal("sweep transaction still failing after 1000 armed faults")
				}
				var rows []R
				e.h.FailNth(n)
				err := ts.InSweepTx(e.ctx, func(tx backpressure.OutboxStore[R]) error {
					if _, err := tx.CountPendingOutboxRows(e.ctx, e.all, 10); err != nil {
						return err
					}
					var err error
					rows, err = tx.ClaimOutboxRowsScoped(e.ctx, e.all, claims)
					return err
				})
				e.h.FailNth(0)
				if err == nil {
					if n == 1 {
						t.Errorf("sweep transaction succeeded with its first statement armed to fail")
					}
					if len(rows) == 0 {
						t.Errorf("sweep transaction (claims within the count: %v) after %d faults claimed nothing", within, n-1)
					}
					break
				}
				e.unchanged("sweep transaction failing at statement "+strconv.Itoa(n), before, nil)
			}
		}
	})

	t.Run("SweepsMatchPlainStore", func(t *testing.T) {
		via, _ := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		plain := setup(t, newHarness)
		for _, e := range []*env[R]{via, plain} {
			for i := 0; i < 12; i++ {
				ns := "n" + strconv.Itoa(i)
				e.enqueue(msgs(ns, "q1", ns+"/q1/", 2+i%4)...)
				if i%3 == 0 {
					e.enqueue(msgs(ns, "q2", ns+"/q2/", 3)...)
				}
			}
		}
		cfg := backpressure.Config{BatchSize: 4, DefaultQuota: 3, Quotas: map[string]int{"n2": 1, "n5": 0}}
		bv, err1 := backpressure.New(cfg, via.all)
		bp, err2 := backpressure.New(cfg, plain.all)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		plainStore := hideTx[R](plain.h.Store)
		for sweep := 0; sweep < 30; sweep++ {
			rv, pv, err1 := backpressure.Sweep(via.ctx, bv, via.h.Store)
			rp, pp, err2 := backpressure.Sweep(plain.ctx, bp, plainStore)
			if err1 != nil || err2 != nil {
				t.Fatalf("sweep %d: %v, %v", sweep, err1, err2)
			}
			if !slices.Equal(pv.Claims, pp.Claims) || !slices.Equal(via.keys(rv), plain.keys(rp)) {
				t.Fatalf("sweep %d: through the view %v %v, plain %v %v", sweep, pv.Claims, via.keys(rv), pp.Claims, plain.keys(rp))
			}
			// Settle every other sweep's rows, so ceilings bind and free up.
			if sweep%2 == 1 {
				for _, r := range rv {
					via.settle(r)
				}
				for _, r := range rp {
					plain.settle(r)
				}
			}
		}
	})

	t.Run("OneRoundTrip", func(t *testing.T) {
		e, _ := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		if e.h.RoundTrips == nil {
			t.Skip("Harness.RoundTrips is nil")
		}
		seedMixed(e)
		b, err := backpressure.New(backpressure.Config{BatchSize: 5, DefaultQuota: backpressure.Unlimited}, e.all)
		if err != nil {
			t.Fatal(err)
		}
		before := e.h.RoundTrips()
		rows, _, err := backpressure.Sweep(e.ctx, b, e.h.Store)
		if err != nil || len(rows) == 0 {
			t.Fatalf("Sweep = %d rows, %v", len(rows), err)
		}
		if n := e.h.RoundTrips() - before; n != 1 {
			t.Errorf("a Sweep through InSweepTx made %d round trips, want 1", n)
		}
	})

	t.Run("UseAfterReturn", func(t *testing.T) {
		e, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		keys, claims := seedMixed(e)
		var kept backpressure.OutboxStore[R]
		e.inTx(ts, func(tx backpressure.OutboxStore[R]) error { kept = tx; return nil })
		before := e.snapshot(keys)
		if rows, err := kept.ClaimOutboxRowsScoped(e.ctx, e.all, claims); err == nil {
			t.Errorf("a view used after its fn returned claimed %d rows with no error", len(rows))
		}
		if _, err := kept.CountPendingOutboxRows(e.ctx, e.all, 10); err == nil {
			t.Errorf("a view used after its fn returned counted with no error")
		}
		e.unchanged("a claim on a finished view", before, nil)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		e, ts := setupWith[backpressure.TxSweeper[R]](t, newHarness)
		keys, claims := seedMixed(e)
		before := e.snapshot(keys)
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		err := ts.InSweepTx(ctx, func(tx backpressure.OutboxStore[R]) error {
			_, err := tx.ClaimOutboxRowsScoped(ctx, e.all, claims)
			return err
		})
		if err == nil {
			t.Errorf("InSweepTx with a cancelled context returned no error")
		}
		e.unchanged("a sweep transaction with a cancelled context", before, nil)
	})
}

// inTx runs fn in a sweep transaction, failing the test if it fails.
func (e *env[R]) inTx(ts backpressure.TxSweeper[R], fn func(tx backpressure.OutboxStore[R]) error) {
	e.t.Helper()
	if err := ts.InSweepTx(e.ctx, fn); err != nil {
		e.t.Fatalf("InSweepTx: %v", err)
	}
}

// seedMixed enqueues routes of every state a claim meets: a/q1 with a
// leased oldest row, a/q2 with a delayed oldest row, b/q and c/q plain. It
// returns every key and claims that reach into each route.
func seedMixed[R any](e *env[R]) ([]string, []backpressure.ScopedClaim) {
	e.t.Helper()
	var ms []outbox.Message
	for _, r := range []struct {
		ns, tq string
		n      int
	}{{"a", "q1", 4}, {"a", "q2", 4}, {"b", "q", 6}, {"c", "q", 2}} {
		ms = append(ms, msgs(r.ns, r.tq, r.ns+"/"+r.tq+"/", r.n)...)
	}
	e.enqueue(ms...)
	e.need("lease a/q1's oldest", e.claim(e.all, scope("a", "q1", 1)), 1)
	for _, r := range e.need("claim a/q2's oldest", e.claim(e.all, scope("a", "q2", 1)), 1) {
		e.retry(r, time.Hour)
	}
	return messageKeys(ms), []backpressure.ScopedClaim{scope("a", "q1", 2), scope("a", "q2", 2), scope("b", "q", 4), scope("c", "q", 5)}
}

// hideTx returns s without its TxSweeper method, keeping its Counter if it
// has one.
func hideTx[R any](s backpressure.OutboxStore[R]) backpressure.OutboxStore[R] {
	if c, ok := s.(backpressure.Counter); ok {
		return struct {
			backpressure.OutboxStore[R]
			backpressure.Counter
		}{s, c}
	}
	return struct{ backpressure.OutboxStore[R] }{s}
}

// seedPriorities enqueues rows of a/q and b/q whose priorities arrive out
// of order over three batches, keys descending as rows get newer, so
// neither ID nor key order is the claim order.
func seedPriorities[R any](e *env[R]) {
	e.t.Helper()
	prios := []int{0, 3, -1, 3, 7, 0, -1, 2, 7}
	for b := range 3 {
		var ms []outbox.Message
		for j := range 3 {
			i := 3*b + j
			for _, ns := range []string{"a", "b"} {
				m := msg(ns, "q", ns+"-"+strconv.Itoa(99-i))
				m.Priority = prios[(i+len(ns)*b)%len(prios)]
				ms = append(ms, m)
			}
		}
		e.enqueue(ms...)
		e.h.Advance(time.Millisecond)
	}
}
