package backpressure

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// allShards is AllShards(n) for a test, which fails if it errs.
func allShards(t interface {
	Helper()
	Fatalf(string, ...any)
}, n int) OwnedShardFraction {
	t.Helper()
	f, err := AllShards(n)
	if err != nil {
		t.Fatalf("AllShards(%d): %v", n, err)
	}
	return f
}

func grants(p Plan) map[string]int {
	m := map[string]int{}
	for _, c := range p.Claims {
		m[c.Route.Namespace] += c.Limit
	}
	return m
}

func oneRoutePerNS(n, pending int) Snapshot {
	var s Snapshot
	for i := 0; i < n; i++ {
		s.Pending = append(s.Pending, RouteCount{Route: Route{Namespace: fmt.Sprintf("ns%02d", i), TaskQueue: "default"}, Count: pending})
	}
	return s
}

// B = 10 over 3 namespaces with budgets 2, 2, 2, 0 (B), 11 (capped at B):
// the rotation carries over between budgets, and cumulative grants are
// equal after every round of the rotation.
func TestPlanStepsBudgets(t *testing.T) {
	b := mustNew(t, Config{BatchSize: 10, DefaultQuota: Unlimited}, allShards(t, 1))
	snap := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 100}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 100}, {Route: Route{Namespace: "c", TaskQueue: "q"}, Count: 100}}}
	steps := []struct {
		budget int
		want   map[string]int
	}{
		{2, map[string]int{"a": 1, "b": 1}},
		{2, map[string]int{"a": 1, "c": 1}},
		{2, map[string]int{"b": 1, "c": 1}},
		{0, map[string]int{"a": 4, "b": 3, "c": 3}},
		{11, map[string]int{"a": 3, "b": 4, "c": 3}},
		{1, map[string]int{"c": 1}},
	}
	for i, st := range steps {
		snap.Budget = st.budget
		p, err := b.Plan(snap)
		if err != nil {
			t.Fatalf("step %d: Plan(budget %d): %v", i, st.budget, err)
		}
		if got := grants(p); fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("step %d: Plan(budget %d) grants = %v, want %v", i, st.budget, got, st.want)
		}
		if want := min(10, st.budget); st.budget == 0 && p.Budget != 10 || st.budget > 0 && p.Budget != want {
			t.Fatalf("step %d: Plan(budget %d).Budget = %d", i, st.budget, p.Budget)
		}
	}
}

// B = 10 over 3 namespaces: 4,3,3 then 3,4,3 then 3,3,4 — 10 each after 3.
func TestPlanStepsRotation(t *testing.T) {
	b := mustNew(t, Config{BatchSize: 10, DefaultQuota: Unlimited}, allShards(t, 1))
	snap := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 100}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 100}, {Route: Route{Namespace: "c", TaskQueue: "q"}, Count: 100}}}
	steps := []map[string]int{
		{"a": 4, "b": 3, "c": 3},
		{"a": 3, "b": 4, "c": 3},
		{"a": 3, "b": 3, "c": 4},
		{"a": 4, "b": 3, "c": 3},
	}
	cum := map[string]int{}
	for i, want := range steps {
		p, err := b.Plan(snap)
		if err != nil {
			t.Fatalf("step %d: Plan: %v", i, err)
		}
		got := grants(p)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: Plan(%v) grants = %v, want %v", i, snap.Pending, got, want)
		}
		for ns, g := range got {
			cum[ns] += g
		}
		if i == 2 && fmt.Sprint(cum) != fmt.Sprint(map[string]int{"a": 10, "b": 10, "c": 10}) {
			t.Fatalf("after 3 sweeps cumulative = %v, want 10 each", cum)
		}
	}
}

// A bursty tenant on 50 task queues gets the same share as a quiet one on 1,
// and its half is spread one row per queue, rotating over its queues.
func TestPlanStepsBurstyVersusQuiet(t *testing.T) {
	b := mustNew(t, Config{BatchSize: 10, DefaultQuota: Unlimited}, allShards(t, 64))
	var snap Snapshot
	for q := 0; q < 50; q++ {
		snap.Pending = append(snap.Pending, RouteCount{Route: Route{Namespace: "bursty", TaskQueue: fmt.Sprintf("q%02d", q)}, Count: 1000})
	}
	snap.Pending = append(snap.Pending, RouteCount{Route: Route{Namespace: "quiet", TaskQueue: "default"}, Count: 1000})
	served := map[string]int{}
	for step := 0; step < 10; step++ {
		p, err := b.Plan(snap)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if g := grants(p); g["bursty"] != 5 || g["quiet"] != 5 {
			t.Fatalf("step %d: grants = %v, want bursty 5, quiet 5", step, g)
		}
		for _, c := range p.Claims {
			if c.Route.Namespace == "bursty" {
				if c.Limit != 1 {
					t.Fatalf("step %d: bursty route %v limit %d, want 1", step, c.Route, c.Limit)
				}
				served[c.Route.TaskQueue]++
			}
		}
	}
	if len(served) != 50 {
		t.Fatalf("after 10 sweeps bursty's rows came from %d queues, want all 50: %v", len(served), served)
	}
}

// A tenant at its ceiling is held with reason at-ceiling; its headroom is
// claimed-only; the budget it cannot use goes to the others.
func TestPlanStepsHeldAtCeiling(t *testing.T) {
	cfg := Config{BatchSize: 10, DefaultQuota: 5, Quotas: map[string]int{"big": Unlimited, "off": 0}, Weights: map[string]int{"big": 2, "off": 4}}
	b := mustNew(t, cfg, allShards(t, 8))
	snap := Snapshot{
		Claimed: map[string]int{"full": 5, "over": 9, "part": 3, "idle": 2},
		Pending: []RouteCount{
			{Route: Route{Namespace: "full", TaskQueue: "q"}, Count: 20}, {Route: Route{Namespace: "over", TaskQueue: "q"}, Count: 1}, {Route: Route{Namespace: "part", TaskQueue: "q"}, Count: 20},
			{Route: Route{Namespace: "big", TaskQueue: "q"}, Count: 40}, {Route: Route{Namespace: "off", TaskQueue: "q"}, Count: 7},
		},
	}
	p, err := b.Plan(snap)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]NamespaceReport{
		"big":  {Namespace: "big", Weight: 2, Quota: Unlimited, Ceiling: Unlimited, Headroom: Unlimited, Pending: 40, Demand: 40, Granted: 8, Held: 32, Reason: HeldBudget},
		"full": {Namespace: "full", Weight: 1, Quota: 5, Ceiling: 5, Claimed: 5, Headroom: 0, Pending: 20, Demand: 0, Granted: 0, Held: 20, Reason: HeldAtCeiling},
		"idle": {Namespace: "idle", Weight: 1, Quota: 5, Ceiling: 5, Claimed: 2, Headroom: 3},
		"off":  {Namespace: "off", Weight: 4, Quota: 0, Ceiling: 0, Headroom: 0, Pending: 7, Held: 7, Reason: HeldPaused},
		"over": {Namespace: "over", Weight: 1, Quota: 5, Ceiling: 5, Claimed: 9, Headroom: 0, Pending: 1, Held: 1, Reason: HeldAtCeiling},
		"part": {Namespace: "part", Weight: 1, Quota: 5, Ceiling: 5, Claimed: 3, Headroom: 2, Pending: 20, Demand: 2, Granted: 2, Held: 18, Reason: HeldAtCeiling},
	}
	if len(p.Namespaces) != len(want) {
		t.Fatalf("Plan reports %d namespaces, want %d: %+v", len(p.Namespaces), len(want), p.Namespaces)
	}
	for _, r := range p.Namespaces {
		if r != want[r.Namespace] {
			t.Errorf("report %+v\n want %+v", r, want[r.Namespace])
		}
	}
	if p.Granted() != 10 || p.Held() != 78 {
		t.Errorf("Granted() = %d, Held() = %d; want 10, 78", p.Granted(), p.Held())
	}
}

// 25 active namespaces with B = 10: each is served within every 3 sweeps.
func TestPlanStepsMoreNamespacesThanBudget(t *testing.T) {
	b := mustNew(t, Config{BatchSize: 10, DefaultQuota: Unlimited}, allShards(t, 1))
	snap := oneRoutePerNS(25, 5)
	last := map[string]int{}
	for step := 1; step <= 9; step++ {
		p, err := b.Plan(snap)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Claims) != 10 {
			t.Fatalf("step %d: %d claims, want 10", step, len(p.Claims))
		}
		for _, c := range p.Claims {
			if c.Limit != 1 {
				t.Fatalf("step %d: %v", step, c)
			}
			last[c.Route.Namespace] = step
		}
		for _, rc := range snap.Pending {
			if step >= 3 && step-last[rc.Route.Namespace] >= 3 {
				t.Fatalf("step %d: %s last served at step %d", step, rc.Route.Namespace, last[rc.Route.Namespace])
			}
		}
	}
}

// Per-node ceilings of a cluster-wide quota.
func TestCeilingSteps(t *testing.T) {
	split := func(shards int, sizes ...int) []OwnedShardFraction {
		var fs []OwnedShardFraction
		next := 0
		for _, n := range sizes {
			var ids []int
			for i := 0; i < n; i++ {
				ids = append(ids, next)
				next++
			}
			f, err := NewOwnedShardFraction(ids, shards)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		return fs
	}
	for i, tc := range []struct {
		quota  int
		shards int
		sizes  []int
		want   []int
	}{
		{100, 256, []int{86, 85, 85}, []int{34, 34, 34}},
		{100, 256, []int{128, 64, 64}, []int{50, 25, 25}},
		{100, 256, []int{256, 0, 0}, []int{100, 0, 0}},
		{1, 256, []int{86, 85, 85}, []int{1, 1, 1}},
		{3, 10, []int{1, 9}, []int{1, 3}},
		{Unlimited, 4, []int{2, 2}, []int{Unlimited, Unlimited}},
	} {
		sum := 0
		for k, f := range split(tc.shards, tc.sizes...) {
			if got := f.Ceiling(tc.quota); got != tc.want[k] {
				t.Errorf("step %d: node %d (%v) Ceiling(%d) = %d, want %d", i, k, f, tc.quota, got, tc.want[k])
			}
			sum += f.Ceiling(tc.quota)
		}
		if tc.quota == 100 && (sum < 100 || sum > 102) {
			t.Errorf("step %d: Σ ceilings of quota 100 over 3 nodes = %d, want 100..102", i, sum)
		}
	}
}

func TestPlanSnapshotErrors(t *testing.T) {
	// Two planners in step; one also sees each bad snapshot, which must
	// change nothing: the next good plan of both is the same.
	good := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q1"}, Count: 9}, {Route: Route{Namespace: "a", TaskQueue: "q2"}, Count: 9}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 9}}}
	for i, s := range []Snapshot{
		{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: -1}}},
		{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 1}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 1}, {Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 2}}},
		{Claimed: map[string]int{"a": -2}},
		{Pending: good.Pending, Budget: -1},
	} {
		b := mustNew(t, Config{BatchSize: 3, DefaultQuota: Unlimited}, allShards(t, 1))
		twin := mustNew(t, Config{BatchSize: 3, DefaultQuota: Unlimited}, allShards(t, 1))
		for _, x := range []*Backpressure{b, twin} {
			if _, err := x.Plan(good); err != nil {
				t.Fatal(err)
			}
		}
		p, err := b.Plan(s)
		var se *SnapshotError
		if !errors.Is(err, ErrInvalidSnapshot) || !errors.As(err, &se) {
			t.Errorf("step %d: Plan(%+v) = %v, %v; want a *SnapshotError", i, s, p, err)
		}
		p1, _ := b.Plan(good)
		p2, _ := twin.Plan(good)
		if fmt.Sprint(p1.Claims) != fmt.Sprint(p2.Claims) {
			t.Errorf("step %d: a rejected snapshot moved the cursors: %v, want %v", i, p1.Claims, p2.Claims)
		}
	}
}

func TestNewConfigErrors(t *testing.T) {
	f := allShards(t, 4)
	for i, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{BatchSize: 0, DefaultQuota: 1}, "BatchSize"},
		{Config{BatchSize: -5, DefaultQuota: 1}, "BatchSize"},
		{Config{BatchSize: 1, DefaultQuota: 0}, "DefaultQuota"},
		{Config{BatchSize: 1, DefaultQuota: -2}, "DefaultQuota"},
		{Config{BatchSize: 1, DefaultQuota: 1, Quotas: map[string]int{"x": -7}}, `Quotas["x"]`},
		// Issue 13 §3: keys no row can have.
		{Config{BatchSize: 1, DefaultQuota: 1, Quotas: map[string]int{"": 5}}, `Quotas[""]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Quotas: map[string]int{"a\x00b": 5}}, `Quotas["a\x00b"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Quotas: map[string]int{"\xff": 0}}, `Quotas["\xff"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Quotas: map[string]int{strings.Repeat("n", maxNamespaceBytes+1): 1}}, `Quotas["` + strings.Repeat("n", maxNamespaceBytes+1) + `"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Weights: map[string]int{"x": 0}}, `Weights["x"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Weights: map[string]int{"x": -3}}, `Weights["x"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Weights: map[string]int{"x": maxWeight + 1}}, `Weights["x"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Weights: map[string]int{"x": math.MaxInt}}, `Weights["x"]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Weights: map[string]int{"": 2}}, `Weights[""]`},
		{Config{BatchSize: 1, DefaultQuota: 1, Weights: map[string]int{"a\x00b": 2}}, `Weights["a\x00b"]`},
	} {
		_, err := New(tc.cfg, f)
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("step %d: New(%+v) = %v, want a *ConfigError for %s", i, tc.cfg, err, tc.field)
		}
		// SetConfig rejects what New rejects, and changes nothing.
		b := mustNew(t, Config{BatchSize: 3, DefaultQuota: 2, Weights: map[string]int{"x": 5}}, f)
		err = b.SetConfig(tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("step %d: SetConfig(%+v) = %v, want a *ConfigError for %s", i, tc.cfg, err, tc.field)
		}
		if b.BatchSize() != 3 || b.Quota("x") != 2 || b.Weight("x") != 5 {
			t.Errorf("step %d: a rejected SetConfig changed the config: %+v", i, b.Config())
		}
	}
	// Weights: 1 to maxWeight, 1 by default; Config returns a copy.
	weights := map[string]int{"heavy": maxWeight, "one": 1}
	wb, err := New(Config{BatchSize: 2, DefaultQuota: 1, Weights: weights}, f)
	if err != nil {
		t.Fatal(err)
	}
	weights["heavy"] = 2 // New copied the map
	if wb.Weight("heavy") != maxWeight || wb.Weight("one") != 1 || wb.Weight("other") != 1 {
		t.Errorf("Weight(heavy) = %d, Weight(one) = %d, Weight(other) = %d", wb.Weight("heavy"), wb.Weight("one"), wb.Weight("other"))
	}
	got := wb.Config()
	got.Weights["heavy"] = 3 // a copy too
	if want := (Config{BatchSize: 2, DefaultQuota: 1, Weights: map[string]int{"heavy": maxWeight}}); fmt.Sprint(wb.Config()) != fmt.Sprint(want) {
		t.Errorf("Config() = %+v, want %+v", wb.Config(), want)
	}
	if err := wb.SetConfig(Config{BatchSize: 9, DefaultQuota: Unlimited, Quotas: map[string]int{"p": 0}}); err != nil {
		t.Fatal(err)
	}
	if wb.BatchSize() != 9 || wb.Quota("p") != 0 || wb.Quota("q") != Unlimited || wb.Weight("heavy") != 1 {
		t.Errorf("after SetConfig: %+v", wb.Config())
	}
	var zero Backpressure
	if err := zero.SetConfig(Config{BatchSize: 1, DefaultQuota: 1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero Backpressure: SetConfig = %v, want ErrInvalidConfig", err)
	}
	if zero.BatchSize() != 0 || zero.Quota("x") != 0 || zero.Weight("x") != 1 {
		t.Errorf("zero Backpressure: BatchSize %d, Quota %d, Weight %d", zero.BatchSize(), zero.Quota("x"), zero.Weight("x"))
	}
	// The longest valid key, and text that is odd but valid, are accepted.
	if _, err := New(Config{BatchSize: 1, DefaultQuota: 1, Quotas: map[string]int{strings.Repeat("n", maxNamespaceBytes): 1, "é/ü q": 2}}, f); err != nil {
		t.Errorf("New with valid odd keys: %v", err)
	}
	quotas := map[string]int{"x": 3}
	b, err := New(Config{BatchSize: 1, DefaultQuota: Unlimited, Quotas: quotas}, f)
	if err != nil {
		t.Fatal(err)
	}
	quotas["x"] = 0 // New copied the map
	if b.Quota("x") != 3 || b.Quota("y") != Unlimited || b.Ceiling("x") != 3 {
		t.Errorf("Quota(x) = %d, Quota(y) = %d, Ceiling(x) = %d", b.Quota("x"), b.Quota("y"), b.Ceiling("x"))
	}
	if err := b.SetOwnedShards(OwnedShardFraction{}); !errors.Is(err, ErrInvalidShards) {
		t.Errorf("SetOwnedShards(zero) = %v, want ErrInvalidShards", err)
	}
	if _, err := New(Config{BatchSize: 1, DefaultQuota: 1}, OwnedShardFraction{}); !errors.Is(err, ErrInvalidShards) {
		t.Errorf("New with a zero fraction: %v, want ErrInvalidShards", err)
	}
	half, _ := NewOwnedShardFraction([]int{0, 1}, 4)
	if err := b.SetOwnedShards(half); err != nil {
		t.Fatal(err)
	}
	if b.Ceiling("x") != 2 || !b.OwnedShards().Equal(half) {
		t.Errorf("after SetOwnedShards(%v): Ceiling(x) = %d, want 2", half, b.Ceiling("x"))
	}
}

func TestZeroBackpressure(t *testing.T) {
	var b Backpressure
	if _, err := b.Plan(Snapshot{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero Backpressure: Plan() error = %v, want ErrInvalidConfig", err)
	}
	var nilB *Backpressure
	if _, err := nilB.Plan(Snapshot{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil Backpressure: Plan() error = %v, want ErrInvalidConfig", err)
	}
}

// 100 rows of 10 tenants plus rows on routes Route.Validate rejects (written
// by other means): the plan grants the 100, holds each invalid route's rows
// with reason invalid-route in its namespace's report, and plans the rest
// as if they were absent. "" is a valid task queue, planned like any other.
func TestPlanInvalidRouteHeld(t *testing.T) {
	for i, bad := range []Route{
		{Namespace: "", TaskQueue: "q"},
		{Namespace: "t03", TaskQueue: "bad\x00queue"},
		{Namespace: "bad\x00ns", TaskQueue: "q"},
		{Namespace: "t05", TaskQueue: "\xff"},
		{Namespace: strings.Repeat("n", maxNamespaceBytes+1), TaskQueue: "q"},
		{Namespace: "t07", TaskQueue: strings.Repeat("q", maxTaskQueueBytes+1)},
	} {
		if bad.Validate() == nil {
			t.Fatalf("step %d: Route.Validate(%q) = nil, the test needs an invalid route", i, bad)
		}
		b := mustNew(t, Config{BatchSize: 200, DefaultQuota: Unlimited}, allShards(t, 4))
		clean := mustNew(t, Config{BatchSize: 200, DefaultQuota: Unlimited}, allShards(t, 4))
		var good Snapshot
		for n := 0; n < 10; n++ {
			good.Pending = append(good.Pending, RouteCount{Route: Route{Namespace: fmt.Sprintf("t%02d", n), TaskQueue: ""}, Count: 6}, RouteCount{Route: Route{Namespace: fmt.Sprintf("t%02d", n), TaskQueue: "emails"}, Count: 4})
		}
		withBad := Snapshot{Pending: append([]RouteCount{{Route: bad, Count: 7}}, good.Pending...)}
		for sweep := 0; sweep < 3; sweep++ {
			p, err := b.Plan(withBad)
			if err != nil {
				t.Fatalf("step %d, sweep %d: Plan with invalid route %q: %v", i, sweep, bad, err)
			}
			want, err := clean.Plan(good)
			if err != nil {
				t.Fatal(err)
			}
			if p.Granted() != 100 || fmt.Sprint(p.Claims) != fmt.Sprint(want.Claims) {
				t.Fatalf("step %d, sweep %d: claims %v (granted %d), want %v", i, sweep, p.Claims, p.Granted(), want.Claims)
			}
			r, ok := p.Namespace(bad.Namespace)
			if !ok || r.Reason != HeldInvalidRoute || r.Invalid != 7 || r.Held != 7 || r.Granted != r.Pending-7 {
				t.Fatalf("step %d, sweep %d: report of %q = %+v (found %v), want 7 held invalid-route", i, sweep, bad.Namespace, r, ok)
			}
			if p.Held() != 7 {
				t.Fatalf("step %d, sweep %d: Plan.Held() = %d, want 7", i, sweep, p.Held())
			}
		}
	}
	if got := HeldInvalidRoute.String(); got != "invalid-route" {
		t.Errorf("HeldInvalidRoute.String() = %q", got)
	}
}
