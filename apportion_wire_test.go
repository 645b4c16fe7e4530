package backpressure

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestPlanSharesEquivalence checks the planner under ApportionShares, sweep
// after sweep: its plans are those of a single-shard node whose quotas are
// the shares ceilings (so every planner invariant carries over), its
// reports and Ceiling give CeilingFor, and capping pending counts at its
// PendingCountCap changes no claim.
func TestPlanSharesEquivalence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		w.cfg.Apportionment = ApportionShares
		b := mustNew(t, w.cfg, w.frac)
		capped := mustNew(t, w.cfg, w.frac)
		quota := func(ns string) int {
			if q, ok := w.cfg.Quotas[ns]; ok {
				return q
			}
			return w.cfg.DefaultQuota
		}
		one, _ := AllShards(1)
		eqCfg := Config{BatchSize: w.cfg.BatchSize, DefaultQuota: Unlimited, Quotas: map[string]int{}, Weights: w.cfg.Weights}
		names := map[string]bool{}
		for _, rc := range w.snap.Pending {
			names[rc.Route.Namespace] = true
		}
		for ns := range w.snap.Claimed {
			names[ns] = true
		}
		for ns := range names {
			if (Route{Namespace: ns}).Validate() != nil {
				continue // held as an invalid route under either config
			}
			c := w.frac.CeilingFor(ns, quota(ns), ApportionShares)
			eqCfg.Quotas[ns] = c
			if got := b.Ceiling(ns); got != c {
				t.Fatalf("Ceiling(%q) = %d, CeilingFor %d", ns, got, c)
			}
		}
		eq := mustNew(t, eqCfg, one)
		cp := b.pendingCountCap()
		if deepest := b.current().cfg.deeperThan(w.cfg.BatchSize); cp < 1 || cp > deepest {
			t.Fatalf("PendingCountCap() = %d, want 1..%d", cp, deepest)
		}
		cs := Snapshot{Claimed: w.snap.Claimed, Budget: w.snap.Budget}
		for _, rc := range w.snap.Pending {
			cs.Pending = append(cs.Pending, RouteCount{Route: rc.Route, Count: min(rc.Count, cp)})
		}
		for s := 0; s < 3; s++ {
			p, err1 := b.Plan(w.snap)
			pe, err2 := eq.Plan(w.snap)
			pc, err3 := capped.Plan(cs)
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatalf("sweep %d: Plan: %v", s, err)
			}
			if !slices.Equal(p.Claims, pe.Claims) || !slices.Equal(p.Claims, pc.Claims) {
				t.Fatalf("sweep %d: claims\nshares     %v\nequivalent %v\ncapped     %v", s, p.Claims, pe.Claims, pc.Claims)
			}
			for _, r := range p.Namespaces {
				if want := w.frac.CeilingFor(r.Namespace, r.Quota, ApportionShares); r.Ceiling != want {
					t.Fatalf("sweep %d: report %+v, want ceiling %d", s, r, want)
				}
				re, _ := pe.Namespace(r.Namespace)
				if r.Reason == HeldInvalidRoute {
					// No quota applies to a namespace no row may have:
					// the equivalent config could not name it.
					continue
				}
				if r.Ceiling != re.Ceiling || r.Granted != re.Granted || r.Held != re.Held || r.Demand != re.Demand {
					t.Fatalf("sweep %d: report %+v, equivalent %+v", s, r, re)
				}
			}
		}
	})
}

func TestNewRejectsApportionment(t *testing.T) {
	all, _ := AllShards(4)
	_, err := New(Config{BatchSize: 1, DefaultQuota: 1, Apportionment: 2}, all)
	var ce *ConfigError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "Apportionment" || ce.Value != 2 {
		t.Fatalf("New with Apportionment 2: %v", err)
	}
}

// The 10-node case: a quota of 20 over 64 shards in runs of 7, 7,
// 7, 7, 7, 7, 6, 6, 6, 4. The seed's rule lets the cluster run 26 rows of
// "acme" at once; shares, exactly 20.
func TestBackpressureCeilingShares(t *testing.T) {
	sizes := []int{7, 7, 7, 7, 7, 7, 6, 6, 6, 4}
	sum := map[Apportionment]int{}
	next := 0
	for _, n := range sizes {
		var ids []int
		for ; n > 0; n-- {
			ids = append(ids, next)
			next++
		}
		f, err := NewOwnedShardFraction(ids, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []Apportionment{ApportionCeil, ApportionShares} {
			b, err := New(Config{BatchSize: 10, DefaultQuota: 20, Apportionment: a}, f)
			if err != nil {
				t.Fatal(err)
			}
			sum[a] += b.Ceiling("acme")
		}
	}
	if sum[ApportionCeil] != 26 || sum[ApportionShares] != 20 {
		t.Fatalf("Σ Ceiling(acme) of quota 20: ceil %d, shares %d; want 26, 20", sum[ApportionCeil], sum[ApportionShares])
	}
}

// TestSharesCountCapAndWindow checks the two places outside the plan that
// depend on ceilings, under ApportionShares: PendingCountCap bounds every
// namespace's ceiling (capped at B), so capping counts at it changes no
// claim; and the pending window counts as at-ceiling exactly the claimed
// namespaces the plan reports at their ceiling.
func TestSharesCountCapAndWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		w.cfg.Apportionment = ApportionShares
		w.cfg.BatchSize = rapid.IntRange(1, 200).Draw(t, "batch")
		b := mustNew(t, w.cfg, w.frac)
		cp := b.pendingCountCap()
		for i := 0; i < 40; i++ {
			ns := "ns" + strconv.Itoa(i)
			if c := b.Ceiling(ns); c != Unlimited && cp < min(w.cfg.BatchSize, c) {
				t.Fatalf("PendingCountCap() = %d < min(B = %d, Ceiling(%q) = %d)", cp, w.cfg.BatchSize, ns, c)
			}
		}
		p, err := b.Plan(w.snap)
		if err != nil {
			t.Fatal(err)
		}
		st := b.current()
		k := st.zeroCeilings
		for _, r := range p.Namespaces {
			if r.Claimed > 0 && atCeiling(r.Ceiling, r.Claimed) {
				k++
			}
		}
		want, _ := windowFor(w.cfg.BatchSize, k)
		if n, _ := windowSize(w.snap.Claimed, st, w.cfg.BatchSize); n != want {
			t.Fatalf("windowSize = %d, want B + k + 1 = %d with k = %d from the plan", n, want, k)
		}
	})
}
