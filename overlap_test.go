package backpressure_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"pgregory.net/rapid"
)

// gatedClaim is a claim held at the store's door until the test commits it.
type gatedClaim struct {
	claims  []backpressure.ScopedClaim
	release chan struct{}
}

// gatedStore holds every ClaimOutboxRowsScoped until the test releases it,
// so that a test decides when each overlapped claim commits: the claim
// runs on the inner store when released. Counts run at once.
type gatedStore struct {
	inner   backpressure.OutboxStore[memRow]
	mem     *memStore
	entered chan *gatedClaim
	calls   sync.Mutex // serialises calls on inner, whose test counters are not safe for concurrent use
}

func (s *gatedStore) CountClaimedOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction) (map[string]int, error) {
	s.calls.Lock()
	defer s.calls.Unlock()
	return s.inner.CountClaimedOutboxRows(ctx, f)
}

func (s *gatedStore) CountPendingOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, c int) ([]backpressure.RouteCount, error) {
	s.calls.Lock()
	defer s.calls.Unlock()
	return s.inner.CountPendingOutboxRows(ctx, f, c)
}

func (s *gatedStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]memRow, error) {
	g := &gatedClaim{claims: slices.Clone(claims), release: make(chan struct{})}
	s.entered <- g
	<-g.release
	s.calls.Lock()
	defer s.calls.Unlock()
	return s.inner.ClaimOutboxRowsScoped(ctx, f, claims)
}

// gatedCounter is gatedStore whose inner store is a Counter.
type gatedCounter struct{ *gatedStore }

func (s gatedCounter) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	s.calls.Lock()
	defer s.calls.Unlock()
	return s.inner.(backpressure.Counter).CountOutboxRows(ctx, f, p)
}

type sweepOutcome struct {
	rows []memRow
	plan backpressure.Plan
	err  error
}

// inFlight is an overlapped SweepAhead whose claim waits at the gate.
type inFlight struct {
	claim *gatedClaim
	out   chan sweepOutcome
	n     int
}

// TestSweepAheadOverlappedStateful: a stateful property of overlapped
// claims. Up to three SweepAheads have their claims in flight at once (held
// at the store until the test commits them, in any order), between
// enqueues, completions and lease expiries. After every step, for every
// namespace, the live claimed rows plus the grants still in flight stay
// within its ceiling; every plan stays within its budget, and its claim
// takes only claimable rows of its routes, at most its limits. With fresh
// counts (a store that is no Counter serving Claimed, so nothing is read
// ahead), every plan equals the naive reference's: Backpressure.Plan, on a
// Backpressure of its own, over uncapped counts of the outbox as it is
// when the plan is made, each namespace's claimed rows plus its grants in
// flight and each route's claimable rows less them; so the rotation
// advances plan by plan, in plan order, as without overlap. With counts
// read ahead (memFullCounter), the ceilings and budgets hold.
func TestSweepAheadOverlappedStateful(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	rapid.Check(t, func(t *rapid.T) {
		const nShards = 4
		mem := newMemStore(nShards)
		kind := rapid.SampledFrom([]string{"base", "window", "ahead"}).Draw(t, "store")
		gs := &gatedStore{mem: mem, entered: make(chan *gatedClaim)}
		var store backpressure.OutboxStore[memRow]
		switch kind {
		case "base":
			gs.inner = mem
			store = gs
		case "window":
			gs.inner = &memWindowStore{memStore: mem}
			store = gatedCounter{gs}
		case "ahead":
			gs.inner = &memFullCounter{memWindowStore: &memWindowStore{memStore: mem}}
			store = gatedCounter{gs}
		}
		f, err := backpressure.AllShards(nShards)
		if err != nil {
			t.Fatal(err)
		}
		quotas := map[string]int{"n0": rapid.IntRange(0, 6).Draw(t, "q0"), "n1": rapid.IntRange(1, 6).Draw(t, "q1")}
		cfg := backpressure.Config{BatchSize: rapid.IntRange(1, 8).Draw(t, "batch"), DefaultQuota: rapid.IntRange(1, 8).Draw(t, "quota"), Quotas: quotas}
		b, err := backpressure.New(cfg, f)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := backpressure.New(cfg, f)
		if err != nil {
			t.Fatal(err)
		}
		nsCount := rapid.IntRange(2, 12).Draw(t, "namespaces")
		var flying []*inFlight
		defer func() {
			for _, fl := range flying {
				close(fl.claim.release)
				<-fl.out
			}
			backpressure.WaitAhead(b)
		}()

		// state returns, under mem's lock, the live claimed rows per
		// namespace and the claimable rows per route.
		state := func() (map[string]int, map[backpressure.Route]int) {
			mem.mu.Lock()
			defer mem.mu.Unlock()
			claimed, pending := map[string]int{}, map[backpressure.Route]int{}
			for _, r := range mem.rows {
				switch {
				case r.Settled:
				case mem.now.Before(r.LeaseUntil):
					claimed[r.Namespace]++
				default:
					pending[backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}]++
				}
			}
			return claimed, pending
		}
		check := func(step int) {
			claimed, _ := state()
			for _, fl := range flying {
				for _, c := range fl.claim.claims {
					claimed[c.Route.Namespace] += c.Limit
				}
			}
			for ns, k := range claimed {
				if c := b.Ceiling(ns); c != backpressure.Unlimited && k > c {
					t.Fatalf("step %d: namespace %s has %d rows claimed or in flight > ceiling %d", step, ns, k, c)
				}
			}
		}
		commit := func(step int, fl *inFlight) {
			mem.mu.Lock()
			before := map[string]memRow{}
			for _, r := range mem.rows {
				before[r.Key] = *r
			}
			now := mem.now
			mem.mu.Unlock()
			close(fl.claim.release)
			o := <-fl.out
			if o.err != nil {
				t.Fatalf("step %d: SweepAhead(%d): %v", step, fl.n, o.err)
			}
			perRoute := map[backpressure.Route]int{}
			for _, r := range o.rows {
				old := before[r.Key]
				if old.Settled || now.Before(old.LeaseUntil) {
					t.Fatalf("step %d: claimed a row that was not claimable: %+v", step, old)
				}
				perRoute[backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}]++
			}
			for _, c := range fl.claim.claims {
				if perRoute[c.Route] > c.Limit {
					t.Fatalf("step %d: claimed %d rows of %v, limit %d", step, perRoute[c.Route], c.Route, c.Limit)
				}
				delete(perRoute, c.Route)
			}
			if len(perRoute) > 0 {
				t.Fatalf("step %d: claimed rows of routes outside the plan: %v", step, perRoute)
			}
		}

		for step := 0; step < 40; step++ {
			switch rapid.IntRange(0, 4).Draw(t, "action") {
			case 0:
				mem.enqueue(fmt.Sprint("n", rapid.IntRange(0, nsCount-1).Draw(t, "ns")), fmt.Sprint("q", rapid.IntRange(0, 2).Draw(t, "tq")), rapid.IntRange(1, 6).Draw(t, "rows"))
			case 1:
				mem.settleNamespace(fmt.Sprint("n", rapid.IntRange(0, nsCount-1).Draw(t, "settle")))
			case 2:
				secs := rapid.IntRange(0, 90).Draw(t, "secs")
				mem.mu.Lock()
				mem.now = mem.now.Add(time.Duration(secs) * time.Second)
				mem.mu.Unlock()
			case 3:
				if len(flying) >= 3 {
					continue
				}
				n := rapid.IntRange(1, cfg.BatchSize+2).Draw(t, "budget")
				var want []backpressure.ScopedClaim
				if kind != "ahead" {
					claimed, pending := state()
					for _, fl := range flying {
						for _, c := range fl.claim.claims {
							claimed[c.Route.Namespace] += c.Limit
							pending[c.Route] -= c.Limit
						}
					}
					var counts []backpressure.RouteCount
					for rt, p := range pending {
						if p > 0 {
							counts = append(counts, backpressure.RouteCount{Route: rt, Count: p})
						}
					}
					p, err := ref.Plan(backpressure.Snapshot{Claimed: claimed, Pending: counts, Budget: n})
					if err != nil {
						t.Fatal(err)
					}
					want = p.Claims
				}
				fl := &inFlight{out: make(chan sweepOutcome, 1), n: n}
				go func() {
					rows, plan, err := backpressure.SweepAhead[memRow](context.Background(), b, store, n)
					fl.out <- sweepOutcome{rows, plan, err}
				}()
				select {
				case fl.claim = <-gs.entered:
					if g := sumClaims(fl.claim.claims); g > min(n, cfg.BatchSize) {
						t.Fatalf("step %d: a plan of budget %d granted %d", step, n, g)
					}
					if kind != "ahead" && !slices.Equal(fl.claim.claims, want) {
						t.Fatalf("step %d: SweepAhead(%d) with %d claims in flight planned %v, reference %v", step, n, len(flying), fl.claim.claims, want)
					}
					flying = append(flying, fl)
				case o := <-fl.out:
					if o.err != nil {
						t.Fatalf("step %d: SweepAhead(%d): %v", step, n, o.err)
					}
					if len(o.rows) != 0 || len(o.plan.Claims) != 0 {
						t.Fatalf("step %d: a sweep returned rows without claiming: %v", step, o.plan.Claims)
					}
					if kind != "ahead" && len(want) != 0 {
						t.Fatalf("step %d: SweepAhead(%d) planned nothing, reference %v", step, n, want)
					}
				}
			case 4:
				if len(flying) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(flying)-1).Draw(t, "commit")
				fl := flying[i]
				flying = slices.Delete(flying, i, i+1)
				commit(step, fl)
			}
			check(step)
		}
	})
}

func sumClaims(claims []backpressure.ScopedClaim) int {
	n := 0
	for _, c := range claims {
		n += c.Limit
	}
	return n
}
