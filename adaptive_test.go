package backpressure

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// refAdapt is the reference's model of the adaptive entries: what
// SetAdaptiveCeiling was last given per namespace.
type refAdapt struct {
	ceiling int
	until   time.Time
}

// TestPlanAdaptiveReference: with adaptive ceilings and holds set at
// random between plans, every plan equals the naive reference's (whose
// ceiling is min(static, adaptive) and whose held namespaces have demand
// 0), and every report satisfies the adaptive invariants: the adaptive
// ceiling in force never exceeds the static one, the headroom is under
// the lower of the two, a held namespace is granted nothing and its rows
// stay exactly pending (Held = Pending − Granted = Pending) with reason
// HeldAdaptive, and a hold ends at its time.
func TestPlanAdaptiveReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		names := namesOf(w.snap)
		now := epoch
		w.cfg.Clock = func() time.Time { return now }
		b := mustNew(t, w.cfg, w.frac)
		ref := newRefPlanner(w.cfg, w.frac)
		model := map[string]refAdapt{}
		for step := 0; step < 8; step++ {
			now = now.Add(genTick(t))
			for _, ns := range names {
				if !rapid.Bool().Draw(t, "change") {
					continue
				}
				a := refAdapt{ceiling: rapid.IntRange(0, 20).Draw(t, "adaptive")}
				if rapid.Bool().Draw(t, "hold") {
					a.until = now.Add(genTick(t))
				}
				if err := b.SetAdaptiveCeiling(ns, a.ceiling, a.until); err != nil {
					t.Fatalf("step %d: SetAdaptiveCeiling(%q, %d, %v): %v", step, ns, a.ceiling, a.until, err)
				}
				model[ns] = a
			}
			if rapid.Bool().Draw(t, "later") {
				now = now.Add(genTick(t)) // some holds end before the plan
			}
			ref.adaptive, ref.held = map[string]int{}, map[string]bool{}
			for ns, a := range model {
				ref.adaptive[ns] = a.ceiling
				ref.held[ns] = now.Before(a.until)
			}
			p, err := b.PlanAt(w.snap, now)
			if err != nil {
				t.Fatalf("step %d: PlanAt: %v", step, err)
			}
			if want := ref.plan(w.snap); !slices.Equal(p.Claims, want) {
				t.Fatalf("step %d: PlanAt claims\n%v\nreference (adaptive %v, held %v)\n%v", step, p.Claims, ref.adaptive, ref.held, want)
			}
			for _, r := range p.Namespaces {
				checkAdaptiveReport(t, step, r, model[r.Namespace], now)
			}
		}
	})
}

// checkAdaptiveReport checks one report against the adaptive entry a of
// its namespace at the plan's time now.
func checkAdaptiveReport(t *rapid.T, step int, r NamespaceReport, a refAdapt, now time.Time) {
	wantAdaptive := a.ceiling
	if a.ceiling > 0 && r.Ceiling != Unlimited {
		wantAdaptive = min(a.ceiling, r.Ceiling)
	}
	if r.Adaptive != wantAdaptive || r.Ceiling != Unlimited && r.Adaptive > r.Ceiling {
		t.Fatalf("step %d: %+v: Adaptive %d, want %d (set %d), never above Ceiling", step, r, r.Adaptive, wantAdaptive, a.ceiling)
	}
	c := r.Ceiling
	if r.Adaptive > 0 {
		c = r.Adaptive
	}
	if c != Unlimited && r.Headroom != max(0, c-r.Claimed) || r.Granted > r.Demand {
		t.Fatalf("step %d: %+v: headroom not under min(Ceiling, Adaptive) = %d", step, r, c)
	}
	if r.Held != r.Pending-r.Granted || r.Held < 0 {
		t.Fatalf("step %d: %+v: Held ≠ Pending − Granted", step, r)
	}
	held := now.Before(a.until)
	if held != (r.Hold > 0) || held && r.Hold != a.until.Sub(now) {
		t.Fatalf("step %d: %+v: Hold %v, want the hold %v at %v", step, r, r.Hold, a.until, now)
	}
	if held && (r.Demand != 0 || r.Granted != 0 || r.Held != r.Pending) {
		t.Fatalf("step %d: %+v: a held namespace has demand, a grant, or rows not pending", step, r)
	}
	if held && r.Held > 0 && r.Invalid == 0 && r.Quota != 0 && r.Reason != HeldAdaptive {
		t.Fatalf("step %d: %+v: held, reason %q, want %q", step, r, r.Reason, HeldAdaptive)
	}
	if !held && r.Reason == HeldAdaptive && (r.Adaptive == 0 || r.Ceiling != Unlimited && r.Adaptive >= r.Ceiling || r.Granted != r.Headroom) {
		t.Fatalf("step %d: %+v: reason adaptive without a hold or a binding adaptive ceiling", step, r)
	}
}

// TestSetAdaptiveCeilingErrors: a negative ceiling and a namespace no row
// can have are *ConfigErrors matching ErrInvalidConfig that change
// nothing; a Backpressure not built with New is refused too.
func TestSetAdaptiveCeilingErrors(t *testing.T) {
	now := epoch
	f, err := NewOwnedShardFraction([]int{0}, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{BatchSize: 10, DefaultQuota: 10, Clock: func() time.Time { return now }}, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetAdaptiveCeiling("a", 3, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns      string
		ceiling int
		field   string
	}{
		{"a", -1, `AdaptiveCeiling["a"]`},
		{"", 1, `AdaptiveCeiling[""]`},
		{"bad\x00", 1, `AdaptiveCeiling["bad\x00"]`},
		{strings.Repeat("x", 256), 1, ""},
	} {
		err := b.SetAdaptiveCeiling(c.ns, c.ceiling, now.Add(time.Hour))
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || c.field != "" && ce.Field != c.field {
			t.Fatalf("SetAdaptiveCeiling(%q, %d) = %v, want a *ConfigError on %s", c.ns, c.ceiling, err, c.field)
		}
	}
	p, err := b.Plan(Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a"}, Count: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := p.Namespace("a"); r.Adaptive != 3 || r.Granted != 3 || r.Hold != 0 || r.Reason != HeldAdaptive {
		t.Fatalf("after refused calls: %+v, want the ceiling 3 set before, no hold", r)
	}
	if err := (&Backpressure{}).SetAdaptiveCeiling("a", 1, time.Time{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("zero Backpressure: %v", err)
	}
	if HeldAdaptive.String() != "adaptive" {
		t.Fatalf("HeldAdaptive.String() = %q", HeldAdaptive.String())
	}
}

// TestAdaptiveHoldClears: a hold ends at its time, and ceiling 0 with no
// hold clears the entry, so the static ceiling alone applies again.
func TestAdaptiveHoldClears(t *testing.T) {
	now := epoch
	f, _ := NewOwnedShardFraction([]int{0}, 1)
	b, err := New(Config{BatchSize: 20, DefaultQuota: 6, Clock: func() time.Time { return now }}, f)
	if err != nil {
		t.Fatal(err)
	}
	snap := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a"}, Count: 8}, {Route: Route{Namespace: "b"}, Count: 8}}}
	until := now.Add(2 * time.Second)
	if err := b.SetAdaptiveCeiling("a", 2, until); err != nil {
		t.Fatal(err)
	}
	granted := func() (NamespaceReport, NamespaceReport) {
		t.Helper()
		p, err := b.Plan(snap)
		if err != nil {
			t.Fatal(err)
		}
		ra, _ := p.Namespace("a")
		rb, _ := p.Namespace("b")
		return ra, rb
	}
	if ra, rb := granted(); ra.Granted != 0 || ra.Held != 8 || ra.Reason != HeldAdaptive || ra.Hold != 2*time.Second || rb.Granted != 6 {
		t.Fatalf("held: a %+v, b %+v", ra, rb)
	}
	now = until
	if ra, _ := granted(); ra.Granted != 2 || ra.Reason != HeldAdaptive || ra.Hold != 0 {
		t.Fatalf("at the hold's end: %+v, want 2 granted under the adaptive ceiling", ra)
	}
	if err := b.SetAdaptiveCeiling("a", 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if ra, _ := granted(); ra.Granted != 6 || ra.Adaptive != 0 || ra.Reason != HeldAtCeiling || b.adaptOn.Load() {
		t.Fatalf("cleared: %+v, want the static ceiling 6 alone", ra)
	}
}
