package backpressure

import (
	"math"
	"math/big"
	"slices"
	"strings"
	"time"
)

// refPlanner is the naive reference: it hands out the budget one unit at a
// time, walking the rotation's rounds turn by turn from the cursor (see
// refWalk), skipping the satisfied namespaces, and then splits each grant
// over the namespace's routes round-robin (refFill). It keeps its own
// cursors with the same meaning as Backpressure's: the last namespace
// (route) that got a unit of an incomplete round, and for namespaces the
// position of that unit's turn in its round. With unweighted set it hands
// out namespaces' units with refFill too: the planner's rule before weights.
type refPlanner struct {
	cfg         Config
	fraction    OwnedShardFraction
	unweighted  bool
	nsCursor    *string
	nsCursorAt  [2]int // num, den
	routeCursor map[string]string
	// tokens, when set, caps each listed namespace's demand at its whole
	// tokens (rate limits; see refBuckets).
	tokens map[string]int
	// adaptive, when set, lowers each listed namespace's ceiling to its
	// value (0: none), never raising it; held namespaces have demand 0
	// (adaptive ceilings; see TestPlanAdaptiveReference).
	adaptive map[string]int
	held     map[string]bool
}

func newRefPlanner(cfg Config, f OwnedShardFraction) *refPlanner {
	return &refPlanner{cfg: cfg, fraction: f, nsCursorAt: [2]int{0, 1}, routeCursor: map[string]string{}}
}

func (r *refPlanner) quota(ns string) int {
	if q, ok := r.cfg.Quotas[ns]; ok {
		return q
	}
	return r.cfg.DefaultQuota
}

func (r *refPlanner) weight(ns string) int {
	if w, ok := r.cfg.Weights[ns]; ok {
		return w
	}
	return 1
}

func (r *refPlanner) plan(s Snapshot) []ScopedClaim {
	routes := slices.Clone(s.Pending)
	routes = slices.DeleteFunc(routes, func(rc RouteCount) bool { return rc.Count == 0 || rc.Route.Validate() != nil })
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
	var demand, weights []int
	for _, ns := range names {
		p := 0
		for _, rc := range byNS[ns] {
			p += rc.Count
		}
		c := r.fraction.Ceiling(r.quota(ns))
		if a := r.adaptive[ns]; a > 0 && (c == Unlimited || a < c) {
			c = a
		}
		d := p
		if c != Unlimited {
			d = min(p, max(0, c-s.Claimed[ns]))
		}
		if tk, ok := r.tokens[ns]; ok {
			d = min(d, tk)
		}
		if r.held[ns] {
			d = 0
		}
		if d > 0 {
			active = append(active, ns)
			demand = append(demand, d)
			weights = append(weights, r.weight(ns))
		}
	}
	// The indices after the cursor's namespace are those from start; with
	// none, start is len(active): every namespace's turn at the cursor's
	// position has passed.
	start := 0
	if r.nsCursor != nil {
		for start < len(active) && active[start] <= *r.nsCursor {
			start++
		}
	}
	budget := r.cfg.BatchSize
	if s.Budget > 0 {
		budget = min(budget, s.Budget)
	}
	var grants []int
	last, at := -1, [2]int{0, 1}
	if r.unweighted {
		if r.nsCursorAt[0] != 0 {
			start = 0
		}
		grants, last = refFill(demand, budget, start)
	} else {
		grants, last, at = refWalk(demand, weights, budget, start, r.nsCursorAt)
	}
	if last >= 0 {
		c := active[last]
		r.nsCursor, r.nsCursorAt = &c, at
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

// refWalk walks the rotation literally, round after round: in each round
// every index i below its cap has weights[i] turns, the j-th of them at
// position j/weights[i] of the unending sequence of rounds, and the turns
// are served in (position, index) order, one unit each, as long as the
// index is below its cap. The walk starts after the cursor: at position
// at = at[0]/at[1], before indices ≥ start and after the others. Only an
// incomplete round moves the cursor, to the last turn served, returned as
// its index and its position within its round.
func refWalk(caps, weights []int, budget, start int, at [2]int) ([]int, int, [2]int) {
	n := len(caps)
	g := make([]int, n)
	first := make([]int, n)
	cursor := big.NewRat(int64(at[0]), int64(at[1]))
	for i, w := range weights {
		// The first turn j/w past the cursor, by trying each from just
		// below the cursor.
		j := max(0, at[0]*w/at[1]-1)
		for {
			c := big.NewRat(int64(j), int64(w)).Cmp(cursor)
			if c > 0 || c == 0 && i >= start {
				break
			}
			j++
		}
		first[i] = j
	}
	type turn struct{ i, j int }
	for round := 0; ; round++ {
		var turns []turn
		for i := range caps {
			for k := 0; k < weights[i] && g[i]+k < caps[i]; k++ {
				turns = append(turns, turn{i, first[i] + round*weights[i] + k})
			}
		}
		if len(turns) == 0 || budget == 0 {
			return g, -1, [2]int{0, 1}
		}
		slices.SortFunc(turns, func(a, b turn) int {
			if c := big.NewRat(int64(a.j), int64(weights[a.i])).Cmp(big.NewRat(int64(b.j), int64(weights[b.i]))); c != 0 {
				return c
			}
			return a.i - b.i
		})
		if budget >= len(turns) {
			for _, t := range turns {
				g[t.i]++
			}
			budget -= len(turns)
			continue
		}
		for _, t := range turns[:budget] {
			g[t.i]++
		}
		t := turns[budget-1]
		return g, t.i, [2]int{t.j % weights[t.i], weights[t.i]}
	}
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

// refBuckets is the naive reference of rate limits on one node: every
// namespace it is told of has a bucket, empty at the start, and at every
// event (a plan, a spend, a change of settings) every bucket is refilled up
// to the event's time under the settings in force before it, literally
// tokens = min(burst, tokens + rate·o/n·dt), burst = ⌈Burst·o/n⌉.
type refBuckets struct {
	cfg    Config
	f      OwnedShardFraction
	names  []string
	tokens map[string]float64
	at     time.Time
}

func newRefBuckets(cfg Config, f OwnedShardFraction, names []string, t time.Time) *refBuckets {
	return &refBuckets{cfg: cfg, f: f, names: names, tokens: map[string]float64{}, at: t}
}

func (r *refBuckets) rate(ns string) Rate {
	if x, ok := r.cfg.Rates[ns]; ok {
		return x
	}
	return r.cfg.DefaultRate
}

// advance refills every bucket to t.
// Every bucket is held to its burst at every event, even one at the same
// instant as the last (dt = 0).
func (r *refBuckets) advance(t time.Time) {
	dt := max(0, t.Sub(r.at).Seconds())
	for _, ns := range r.names {
		x := r.rate(ns)
		if x.PerSecond == 0 {
			r.tokens[ns] = 0
			continue
		}
		burst := float64(r.f.Ceiling(x.Burst))
		perNode := x.PerSecond * float64(r.f.OwnedCount()) / float64(r.f.ShardCount())
		r.tokens[ns] = min(burst, min(burst, r.tokens[ns])+perNode*dt)
	}
	if t.After(r.at) {
		r.at = t
	}
}

// whole returns the whole tokens of every rate-limited namespace at t.
func (r *refBuckets) whole(t time.Time) map[string]int {
	r.advance(t)
	out := map[string]int{}
	for _, ns := range r.names {
		if x := r.rate(ns); x.PerSecond > 0 {
			burst := float64(r.f.Ceiling(x.Burst))
			out[ns] = int(max(0, math.Floor(min(burst, r.tokens[ns]))))
		}
	}
	return out
}

func (r *refBuckets) spend(started map[string]int, t time.Time) {
	r.advance(t)
	for ns, n := range started {
		if r.rate(ns).PerSecond > 0 {
			burst := float64(r.f.Ceiling(r.rate(ns).Burst))
			r.tokens[ns] = min(burst, r.tokens[ns]) - float64(n)
		}
	}
}

func (r *refBuckets) change(cfg Config, f OwnedShardFraction, t time.Time) {
	r.advance(t)
	// A namespace whose rate was lifted starts empty if it gets one again.
	for _, ns := range r.names {
		if x, ok := cfg.Rates[ns]; ok && x.PerSecond == 0 || !ok && cfg.DefaultRate.PerSecond == 0 {
			r.tokens[ns] = 0
		}
	}
	r.cfg, r.f = cfg, f
}
