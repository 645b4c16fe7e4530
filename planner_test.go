package backpressure

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/internal/limits"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// world is a generated node state: config, fraction and snapshot.
type world struct {
	cfg  Config
	frac OwnedShardFraction
	snap Snapshot
}

func genFraction(t *rapid.T) OwnedShardFraction {
	n := rapid.IntRange(1, 64).Draw(t, "shardCount")
	var owned []int
	for i := 0; i < n; i++ {
		if rapid.IntRange(0, 3).Draw(t, "owns") > 0 {
			owned = append(owned, i)
		}
	}
	f, err := NewOwnedShardFraction(owned, n)
	if err != nil {
		t.Fatalf("NewOwnedShardFraction: %v", err)
	}
	return f
}

func genQuota(t *rapid.T, label string) int {
	switch rapid.IntRange(0, 9).Draw(t, label+"Kind") {
	case 0:
		return Unlimited
	case 1:
		return 0
	default:
		return rapid.IntRange(1, 80).Draw(t, label)
	}
}

func genWorld(t *rapid.T) world {
	w := world{frac: genFraction(t)}
	w.cfg.BatchSize = rapid.IntRange(1, 60).Draw(t, "batch")
	w.cfg.DefaultQuota = genQuota(t, "defaultQuota")
	if w.cfg.DefaultQuota == 0 {
		w.cfg.DefaultQuota = Unlimited
	}
	w.cfg.Quotas = map[string]int{}
	w.snap.Claimed = map[string]int{}
	weighted := rapid.IntRange(0, 2).Draw(t, "weighted") // none, all 1, some above 1
	nNS := rapid.IntRange(0, 14).Draw(t, "namespaces")
	for i := 0; i < nNS; i++ {
		ns := fmt.Sprintf("ns%02d", i)
		if rapid.Bool().Draw(t, "override") {
			w.cfg.Quotas[ns] = genQuota(t, "quota")
		}
		if weighted > 0 && rapid.Bool().Draw(t, "hasWeight") {
			if w.cfg.Weights == nil {
				w.cfg.Weights = map[string]int{}
			}
			w.cfg.Weights[ns] = 1
			if weighted == 2 {
				w.cfg.Weights[ns] = genWeight(t)
			}
		}
		if c := rapid.IntRange(-10, 30).Draw(t, "claimed"); c > 0 {
			w.snap.Claimed[ns] = c
		}
		nR := rapid.IntRange(0, 6).Draw(t, "routes")
		for j := 0; j < nR; j++ {
			tq := fmt.Sprintf("q%d", j)
			if j == 0 && rapid.Bool().Draw(t, "defaultQueue") {
				tq = "" // the namespace's default queue: a route like any other
			}
			w.snap.Pending = append(w.snap.Pending, RouteCount{
				Route: Route{Namespace: ns, TaskQueue: tq},
				Count: rapid.IntRange(0, 25).Draw(t, "pending"),
			})
		}
	}
	// Now and then routes Route.Validate rejects, written by other means:
	// held, never planned.
	for i := rapid.IntRange(0, 2).Draw(t, "invalidRoutes"); i > 0; i-- {
		r := rapid.SampledFrom([]Route{{Namespace: "", TaskQueue: "q"}, {Namespace: "", TaskQueue: ""}, {Namespace: "ns00", TaskQueue: "q\x00"}, {Namespace: "ns01", TaskQueue: "\xff"}, {Namespace: "bad\x00", TaskQueue: "q"}, {Namespace: "ns02", TaskQueue: strings.Repeat("x", maxTaskQueueBytes+1)}}).Draw(t, "invalidRoute")
		if !slices.ContainsFunc(w.snap.Pending, func(rc RouteCount) bool { return rc.Route == r }) {
			w.snap.Pending = append(w.snap.Pending, RouteCount{Route: r, Count: rapid.IntRange(0, 9).Draw(t, "invalidPending")})
		}
	}
	w.snap.Pending = rapid.Permutation(w.snap.Pending).Draw(t, "order")
	w.snap.Budget = genBudget(t, w.cfg.BatchSize)
	return w
}

// genWeight draws a weight: usually small, now and then up to maxWeight,
// where the planner's exact arithmetic is tightest.
func genWeight(t *rapid.T) int {
	if rapid.IntRange(0, 9).Draw(t, "bigWeight") == 0 {
		return rapid.SampledFrom([]int{97, 1000, maxWeight - 1, maxWeight}).Draw(t, "weight")
	}
	return rapid.IntRange(1, 6).Draw(t, "weight")
}

// weightOf returns ns's weight in cfg.
func weightOf(cfg Config, ns string) int {
	if w, ok := cfg.Weights[ns]; ok {
		return w
	}
	return 1
}

// genBudget draws a sweep's budget: often 0 (the batch size), else
// anything from 1 to past the batch size.
func genBudget(t *rapid.T, batch int) int {
	if rapid.Bool().Draw(t, "fullBudget") {
		return 0
	}
	return rapid.IntRange(1, batch+3).Draw(t, "budget")
}

// budgetOf returns the budget a plan of s must keep to: B, or s.Budget
// when it is smaller.
func budgetOf(cfg Config, s Snapshot) int {
	if s.Budget > 0 {
		return min(cfg.BatchSize, s.Budget)
	}
	return cfg.BatchSize
}

// facts computes each namespace's headroom, pending and demand straight
// from their definitions; invalid counts the rows of routes Route.Validate
// rejects, which pending includes and demand does not.
type nsFacts struct{ ceiling, headroom, pending, invalid, demand int }

func facts(w world) map[string]nsFacts {
	m := map[string]nsFacts{}
	for _, rc := range w.snap.Pending {
		if rc.Count == 0 {
			continue
		}
		f := m[rc.Route.Namespace]
		f.pending += rc.Count
		if rc.Route.Validate() != nil {
			f.invalid += rc.Count
		}
		m[rc.Route.Namespace] = f
	}
	for ns, f := range m {
		q := w.cfg.DefaultQuota
		if o, ok := w.cfg.Quotas[ns]; ok {
			q = o
		}
		f.ceiling = w.frac.Ceiling(q)
		if f.ceiling == Unlimited {
			f.headroom = math.MaxInt
		} else {
			f.headroom = max(0, f.ceiling-w.snap.Claimed[ns])
		}
		f.demand = min(f.headroom, f.pending-f.invalid)
		m[ns] = f
	}
	return m
}

func mustNew(t interface {
	Helper()
	Fatalf(string, ...any)
}, cfg Config, f OwnedShardFraction) *Backpressure {
	t.Helper()
	b, err := New(cfg, f)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return b
}

// verifyPlan checks one plan against the definitions (facts): budget
// (Σ limits = min(B, Σ d_n)), headroom (Σ limits of n ≤ H_n), pending
// (1 ≤ limit ≤ P_r, valid routes only), weighted max-min fairness across
// namespaces (g_i < d_i ⇒ (g_j − 1)/w_j < (g_i + 1)/w_i), max-min fairness
// across one namespace's routes, and held accounting with its reason.
func verifyPlan(t interface{ Fatalf(string, ...any) }, w world, p Plan) {
	fs := facts(w)
	pend := map[Route]int{}
	for _, rc := range w.snap.Pending {
		pend[rc.Route] = rc.Count
	}
	totalDemand, total := 0, 0
	for _, f := range fs {
		totalDemand += f.demand
	}
	grant := map[string]int{}
	routeLimits := map[string][]ScopedClaim{}
	for i, c := range p.Claims {
		if c.Limit < 1 {
			t.Fatalf("claim %d %v has limit %d < 1", i, c.Route, c.Limit)
		}
		pr, ok := pend[c.Route]
		if !ok || pr == 0 {
			t.Fatalf("claim %d for route %v that has no pending rows", i, c.Route)
		}
		if err := c.Route.Validate(); err != nil {
			t.Fatalf("claim %d for an invalid route: %v", i, err)
		}
		if c.Limit > pr {
			t.Fatalf("route %v: limit %d > pending %d", c.Route, c.Limit, pr)
		}
		if i > 0 && p.Claims[i-1].Route.Compare(c.Route) >= 0 {
			t.Fatalf("claims not sorted and unique at %d: %v", i, p.Claims)
		}
		grant[c.Route.Namespace] += c.Limit
		routeLimits[c.Route.Namespace] = append(routeLimits[c.Route.Namespace], c)
		total += c.Limit
	}
	// 1. Budget, with a sweep's smaller budget in place of B.
	budget := budgetOf(w.cfg, w.snap)
	if p.Budget != budget {
		t.Fatalf("plan's Budget = %d, want %d (B = %d, Snapshot.Budget = %d)", p.Budget, budget, w.cfg.BatchSize, w.snap.Budget)
	}
	if want := min(budget, totalDemand); total != want {
		t.Fatalf("Σ limits = %d, want min(budget=%d, Σd=%d) = %d", total, budget, totalDemand, want)
	}
	// 2. Headroom.
	for ns, g := range grant {
		if g > fs[ns].headroom {
			t.Fatalf("namespace %s: granted %d > headroom %d", ns, g, fs[ns].headroom)
		}
	}
	// 4. Weighted max-min across namespaces, in integers:
	// (g_j − 1)·w_i < (g_i + 1)·w_j; with weights 1, g_j ≤ g_i + 1.
	for i, fi := range fs {
		if grant[i] < fi.demand {
			wi := weightOf(w.cfg, i)
			for j := range fs {
				wj := weightOf(w.cfg, j)
				if (grant[j]-1)*wi >= (grant[i]+1)*wj {
					t.Fatalf("unsatisfied %s (weight %d) got %d (demand %d) but %s (weight %d) got %d", i, wi, grant[i], fi.demand, j, wj, grant[j])
				}
			}
		}
	}
	// 5. Max-min across the routes of a namespace.
	for ns, cs := range routeLimits {
		for _, rc := range w.snap.Pending {
			if rc.Route.Namespace != ns || rc.Count == 0 || rc.Route.Validate() != nil {
				continue
			}
			li := 0
			for _, c := range cs {
				if c.Route == rc.Route {
					li = c.Limit
				}
			}
			if li < rc.Count {
				for _, c := range cs {
					if c.Limit > li+1 {
						t.Fatalf("namespace %s: route %v got %d < pending %d but %v got %d", ns, rc.Route, li, rc.Count, c.Route, c.Limit)
					}
				}
			}
		}
	}
	// 8. Held accounting and the report.
	for ns, f := range fs {
		r, ok := p.Namespace(ns)
		if !ok {
			t.Fatalf("no report for namespace %s", ns)
		}
		if r.Granted != grant[ns] || r.Pending != f.pending || r.Held != f.pending-grant[ns] || r.Held < 0 {
			t.Fatalf("report %+v: want granted %d, pending %d, held %d", r, grant[ns], f.pending, f.pending-grant[ns])
		}
		if r.Ceiling != f.ceiling || r.Claimed != w.snap.Claimed[ns] || r.Invalid != f.invalid || r.Demand != f.demand || r.Weight != weightOf(w.cfg, ns) {
			t.Fatalf("report %+v: want ceiling %d, claimed %d, invalid %d, demand %d", r, f.ceiling, w.snap.Claimed[ns], f.invalid, f.demand)
		}
		var want HoldReason
		switch {
		case r.Held == 0:
			want = HeldNone
		case f.invalid > 0:
			want = HeldInvalidRoute
		case r.Quota == 0:
			want = HeldPaused
		case grant[ns] < f.demand:
			want = HeldBudget
		default:
			want = HeldAtCeiling
		}
		if r.Reason != want {
			t.Fatalf("report %+v: reason %q, want %q", r, r.Reason, want)
		}
	}
	for _, r := range p.Namespaces {
		if _, ok := fs[r.Namespace]; !ok && r.Claimed == 0 {
			t.Fatalf("report for namespace %s with nothing pending or claimed", r.Namespace)
		}
	}
	if !slices.IsSortedFunc(p.Namespaces, func(a, b NamespaceReport) int { return strings.Compare(a.Namespace, b.Namespace) }) {
		t.Fatalf("reports not sorted: %v", p.Namespaces)
	}
}

// TestPlanInvariants checks every plan with verifyPlan over random worlds and
// several sweeps, each with its own budget, and that Plan agrees exactly
// with the naive unit-by-unit reference, sweep after sweep (so rotation
// agrees too, across changing budgets).
func TestPlanInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		b := mustNew(t, w.cfg, w.frac)
		ref := newRefPlanner(w.cfg, w.frac)
		sweeps := rapid.IntRange(1, 4).Draw(t, "sweeps")
		for s := 0; s < sweeps; s++ {
			if s > 0 {
				w.snap.Budget = genBudget(t, w.cfg.BatchSize)
			}
			p, err := b.Plan(w.snap)
			if err != nil {
				t.Fatalf("sweep %d: Plan: %v", s, err)
			}
			verifyPlan(t, w, p)
			want := ref.plan(w.snap)
			if !slices.Equal(p.Claims, want) {
				t.Fatalf("sweep %d: Plan claims\n%v\nreference\n%v", s, p.Claims, want)
			}
		}
	})
}

// TestPlanDeterministic checks determinism: two planners fed the same
// snapshots in different row orders make the same plans.
func TestPlanDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		b1, b2 := mustNew(t, w.cfg, w.frac), mustNew(t, w.cfg, w.frac)
		for s := 0; s < 3; s++ {
			shuffled := Snapshot{Claimed: w.snap.Claimed, Pending: rapid.Permutation(w.snap.Pending).Draw(t, "shuffled"), Budget: w.snap.Budget}
			p1, err1 := b1.Plan(w.snap)
			p2, err2 := b2.Plan(shuffled)
			if err1 != nil || err2 != nil {
				t.Fatalf("Plan: %v, %v", err1, err2)
			}
			if !slices.Equal(p1.Claims, p2.Claims) || !slices.Equal(p1.Namespaces, p2.Namespaces) {
				t.Fatalf("sweep %d: plans differ by input order:\n%v\n%v", s, p1, p2)
			}
		}
	})
}

// TestPlanNoStarvation checks the rotation under steady demand (the same
// snapshot every sweep: the rows planned are never claimed), each sweep
// with its own budget, with weights in half the runs: the cumulative grants
// G_n of the namespaces no sweep has satisfied yet track their weights
// within one row after every sweep, (G_j − 1)/w_j ≤ G_i/w_i (with weights 1:
// within one of each other), and with b the smallest budget every namespace
// is served at least once every ⌈Σ w_n / b⌉ sweeps.
func TestPlanNoStarvation(t *testing.T) {
	varied := 0 // runs whose budgets left a namespace unsatisfied in one sweep and not another
	rapid.Check(t, func(t *rapid.T) {
		nNS := rapid.IntRange(1, 40).Draw(t, "namespaces")
		batch := rapid.IntRange(1, 30).Draw(t, "batch")
		all := allShards(t, 1)
		cfg := Config{BatchSize: batch, DefaultQuota: Unlimited, Weights: map[string]int{}}
		weighted := rapid.Bool().Draw(t, "weighted")
		var snap Snapshot
		totalWeight := 0
		for i := 0; i < nNS; i++ {
			ns := fmt.Sprintf("ns%02d", i)
			if weighted {
				cfg.Weights[ns] = rapid.IntRange(1, 5).Draw(t, "weight")
			}
			totalWeight += weightOf(cfg, ns)
			for j := rapid.IntRange(1, 4).Draw(t, "routes"); j > 0; j-- {
				snap.Pending = append(snap.Pending, RouteCount{Route: Route{Namespace: ns, TaskQueue: fmt.Sprint("q", j)}, Count: rapid.IntRange(1, 50).Draw(t, "pending")})
			}
		}
		b := mustNew(t, cfg, all)
		fs := facts(world{cfg: cfg, frac: all, snap: snap})
		budgets := make([]int, rapid.IntRange(1, 12).Draw(t, "sweeps"))
		minBudget := batch
		for i := range budgets {
			budgets[i] = genBudget(t, batch)
			minBudget = min(minBudget, budgetOf(Config{BatchSize: batch}, Snapshot{Budget: budgets[i]}))
		}
		period := (totalWeight + minBudget - 1) / minBudget
		cum := map[string]int{}
		lastServed := map[string]int{}
		satisfied := map[string]bool{} // satisfied in some sweep so far
		unsatisfiedOnce := map[string]bool{}
		for s := 1; s <= len(budgets); s++ {
			snap.Budget = budgets[s-1]
			p, err := b.Plan(snap)
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			for _, r := range p.Namespaces {
				cum[r.Namespace] += r.Granted
				if r.Granted > 0 {
					lastServed[r.Namespace] = s
				}
				if r.Granted >= fs[r.Namespace].demand {
					satisfied[r.Namespace] = true
				} else {
					unsatisfiedOnce[r.Namespace] = true
				}
			}
			for i := range fs {
				for j := range fs {
					wi, wj := weightOf(cfg, i), weightOf(cfg, j)
					if !satisfied[i] && !satisfied[j] && (cum[j]-1)*wi > cum[i]*wj {
						t.Fatalf("sweep %d (budgets %v): never-satisfied %s (weight %d) got %d in all, %s (weight %d) %d: %v", s, budgets[:s], i, wi, cum[i], j, wj, cum[j], cum)
					}
				}
			}
			if s >= period {
				for ns := range fs {
					if s-lastServed[ns] >= period {
						t.Fatalf("sweep %d (budgets %v): %s not served since sweep %d (period %d)", s, budgets[:s], ns, lastServed[ns], period)
					}
				}
			}
		}
		for ns := range unsatisfiedOnce {
			if satisfied[ns] {
				varied++
				break
			}
		}
	})
	if varied == 0 {
		t.Fatal("no run had a namespace satisfied under one budget and not under another: the generator misses the case")
	}
}

// TestCeilingExact checks Ceiling(q) = ⌈q × owned / shardCount⌉ against
// big-integer arithmetic: 0 when nothing is owned, q when all is.
func TestCeilingExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 1<<20).Draw(t, "shardCount")
		o := rapid.IntRange(0, n).Draw(t, "owned")
		ids := make([]int, o)
		for i := range ids {
			ids[i] = i
		}
		f, err := NewOwnedShardFraction(ids, n)
		if err != nil {
			t.Fatal(err)
		}
		q := rapid.OneOf(rapid.IntRange(0, 1000), rapid.IntRange(0, math.MaxInt), rapid.Just(math.MaxInt)).Draw(t, "quota")
		num := new(big.Int).Mul(big.NewInt(int64(q)), big.NewInt(int64(o)))
		want, rem := new(big.Int).QuoRem(num, big.NewInt(int64(n)), new(big.Int))
		if rem.Sign() != 0 {
			want.Add(want, big.NewInt(1))
		}
		if got := f.Ceiling(q); int64(got) != want.Int64() {
			t.Fatalf("Ceiling(%d) of %d/%d = %d, want %s", q, o, n, got, want)
		}
		if o == 0 && f.Ceiling(q) != 0 || o == n && f.Ceiling(q) != q {
			t.Fatalf("Ceiling(%d) of %d/%d = %d", q, o, n, f.Ceiling(q))
		}
		if wantU := map[bool]int{true: 0, false: Unlimited}[o == 0]; f.Ceiling(Unlimited) != wantU {
			t.Fatalf("Ceiling(Unlimited) of %d/%d = %d, want %d", o, n, f.Ceiling(Unlimited), wantU)
		}
	})
}

// TestCeilingPartition checks q ≤ Σ ceilings ≤ q + nodes − 1 for any
// partition of the shards over nodes.
func TestCeilingPartition(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 512).Draw(t, "shardCount")
		nodes := rapid.IntRange(1, 12).Draw(t, "nodes")
		q := rapid.OneOf(rapid.IntRange(0, 500), rapid.IntRange(0, math.MaxInt/2)).Draw(t, "quota")
		owned := make([][]int, nodes)
		for s := 0; s < n; s++ {
			k := rapid.IntRange(0, nodes-1).Draw(t, "owner")
			owned[k] = append(owned[k], s)
		}
		sum, owning := 0, 0
		for k := range owned {
			f, err := NewOwnedShardFraction(owned[k], n)
			if err != nil {
				t.Fatal(err)
			}
			sum += f.Ceiling(q)
			if len(owned[k]) > 0 {
				owning++
			}
		}
		if sum < q || sum > q+owning-1 {
			t.Fatalf("quota %d over %d shards, %d owning nodes: Σ ceilings = %d", q, n, owning, sum)
		}
	})
}

func TestOwnedShardFractionErrors(t *testing.T) {
	for _, tc := range []struct {
		owned []int
		n     int
	}{
		{nil, 0}, {[]int{0}, -3}, {[]int{4}, 4}, {[]int{-1}, 4}, {[]int{1, 2, 1}, 4},
		{nil, MaxShardCount + 1}, {[]int{0}, math.MaxInt}, {nil, math.MinInt},
	} {
		_, err := NewOwnedShardFraction(tc.owned, tc.n)
		var se *ShardError
		if !errors.Is(err, ErrInvalidShards) || !errors.As(err, &se) {
			t.Errorf("NewOwnedShardFraction(%v, %d) = %v, want a *ShardError", tc.owned, tc.n, err)
		}
	}
	// Issue 13 §2: these panicked (makeslice) or ran out of memory.
	for _, n := range []int{math.MaxInt, 1 << 40, MaxShardCount + 1, 0, -1, math.MinInt} {
		f, err := AllShards(n)
		var se *ShardError
		if !errors.Is(err, ErrInvalidShards) || !errors.As(err, &se) || se.ShardCount != n || f.ShardCount() != 0 {
			t.Errorf("AllShards(%d) = %v, %v; want a *ShardError for shard count %d", n, f, err, n)
		}
	}
	if f, err := AllShards(MaxShardCount); err != nil || f.OwnedCount() != MaxShardCount || f.Ceiling(7) != 7 {
		t.Errorf("AllShards(MaxShardCount) = %v, %v", f, err)
	}
	f, err := NewOwnedShardFraction([]int{7, 3, 12}, 64)
	require.NoError(t, err)
	require.Equal(t, "3/64", f.String())
	require.Equal(t, []int{3, 7, 12}, f.Owned())
	require.True(t, f.Owns(7))
	require.False(t, f.Owns(8))
	require.Equal(t, 64, f.ShardCount())
	require.Equal(t, 3, f.OwnedCount())
}

// TestShardForGolden pins the FNV-1a placement so it can never change.
func TestShardForGolden(t *testing.T) {
	// Hashes from the FNV reference vectors ("a" → 0xe40c292c, "foobar" →
	// 0xbf9cf968) and the other keys' FNV-1a-32 computed independently.
	for _, tc := range []struct {
		key  string
		n    int
		want int
	}{
		{"", 64, 2166136261 % 64},
		{"a", 64, 0xe40c292c % 64},
		{"a", 1000, 220},
		{"foobar", 64, 0xbf9cf968 % 64},
		{"foobar", 7, 0},
		{"order-42", 1024, 756},
		{"order-42", 3, 2},
		{"tenant-a/emails/17", 10, 4},
		{"x", 1, 0},
		{"x", 0, 0},
	} {
		if got := ShardFor(tc.key, tc.n); got != tc.want {
			t.Errorf("ShardFor(%q, %d) = %d, want %d", tc.key, tc.n, got, tc.want)
		}
		if tc.n > 0 && int(fnv1a(tc.key)%uint32(tc.n)) != tc.want {
			t.Errorf("golden value for %q mod %d disagrees with the FNV-1a definition", tc.key, tc.n)
		}
	}
}

// fnv1a is the textbook definition, for the golden test.
func fnv1a(s string) uint32 {
	h := uint32(2166136261)
	for _, c := range []byte(s) {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

// TestPendingCountCapExact checks that capping every route's pending count
// at pendingCountCap changes no claim and no rotation, sweep after sweep.
func TestPendingCountCapExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		full, capped := mustNew(t, w.cfg, w.frac), mustNew(t, w.cfg, w.frac)
		c, deepest := capped.pendingCountCap(), w.cfg.BatchSize
		if len(capped.Config().Weights) > 0 {
			deepest++ // see pendingCountCap
		}
		if c < 1 || c > deepest {
			t.Fatalf("pendingCountCap() = %d, want 1..%d", c, deepest)
		}
		// Namespaces come and go from sweep to sweep (each sweep sees some
		// of the routes), and each sweep has its own budget: a smaller
		// budget caps the counts further, as SweepN does.
		for s := 0; s < 6; s++ {
			snap := Snapshot{Claimed: w.snap.Claimed, Budget: genBudget(t, w.cfg.BatchSize)}
			for _, rc := range w.snap.Pending {
				if rapid.IntRange(0, 3).Draw(t, "routeNow") > 0 {
					snap.Pending = append(snap.Pending, rc)
				}
			}
			c := capped.current().fullCap(budgetOf(w.cfg, snap))
			cs := Snapshot{Claimed: snap.Claimed, Budget: snap.Budget}
			for _, rc := range snap.Pending {
				cs.Pending = append(cs.Pending, RouteCount{Route: rc.Route, Count: min(rc.Count, c)})
			}
			p1, err1 := full.Plan(snap)
			p2, err2 := capped.Plan(cs)
			if err1 != nil || err2 != nil {
				t.Fatalf("Plan: %v, %v", err1, err2)
			}
			if !slices.Equal(p1.Claims, p2.Claims) {
				t.Fatalf("sweep %d, cap %d: claims differ:\nfull   %v\ncapped %v", s, c, p1.Claims, p2.Claims)
			}
		}
	})
}

// TestPlanExtremeValues checks the budget, headroom and pending bounds in
// exact arithmetic when counts, quotas and the batch size reach math.MaxInt,
// where sums of counts overflow an int.
func TestPlanExtremeValues(t *testing.T) {
	big := func(t *rapid.T, label string) int {
		return rapid.OneOf(rapid.Just(math.MaxInt), rapid.IntRange(math.MaxInt/2-5, math.MaxInt/2+20), rapid.IntRange(0, 5)).Draw(t, label)
	}
	rapid.Check(t, func(t *rapid.T) {
		all := allShards(t, rapid.IntRange(1, 4).Draw(t, "shards"))
		cfg := Config{BatchSize: max(1, big(t, "batch")), DefaultQuota: rapid.SampledFrom([]int{Unlimited, math.MaxInt, 3}).Draw(t, "quota")}
		b := mustNew(t, cfg, all)
		var s Snapshot
		s.Claimed = map[string]int{}
		for i := rapid.IntRange(1, 4).Draw(t, "namespaces"); i > 0; i-- {
			ns := fmt.Sprint("n", i)
			s.Claimed[ns] = big(t, "claimed")
			for j := rapid.IntRange(1, 3).Draw(t, "routes"); j > 0; j-- {
				s.Pending = append(s.Pending, RouteCount{Route: Route{Namespace: ns, TaskQueue: fmt.Sprint("q", j)}, Count: big(t, "pending")})
			}
		}
		p, err := b.Plan(s)
		if err != nil {
			t.Fatal(err)
		}
		pend := map[Route]int{}
		for _, rc := range s.Pending {
			pend[rc.Route] = rc.Count
		}
		sum, perNS := new(bigInt), map[string]*bigInt{}
		for _, c := range p.Claims {
			if c.Limit < 1 || c.Limit > pend[c.Route] {
				t.Fatalf("claim %v: limit %d, pending %d", c.Route, c.Limit, pend[c.Route])
			}
			sum.add(c.Limit)
			if perNS[c.Route.Namespace] == nil {
				perNS[c.Route.Namespace] = new(bigInt)
			}
			perNS[c.Route.Namespace].add(c.Limit)
		}
		if sum.gt(cfg.BatchSize) {
			t.Fatalf("Σ limits = %v > batch %d: %v", sum, cfg.BatchSize, p.Claims)
		}
		for ns, g := range perNS {
			r, _ := p.Namespace(ns)
			if r.Headroom != Unlimited && g.gt(r.Headroom) {
				t.Fatalf("namespace %s granted %v > headroom %d", ns, g, r.Headroom)
			}
		}
	})
}

// bigInt is a tiny exact accumulator for TestPlanExtremeValues.
type bigInt struct{ v big.Int }

func (b *bigInt) add(n int)      { b.v.Add(&b.v, big.NewInt(int64(n))) }
func (b *bigInt) gt(n int) bool  { return b.v.Cmp(big.NewInt(int64(n))) > 0 }
func (b *bigInt) String() string { return b.v.String() }

// TestShallowCountExact checks the rule Sweep's shallow counts rest on:
// with every route's count capped at any c ≥ 1, a plan whose largest limit
// is below c claims exactly what the uncapped counts give, and moves the
// rotation the same way, sweep after sweep. A sweep whose plan reaches c is
// planned again from the uncapped counts, as Sweep does.
func TestShallowCountExact(t *testing.T) {
	var shallowExact int // plans kept although some route passed c
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		full, shallow := mustNew(t, w.cfg, w.frac), mustNew(t, w.cfg, w.frac)
		c := rapid.IntRange(1, 8).Draw(t, "cap")
		cs := Snapshot{Claimed: w.snap.Claimed, Budget: w.snap.Budget}
		deeper := false
		for _, rc := range w.snap.Pending {
			cs.Pending = append(cs.Pending, RouteCount{Route: rc.Route, Count: min(rc.Count, c)})
			deeper = deeper || rc.Count > c
		}
		for s := 0; s < 4; s++ {
			p1, err := full.Plan(w.snap)
			if err != nil {
				t.Fatal(err)
			}
			p2, m, err := shallow.e.plan(cs, shallow.current(), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if maxLimit(p2.Claims) >= c {
				if p2, m, err = shallow.e.plan(w.snap, shallow.current(), time.Time{}); err != nil {
					t.Fatal(err)
				}
			} else if deeper {
				shallowExact++
			}
			shallow.e.rot.advance(m, p2.Namespaces, false)
			if !slices.Equal(p1.Claims, p2.Claims) {
				t.Fatalf("sweep %d, cap %d: claims differ:\nuncapped %v\nshallow  %v", s, c, p1.Claims, p2.Claims)
			}
		}
	})
	if shallowExact == 0 {
		t.Fatal("no plan from a shallow count with deeper routes was kept: the generator misses the case")
	}
}

// TestFirstNamespacesIsTheSmallerWindow: trimming a window of counts to its
// first n namespaces in the cyclic order after After gives exactly the
// window of n, computed naively: the namespaces in byte order, rotated to
// start after After, the first n of them kept, their routes in order.
func TestFirstNamespacesIsTheSmallerWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "bb", "c", "d", "e", "é", "z"}), 0, 8, rapid.ID[string]).Draw(t, "namespaces")
		slices.Sort(names)
		var window []RouteCount
		for _, ns := range names {
			for q := range rapid.IntRange(1, 3).Draw(t, "routes") {
				window = append(window, RouteCount{Route: Route{Namespace: ns, TaskQueue: fmt.Sprint("q", q)}, Count: 1 + q})
			}
		}
		after := rapid.SampledFrom([]string{"", "a", "b", "ba", "d", "zz"}).Draw(t, "after")
		n := rapid.IntRange(1, 9).Draw(t, "n")

		var cyclic []string
		for _, ns := range names {
			if ns > after {
				cyclic = append(cyclic, ns)
			}
		}
		for _, ns := range names {
			if ns <= after {
				cyclic = append(cyclic, ns)
			}
		}
		keep := map[string]bool{}
		for _, ns := range cyclic[:min(n, len(cyclic))] {
			keep[ns] = true
		}
		var want []RouteCount
		for _, rc := range window {
			if keep[rc.Route.Namespace] {
				want = append(want, rc)
			}
		}
		if got := firstNamespaces(slices.Clone(window), after, n); !slices.Equal(got, want) {
			t.Fatalf("firstNamespaces(%v, %q, %d) = %v, want %v", window, after, n, got, want)
		}
	})
}

// TestRouteCompare checks Route.Compare against a naive reference: the
// lexicographic order of the (namespace, task queue) pair, byte by byte;
// Compare is 0 exactly for equal routes and antisymmetric.
func TestRouteCompare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.StringOfN(rapid.RuneFrom([]rune{'a', 'b', 'é', 0}), 0, 3, -1)
		a := Route{Namespace: text.Draw(t, "a.ns"), TaskQueue: text.Draw(t, "a.tq")}
		b := Route{Namespace: text.Draw(t, "b.ns"), TaskQueue: text.Draw(t, "b.tq")}
		want := 0
		switch {
		case a.Namespace < b.Namespace, a.Namespace == b.Namespace && a.TaskQueue < b.TaskQueue:
			want = -1
		case a != b:
			want = 1
		}
		if got := a.Compare(b); got != want {
			t.Fatalf("%q.Compare(%q) = %d, want %d", a, b, got, want)
		}
		if got := b.Compare(a); got != -want {
			t.Fatalf("%q.Compare(%q) = %d, want %d", b, a, got, -want)
		}
	})
}

// TestFillWeighted checks fillWeighted against refWalk, the rotation walked
// turn by turn, for any caps, weights up to maxWeight and cursor positions
// with denominators up to maxWeight; and, with every weight 1, against
// fill, the unweighted rule (from the first index when the cursor is
// inside a round, as Plan calls it).
func TestFillWeighted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "n")
		ones := rapid.Bool().Draw(t, "ones")
		caps, weights := make([]int, n), make([]int, n)
		total := 0
		for i := range caps {
			caps[i] = rapid.IntRange(1, 40).Draw(t, "cap")
			total += caps[i]
			weights[i] = 1
			if !ones {
				weights[i] = genWeight(t)
			}
		}
		budget := rapid.IntRange(0, total-1).Draw(t, "budget")
		start := rapid.IntRange(0, n).Draw(t, "start")
		den := rapid.OneOf(rapid.IntRange(1, 7), rapid.IntRange(maxWeight-3, maxWeight)).Draw(t, "den")
		num := rapid.OneOf(rapid.Just(0), rapid.IntRange(0, den-1)).Draw(t, "num")

		grants := make([]int, n)
		last, at, _ := fillWeighted(caps, weights, grants, make([]int, n), budget, start, roundPos{num, den}, nil)
		want, wantLast, wantAt := refWalk(caps, weights, budget, start, [2]int{num, den})
		if !slices.Equal(grants, want) || last != wantLast || last >= 0 && (at.num != wantAt[0] || at.den != wantAt[1]) {
			t.Fatalf("fillWeighted(caps %v, weights %v, budget %d, start %d, at %d/%d) = %v, last %d at %v; refWalk %v, last %d at %v",
				caps, weights, budget, start, num, den, grants, last, at, want, wantLast, wantAt)
		}
		if ones {
			s := start
			if num != 0 || s >= n {
				s = 0
			}
			unweighted := make([]int, n)
			if l := fill(caps, unweighted, budget, s); !slices.Equal(grants, unweighted) || l != last {
				t.Fatalf("weights 1: fillWeighted = %v, last %d; fill = %v, last %d", grants, last, unweighted, l)
			}
		}
	})
}

// TestPlanAllOnesIsUnweighted: a config that weighs every namespace 1
// plans exactly as the planner before weights did (the reference with
// refFill for namespaces), sweep after sweep and budget after budget.
func TestPlanAllOnesIsUnweighted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		w.cfg.Weights = map[string]int{}
		for _, rc := range w.snap.Pending {
			if Route.Validate(Route{Namespace: rc.Route.Namespace}) == nil { // a key Config accepts
				w.cfg.Weights[rc.Route.Namespace] = 1
			}
		}
		w.cfg.Weights["not-in-the-snapshot"] = rapid.IntRange(1, 9).Draw(t, "absentWeight")
		b := mustNew(t, w.cfg, w.frac)
		ref := newRefPlanner(w.cfg, w.frac)
		ref.unweighted = true
		for s := 0; s < rapid.IntRange(1, 5).Draw(t, "sweeps"); s++ {
			w.snap.Budget = genBudget(t, w.cfg.BatchSize)
			p, err := b.Plan(w.snap)
			if err != nil {
				t.Fatalf("sweep %d: %v", s, err)
			}
			if want := ref.plan(w.snap); !slices.Equal(p.Claims, want) {
				t.Fatalf("sweep %d: Plan claims\n%v\nunweighted reference\n%v", s, p.Claims, want)
			}
		}
	})
}

// genConfig draws a config for the namespaces ns00… of genWorld: another
// batch size, default quota, quotas and weights.
func genConfig(t *rapid.T) Config {
	cfg := Config{BatchSize: rapid.IntRange(1, 60).Draw(t, "newBatch"), DefaultQuota: genQuota(t, "newDefaultQuota")}
	if cfg.DefaultQuota == 0 {
		cfg.DefaultQuota = Unlimited
	}
	for i := rapid.IntRange(0, 14).Draw(t, "newOverrides"); i > 0; i-- {
		ns := fmt.Sprintf("ns%02d", rapid.IntRange(0, 13).Draw(t, "newNS"))
		if rapid.Bool().Draw(t, "newQuotaOrWeight") {
			if cfg.Quotas == nil {
				cfg.Quotas = map[string]int{}
			}
			cfg.Quotas[ns] = genQuota(t, "newQuota")
		} else {
			if cfg.Weights == nil {
				cfg.Weights = map[string]int{}
			}
			cfg.Weights[ns] = genWeight(t)
		}
	}
	return cfg
}

// TestPlanReconfigure: SetConfig between any two sweeps. Every plan keeps
// every invariant under the config it was made with, and matches the
// reference that carries its cursors over the change: the rotation
// survives. An invalid config is rejected with a *ConfigError and changes
// nothing: the plans go on as the reference's, which never saw it.
// Claimed rows come and go between sweeps, so a lowered quota finds
// namespaces above their new ceiling.
func TestPlanReconfigure(t *testing.T) {
	changes, rejected := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		b := mustNew(t, w.cfg, w.frac)
		ref := newRefPlanner(w.cfg, w.frac)
		for s := 0; s < rapid.IntRange(2, 6).Draw(t, "sweeps"); s++ {
			switch rapid.IntRange(0, 3).Draw(t, "change") {
			case 0, 1:
				cfg := genConfig(t)
				if err := b.SetConfig(cfg); err != nil {
					t.Fatalf("sweep %d: SetConfig(%+v): %v", s, cfg, err)
				}
				w.cfg, ref.cfg = cfg, cfg
				changes++
			case 2:
				bad := genConfig(t)
				switch rapid.IntRange(0, 3).Draw(t, "flaw") {
				case 0:
					bad.BatchSize = 0
				case 1:
					bad.Weights = map[string]int{"ns00": rapid.SampledFrom([]int{0, -1, maxWeight + 1}).Draw(t, "badWeight")}
				case 2:
					bad.Weights = map[string]int{"a\x00": 2}
				case 3:
					bad.Quotas = map[string]int{"ns01": -2}
				}
				before := b.Config()
				var ce *ConfigError
				if err := b.SetConfig(bad); !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) {
					t.Fatalf("sweep %d: SetConfig(%+v) = %v, want a *ConfigError", s, bad, err)
				}
				if after := b.Config(); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("sweep %d: a rejected SetConfig changed the config: %+v -> %+v", s, before, after)
				}
				rejected++
			}
			for ns := range w.snap.Claimed {
				w.snap.Claimed[ns] = rapid.IntRange(0, 30).Draw(t, "claimedNow")
			}
			w.snap.Budget = genBudget(t, w.cfg.BatchSize)
			p, err := b.Plan(w.snap)
			if err != nil {
				t.Fatalf("sweep %d: Plan: %v", s, err)
			}
			verifyPlan(t, w, p)
			if want := ref.plan(w.snap); !slices.Equal(p.Claims, want) {
				t.Fatalf("sweep %d: Plan claims\n%v\nreference\n%v", s, p.Claims, want)
			}
		}
	})
	if changes == 0 || rejected == 0 {
		t.Fatalf("%d changes, %d rejected: the generator misses a case", changes, rejected)
	}
}

// TestSetConfigLowersQuota: lowering a quota below a namespace's claimed
// rows revokes nothing (the plan never touches claimed rows) and holds its
// new claims, at-ceiling, until enough claimed rows settle: headroom is
// max(0, C − K) for the new ceiling C.
func TestSetConfigLowersQuota(t *testing.T) {
	b := mustNew(t, Config{BatchSize: 20, DefaultQuota: 10}, allShards(t, 4))
	snap := Snapshot{Claimed: map[string]int{"acme": 10}, Pending: []RouteCount{{Route: Route{Namespace: "acme", TaskQueue: "q"}, Count: 30}, {Route: Route{Namespace: "zeta", TaskQueue: "q"}, Count: 5}}}
	if err := b.SetConfig(Config{BatchSize: 20, DefaultQuota: 10, Quotas: map[string]int{"acme": 4}}); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct{ claimed, granted, headroom int }{
		{10, 0, 0}, // above the new ceiling: nothing revoked, nothing new
		{5, 0, 0},  // still above
		{4, 0, 0},  // at it
		{3, 1, 1},  // under it: only up to the new ceiling
		{0, 4, 4},
	} {
		snap.Claimed["acme"] = step.claimed
		p, err := b.Plan(snap)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := p.Namespace("acme")
		wantReason := HeldAtCeiling
		if r.Ceiling != 4 || r.Claimed != step.claimed || r.Headroom != step.headroom || r.Granted != step.granted || r.Held != 30-step.granted || r.Reason != wantReason {
			t.Errorf("step %d: claimed %d: report %+v, want ceiling 4, headroom %d, granted %d, held %d (%s)", i, step.claimed, r, step.headroom, step.granted, 30-step.granted, wantReason)
		}
		if z, _ := p.Namespace("zeta"); z.Granted != 5 {
			t.Errorf("step %d: zeta granted %d, want 5", i, z.Granted)
		}
	}
}

// TestWeightedCountCapOneDeeper: why a weighted config counts one row past
// the budget. B = 1, a of weight 2 alone with 5 rows: its grant is 1 either
// way, but uncapped its demand is unmet and its turn at 0 of the round moves
// the cursor, while counted at 1 its demand is met and the cursor stays. The
// next sweep, with b too, then serves b (after a's turn) or a (from the
// start). Counted at fullCap(1) = 2 both agree.
func TestWeightedCountCapOneDeeper(t *testing.T) {
	cfg := Config{BatchSize: 1, DefaultQuota: Unlimited, Weights: map[string]int{"a": 2}}
	first := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 5}}}
	second := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 5}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 5}}}
	capAt := func(s Snapshot, c int) Snapshot {
		out := Snapshot{}
		for _, rc := range s.Pending {
			out.Pending = append(out.Pending, RouteCount{Route: rc.Route, Count: min(rc.Count, c)})
		}
		return out
	}
	full := mustNew(t, cfg, allShards(t, 1))
	c := full.current().fullCap(1)
	if c != 2 {
		t.Fatalf("fullCap(1) = %d, want 2", c)
	}
	for i, tc := range []struct {
		cap  int
		want string // who the second sweep serves
	}{{0, "b"}, {c, "b"}, {1, "a"}} {
		b := mustNew(t, cfg, allShards(t, 1))
		plan := func(s Snapshot) Plan {
			if tc.cap > 0 {
				s = capAt(s, tc.cap)
			}
			p, err := b.Plan(s)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		if p := plan(first); p.Granted() != 1 {
			t.Fatalf("step %d: first sweep granted %d", i, p.Granted())
		}
		if p := plan(second); len(p.Claims) != 1 || p.Claims[0].Route.Namespace != tc.want {
			t.Errorf("step %d: counts capped at %d (0: uncapped): second sweep claims %v, want %s", i, tc.cap, p.Claims, tc.want)
		}
	}
}

// TestCompareNames checks compareNames against strings.Compare, with names
// long and short, sharing prefixes, and holding bytes above 0x7f (which
// must order as unsigned bytes).
func TestCompareNames(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.StringOfN(rapid.RuneFrom([]rune{'a', 'b', 'é', 0, 0x7f}), 0, 12, -1)
		prefix := rapid.SampledFrom([]string{"", "queue-", "12345678"}).Draw(t, "prefix")
		a, b := prefix+name.Draw(t, "a"), prefix+name.Draw(t, "b")
		if rapid.Bool().Draw(t, "same") {
			b = a
		}
		if got, want := compareNames(a, b), strings.Compare(a, b); got != want {
			t.Fatalf("compareNames(%q, %q) = %d, want %d", a, b, got, want)
		}
	})
}

// TestNextTaskQueue checks nextTaskQueue against its definition,
// (compareNames, validName), on names around eight bytes and the length
// limit, with NUL, bytes above 0x7f and invalid UTF-8 anywhere.
func TestNextTaskQueue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		part := rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'q', 'é', 0, 0x7f, 0x80}), 0, 10, -1)
		raw := rapid.SampledFrom([]string{"", "\xff", "\xc3", "queue-0", "queue-00", "12345678", strings.Repeat("x", maxTaskQueueBytes-8)})
		prev := raw.Draw(t, "prevPrefix") + part.Draw(t, "prev")
		tq := raw.Draw(t, "tqPrefix") + part.Draw(t, "tq")
		if rapid.Bool().Draw(t, "related") {
			tq = prev + part.Draw(t, "more")
		}
		c, ok := nextTaskQueue(prev, tq)
		if wc, wok := strings.Compare(prev, tq), limits.ValidName(tq, maxTaskQueueBytes); c != wc || ok != wok {
			t.Fatalf("nextTaskQueue(%q, %q) = %d, %v; want %d, %v", prev, tq, c, ok, wc, wok)
		}
	})
}

// TestRouteValid checks validRoute, the planner's allocation-free check,
// against Route.Validate, the rule it stands for, on names around eight
// bytes and both length limits, with NUL, bytes above 0x7f and invalid
// UTF-8 anywhere.
func TestRouteValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		part := rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'q', 'é', 0, 0x7f, 0x80}), 0, 10, -1)
		raw := rapid.SampledFrom([]string{"", "\xff", "\xc3", "queue-00", "12345678",
			strings.Repeat("x", maxNamespaceBytes-4), strings.Repeat("x", maxTaskQueueBytes-4)})
		r := Route{Namespace: raw.Draw(t, "nsPrefix") + part.Draw(t, "ns"), TaskQueue: raw.Draw(t, "tqPrefix") + part.Draw(t, "tq")}
		if got, want := validRoute(r), r.Validate() == nil; got != want {
			t.Fatalf("validRoute(%+v) = %v, but Validate() = %v", r, got, r.Validate())
		}
	})
}
