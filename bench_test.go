package backpressure

import (
	"fmt"
	"testing"
	"time"
)

// benchWorld builds a node with namespaces × routes pending, some
// namespaces at or near their ceiling, as a store returns it (sorted).
func benchWorld(namespaces, routes int) (Config, Snapshot) {
	cfg := Config{BatchSize: 1000, DefaultQuota: 50, Quotas: map[string]int{}}
	snap := Snapshot{Claimed: make(map[string]int, namespaces)}
	for i := 0; i < namespaces; i++ {
		ns := fmt.Sprintf("tenant-%06d", i)
		if i%10 == 0 {
			cfg.Quotas[ns] = 500
		}
		if c := i % 60; c > 0 {
			snap.Claimed[ns] = c
		}
		for j := 0; j < routes; j++ {
			snap.Pending = append(snap.Pending, RouteCount{Route: Route{Namespace: ns, TaskQueue: fmt.Sprintf("queue-%02d", j)}, Count: (i*7+j)%40 + 1})
		}
	}
	return cfg, snap
}

var sinkInt int

// baselinePass is the floor any planner pays: one linear pass over the
// snapshot doing each namespace's quota and claimed lookups and summing its
// pending rows into a demand.
func baselinePass(cfg Config, f OwnedShardFraction, s Snapshot) int {
	total := 0
	for i := 0; i < len(s.Pending); {
		ns := s.Pending[i].Route.Namespace
		p := 0
		for ; i < len(s.Pending) && s.Pending[i].Route.Namespace == ns; i++ {
			p += s.Pending[i].Count
		}
		q, ok := cfg.Quotas[ns]
		if !ok {
			q = cfg.DefaultQuota
		}
		total += min(p, max(0, f.Ceiling(q)-s.Claimed[ns]))
	}
	return total
}

func benchSizes(b *testing.B, fn func(b *testing.B, cfg Config, snap Snapshot)) {
	for _, n := range []int{10, 1000, 10000} {
		cfg, snap := benchWorld(n, 10)
		b.Run(fmt.Sprintf("namespaces=%d/routes=%d", n, len(snap.Pending)), func(b *testing.B) {
			fn(b, cfg, snap)
		})
	}
}

// BenchmarkPlan measures one sweep's plan in steady state (buffers warm).
// Compare with BenchmarkPlanBaseline: the target is ≤ 4× its time and
// ≤ 2 allocations per plan at 10,000 namespaces × 10 routes.
func BenchmarkPlan(b *testing.B) {
	benchSizes(b, benchPlanSteady)
}

// benchPlanSteady plans snap once to warm the buffers, then times Plan.
func benchPlanSteady(b *testing.B, cfg Config, snap Snapshot) {
	f, _ := NewOwnedShardFraction([]int{0, 1, 2}, 8)
	bp, err := New(cfg, f)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bp.Plan(snap); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := bp.Plan(snap)
		if err != nil {
			b.Fatal(err)
		}
		sinkInt += len(p.Claims)
	}
}

// BenchmarkPlanWeighted is BenchmarkPlan with every tenth namespace of
// weight 3 and every hundredth of weight 50: the weighted rotation
// (fillWeighted) instead of the unweighted one.
func BenchmarkPlanWeighted(b *testing.B) {
	benchSizes(b, func(b *testing.B, cfg Config, snap Snapshot) {
		cfg.Weights = map[string]int{}
		for i := 0; i*10 < len(snap.Pending)/10; i++ {
			ns := fmt.Sprintf("tenant-%06d", i*10)
			cfg.Weights[ns] = 3
			if i%10 == 0 {
				cfg.Weights[ns] = 50
			}
		}
		benchPlanSteady(b, cfg, snap)
	})
}

// BenchmarkPlanBaseline is one linear pass over the same snapshots.
func BenchmarkPlanBaseline(b *testing.B) {
	benchSizes(b, func(b *testing.B, cfg Config, snap Snapshot) {
		f, _ := NewOwnedShardFraction([]int{0, 1, 2}, 8)
		b.ReportAllocs()
		for b.Loop() {
			sinkInt += baselinePass(cfg, f, snap)
		}
	})
}

// BenchmarkPlanUnsorted is Plan when the store returns routes unordered
// and the planner must sort them.
func BenchmarkPlanUnsorted(b *testing.B) {
	benchSizes(b, func(b *testing.B, cfg Config, snap Snapshot) {
		for i := range snap.Pending { // a fixed shuffle
			j := (i * 7919) % len(snap.Pending)
			snap.Pending[i], snap.Pending[j] = snap.Pending[j], snap.Pending[i]
		}
		f, _ := NewOwnedShardFraction([]int{0, 1, 2}, 8)
		bp, _ := New(cfg, f)
		b.ReportAllocs()
		for b.Loop() {
			p, _ := bp.Plan(snap)
			sinkInt += len(p.Claims)
		}
	})
}

// BenchmarkPlanRates is BenchmarkPlan with every namespace rate limited
// (DefaultRate, and every tenth namespace its own Rates entry, some low
// enough to bind): the same target, ≤ 4× BenchmarkPlanBaseline and ≤ 2
// allocations per plan at 10,000 namespaces × 10 routes.
func BenchmarkPlanRates(b *testing.B) {
	benchSizes(b, func(b *testing.B, cfg Config, snap Snapshot) {
		cfg.DefaultRate = Rate{PerSecond: 1e6, Burst: 200}
		cfg.Rates = map[string]Rate{}
		for i := 0; i*10 < len(snap.Pending)/10; i++ {
			cfg.Rates[fmt.Sprintf("tenant-%06d", i*10)] = Rate{PerSecond: float64(i%7 + 1), Burst: i%5 + 1}
		}
		// Plans at a fixed time an hour after the node started: buckets
		// full (nothing is spent), the steady state.
		f, _ := NewOwnedShardFraction([]int{0, 1, 2}, 8)
		born := time.Unix(1_700_000_000, 0)
		bp, err := newAt(cfg, f, func() time.Time { return born })
		if err != nil {
			b.Fatal(err)
		}
		at := born.Add(time.Hour)
		if _, err := bp.PlanAt(snap, at); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			p, err := bp.PlanAt(snap, at)
			if err != nil {
				b.Fatal(err)
			}
			sinkInt += len(p.Claims)
		}
	})
}
