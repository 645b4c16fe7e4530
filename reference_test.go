package backpressure

import (
	"slices"
	"strings"
)

// refPlanner is the naive reference: it hands out the budget one unit at a
// time, round-robin over the namespaces (and then over each namespace's
// routes) starting after the rotation cursor, skipping the satisfied. It
// keeps its own cursors with the same meaning as Backpressure's: the last
// namespace (route) that got a unit of an incomplete round.
type refPlanner struct {
	batch       int
	quota       func(string) int
	fraction    OwnedShardFraction
	nsCursor    *string
	routeCursor map[string]string
}

func newRefPlanner(cfg Config, f OwnedShardFraction) *refPlanner {
	return &refPlanner{
		batch: cfg.BatchSize,
		quota: func(ns string) int {
			if q, ok := cfg.Quotas[ns]; ok {
				return q
			}
			return cfg.DefaultQuota
		},
		fraction:    f,
		routeCursor: map[string]string{},
	}
}

func (r *refPlanner) plan(s Snapshot) []ScopedClaim {
	routes := slices.Clone(s.Pending)
	routes = slices.DeleteFunc(routes, func(rc RouteCount) bool { return rc.Count == 0 })
	slices.SortFunc(routes, cmpRoute)
	byNS := map[string][]RouteCount{}
	var names []string
	for _, rc := range routes {
		if _, ok := byNS[rc.Route.Namespace]; !ok {
			names = append(names, rc.Route.Namespace)
		}
		byNS[rc.Route.Namespace] = append(byNS[rc.Route.Namespace], rc)
	}
	var active []string
	var demand []int
	for _, ns := range names {
		p := 0
		for _, rc := range byNS[ns] {
			p += rc.Count
		}
		c := r.fraction.Ceiling(r.quota(ns))
		d := p
		if c != Unlimited {
			d = min(p, max(0, c-s.Claimed[ns]))
		}
		if d > 0 {
			active = append(active, ns)
			demand = append(demand, d)
		}
	}
	start := 0
	if r.nsCursor != nil {
		start = sortedAfter(active, *r.nsCursor)
	}
	budget := r.batch
	if s.Budget > 0 {
		budget = min(budget, s.Budget)
	}
	grants, last := refFill(demand, budget, start)
	if last >= 0 {
		c := active[last]
		r.nsCursor = &c
	}
	var claims []ScopedClaim
	for k, ns := range active {
		rs := byNS[ns]
		caps := make([]int, len(rs))
		tqs := make([]string, len(rs))
		for j, rc := range rs {
			caps[j], tqs[j] = rc.Count, rc.Route.TaskQueue
		}
		start := 0
		if cur, ok := r.routeCursor[ns]; ok {
			start = sortedAfter(tqs, cur)
		}
		lim, last := refFill(caps, grants[k], start)
		if last >= 0 {
			r.routeCursor[ns] = tqs[last]
		}
		for j, l := range lim {
			if l > 0 {
				claims = append(claims, ScopedClaim{Route: rs[j].Route, Limit: l})
			}
		}
	}
	return claims
}

// refFill is unit-by-unit water-filling: whole rounds over every index
// still below its cap, then a partial round from start. Only a partial
// round (one that could not serve every unsatisfied index) moves the
// cursor, to the last index it served.
func refFill(caps []int, budget, start int) ([]int, int) {
	g := make([]int, len(caps))
	n := len(caps)
	if n == 0 {
		return g, -1
	}
	if start >= n {
		start = 0
	}
	for {
		var unsat []int
		for k := 0; k < n; k++ {
			i := (start + k) % n
			if g[i] < caps[i] {
				unsat = append(unsat, i)
			}
		}
		if len(unsat) == 0 || budget == 0 {
			return g, -1
		}
		if budget >= len(unsat) {
			for _, i := range unsat {
				g[i]++
			}
			budget -= len(unsat)
			continue
		}
		for _, i := range unsat[:budget] {
			g[i]++
		}
		return g, unsat[budget-1]
	}
}

// sortedAfter returns the index of the first name > cur in sorted names.
func sortedAfter(names []string, cur string) int {
	for i, n := range names {
		if strings.Compare(n, cur) > 0 {
			return i
		}
	}
	return 0
}
