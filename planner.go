package backpressure

import (
	"cmp"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/internal/limits"
)

// Snapshot is what a node knows of its outbox at the start of a sweep: the
// input of [Backpressure.Plan]. Plan reads it and never keeps or changes
// it. The zero Snapshot (nothing claimed, nothing pending, budget B) is
// valid and plans nothing.
type Snapshot struct {
	// Claimed maps a namespace to its rows holding a live lease on the
	// node's shards (OutboxStore.CountClaimedOutboxRows). Missing means 0.
	Claimed map[string]int

	// Pending lists claimable rows per route on the node's shards
	// (OutboxStore.CountPendingOutboxRows), in any order. A route may appear
	// only once; a count of 0 is ignored.
	Pending []RouteCount

	// Budget is the most rows this sweep may claim: 0 means the batch size
	// B, a budget above B counts as B, and a negative one is invalid. A
	// dispatcher asks for fewer rows than B when fewer workers are idle
	// (see [SweepN]); the plan's guarantees then hold with min(Budget, B)
	// in place of B, and the rotation carries over between budgets.
	Budget int
}

// HoldReason says why a namespace's pending rows were held (left Pending
// for a later sweep) rather than claimed. The zero value, HeldNone, means
// nothing was held.
type HoldReason uint8

const (
	// HeldNone: nothing was held.
	HeldNone HoldReason = iota
	// HeldAtCeiling: the namespace's claimed rows reached its per-node
	// ceiling; the rows wait for claimed ones to settle.
	HeldAtCeiling
	// HeldBudget: the namespace had headroom, but the sweep's batch was
	// shared out; the rows come next sweep.
	HeldBudget
	// HeldPaused: the namespace's quota is 0.
	HeldPaused
	// HeldInvalidRoute: some of the namespace's rows are on a route that
	// [outbox.Route.Validate] rejects (written by other means than a store's
	// Enqueue); the report's Invalid counts them. They are never claimed,
	// and the rest of the sweep is planned as if they were absent. This
	// reason takes precedence over the others: it needs an operator.
	HeldInvalidRoute
	// HeldRate: the namespace had headroom, but its rate limit's bucket
	// (see [Rate]) held fewer tokens than its headroom and pending rows;
	// the rows come as tokens accrue. They hold no concurrency slot.
	HeldRate
	// HeldAdaptive: a downstream's advisory signals hold the namespace on
	// this node (see [Backpressure.SetAdaptiveCeiling]): until the
	// report's Hold has passed its demand is 0, or its claimed rows reached its
	// adaptive ceiling (Adaptive), below the static one.
	HeldAdaptive
)

// String returns "", "at-ceiling", "budget", "paused", "invalid-route",
// "rate" or "adaptive", and "HoldReason(n)" for any other value.
func (r HoldReason) String() string {
	switch r {
	case HeldNone:
		return ""
	case HeldAtCeiling:
		return "at-ceiling"
	case HeldBudget:
		return "budget"
	case HeldPaused:
		return "paused"
	case HeldInvalidRoute:
		return "invalid-route"
	case HeldRate:
		return "rate"
	case HeldAdaptive:
		return "adaptive"
	}
	return "HoldReason(" + strconv.Itoa(int(r)) + ")"
}

// NamespaceReport is a plan's account of one namespace: every namespace
// with pending or claimed rows in the snapshot has one. Its counts are the
// snapshot's (Sweep counts a route only as deep as a plan can use, so
// under Sweep they may be lower bounds: see Capped), and they satisfy
//
//	Headroom = max(0, min(Ceiling, Adaptive) − Claimed)   (an Unlimited or 0 Adaptive term drops out)
//	Demand   = min(Headroom, Tokens, Pending − Invalid)   (an Unlimited term drops out); 0 while Hold > 0
//	Granted  ≤ Demand
//	Held     = Pending − Granted ≥ 0
//	Adaptive ≤ Ceiling                                   (when Ceiling is not Unlimited)
type NamespaceReport struct {
	Namespace string
	Quota     int        // cluster-wide quota, or Unlimited (-1: export it as +Inf, not -1); 0 means paused
	Weight    int        // its weight (Config.Weights), ≥ 1
	Ceiling   int        // per-node ceiling (Backpressure.Ceiling; by default ⌈Quota × owned/shardCount⌉), or Unlimited (-1)
	Claimed   int        // rows holding a live lease, from the snapshot
	Headroom  int        // rows the namespace may still claim, or Unlimited (-1)
	Pending   int        // claimable rows over all its routes
	Demand    int        // rows it could usefully claim this sweep
	Granted   int        // rows planned for it this sweep
	Held      int        // rows left Pending for a later sweep
	Invalid   int        // pending rows on routes Route.Validate rejects: held, never claimed (see HeldInvalidRoute)
	Reason    HoldReason // why rows were held; HeldNone when Held == 0
	// Capped is set by Sweep when a route of the namespace was counted only
	// up to the depth Sweep counted at, so it may hold more rows: Pending,
	// Demand and Held are then lower bounds. When it is false they are exact, except
	// in a windowed plan (Plan.Windowed) for a namespace outside the
	// window, which was not counted at all and shows Pending 0.
	Capped bool
	// Rate is the namespace's cluster-wide rate limit (Config.Rates,
	// Config.DefaultRate); the zero Rate means none.
	Rate Rate
	// Tokens is, for a rate-limited namespace, the whole tokens its bucket
	// held on this node when the plan was made (≥ 0; see [Rate]); 0 when
	// Rate is zero.
	Tokens int
	// Adaptive is the namespace's adaptive ceiling on this node (see
	// [Backpressure.SetAdaptiveCeiling]) as it applied: min(the ceiling
	// set, Ceiling), never above Ceiling; 0 when none is set.
	Adaptive int
	// Hold is, while a downstream's Retry-After holds the namespace
	// (SetAdaptiveCeiling's holdUntil, after the plan's time t), the time
	// left, holdUntil − t: its demand is then 0 and its rows are held,
	// reason HeldAdaptive. 0 when no hold applies.
	Hold time.Duration
}

// LogValue makes a report log as a group of its fields.
func (r NamespaceReport) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("namespace", r.Namespace),
		slog.Int("quota", r.Quota),
		slog.Int("ceiling", r.Ceiling),
		slog.Int("claimed", r.Claimed),
		slog.Int("headroom", r.Headroom),
		slog.Int("pending", r.Pending),
		slog.Int("granted", r.Granted),
		slog.Int("held", r.Held),
	}
	if r.Weight > 1 {
		attrs = append(attrs, slog.Int("weight", r.Weight))
	}
	if r.Capped {
		attrs = append(attrs, slog.Bool("capped", true))
	}
	if r.Invalid > 0 {
		attrs = append(attrs, slog.Int("invalid", r.Invalid))
	}
	if limited(r.Rate) {
		attrs = append(attrs, slog.Float64("rate", r.Rate.PerSecond), slog.Int("burst", r.Rate.Burst), slog.Int("tokens", r.Tokens))
	}
	if r.Adaptive > 0 {
		attrs = append(attrs, slog.Int("adaptive", r.Adaptive))
	}
	if r.Hold > 0 {
		attrs = append(attrs, slog.Duration("hold", r.Hold))
	}
	if r.Reason != HeldNone {
		attrs = append(attrs, slog.String("reason", r.Reason.String()))
	}
	return slog.GroupValue(attrs...)
}

// Plan is one sweep's claim plan, made by [Backpressure.Plan] or a sweep.
// Its slices are its own: a caller may keep and read it from several
// goroutines. The zero Plan claims nothing. With B the plan's Budget and d_n, g_n, w_n a namespace's demand, grant
// and weight:
//
//	Σ Claims[i].Limit = Σ g_n = min(B, Σ d_n)          (budget, work-conserving)
//	Σ limits of n's routes = g_n ≤ Headroom_n           (ceiling)
//	g_n ≤ Tokens_n for a rate-limited namespace         (rate; see [Rate])
//	1 ≤ limit of route r ≤ P_r                          (pending)
//	g_i < d_i ⇒ (g_j − 1)/w_j < (g_i + 1)/w_i for all j  (weighted max-min fair)
//
// and, unweighted, the same max-min fairness over the routes of one
// namespace. With every weight 1 the fairness rule reads g_i < d_i ⇒
// g_j ≤ g_i + 1: no namespace gets more than one row above one whose demand
// was not met.
//
// Across sweeps, under steady demand, the namespaces G that no sweep has
// satisfied have cumulative grants G_n that track their weights within one
// row:
//
//	(G_j − 1)/w_j ≤ G_i/w_i   for all i, j in G
//
// and each of them is served at least once every ⌈Σ w_n / b⌉ sweeps, for b
// the smallest budget and the sum over the namespaces with demand. The
// rotation that makes this so is described in docs/planner.md.
type Plan struct {
	// Budget is the most rows the plan could grant: the batch size, or the
	// smaller budget the sweep asked for (Snapshot.Budget, SweepN).
	Budget int
	// Claims lists the scoped claims, sorted by namespace then task queue;
	// every Limit is ≥ 1.
	Claims []ScopedClaim
	// Namespaces reports every namespace of the snapshot, sorted by name.
	Namespaces []NamespaceReport
	// Windowed is set by Sweep when the store counted only a window of the
	// namespaces (see [Counter]) and the window was full, so there
	// may be more beyond it: the claims are the same as a full count's, but
	// Namespaces then covers the window, and a namespace outside it
	// appears only if it has claimed rows, with Pending 0.
	Windowed bool

	// countCap is, for a plan Sweep made, the cap its store counts were
	// taken at (1 for a windowed plan): a route whose count reached it may
	// hold more rows (see markCapped). 0 for a plan Backpressure.Plan made.
	countCap int
}

// Granted returns the rows the plan claims: Σ Claims[i].Limit.
func (p Plan) Granted() int {
	n := 0
	for _, c := range p.Claims {
		n += c.Limit
	}
	return n
}

// Held returns the rows the plan leaves Pending: Σ Namespaces[i].Held.
func (p Plan) Held() int {
	n := 0
	for _, r := range p.Namespaces {
		n, _ = addOver(n, r.Held, false)
	}
	return n
}

// Namespace returns the report of namespace ns, if the snapshot had it.
func (p Plan) Namespace(ns string) (NamespaceReport, bool) {
	i, ok := slices.BinarySearchFunc(p.Namespaces, ns, func(r NamespaceReport, ns string) int {
		return strings.Compare(r.Namespace, ns)
	})
	if !ok {
		return NamespaceReport{}, false
	}
	return p.Namespaces[i], true
}

// LogValue summarises the plan for a log line: the totals and the number of
// namespaces held for each reason. Log Namespaces[i] for the details.
func (p Plan) LogValue() slog.Value {
	var active, atCeiling, budget, paused, invalid, rate, adaptive int
	for _, r := range p.Namespaces {
		if r.Granted > 0 {
			active++
		}
		switch r.Reason {
		case HeldAtCeiling:
			atCeiling++
		case HeldBudget:
			budget++
		case HeldPaused:
			paused++
		case HeldInvalidRoute:
			invalid++
		case HeldRate:
			rate++
		case HeldAdaptive:
			adaptive++
		}
	}
	return slog.GroupValue(
		slog.Int("budget", p.Budget),
		slog.Int("granted", p.Granted()),
		slog.Int("held", p.Held()),
		slog.Int("claims", len(p.Claims)),
		slog.Int("namespaces", len(p.Namespaces)),
		slog.Int("served", active),
		slog.Int("held_at_ceiling", atCeiling),
		slog.Int("held_budget", budget),
		slog.Int("held_paused", paused),
		slog.Int("held_invalid_route", invalid),
		slog.Int("held_rate", rate),
		slog.Int("held_adaptive", adaptive),
	)
}

// roundPos is a position in a round of the rotation: the fraction num/den
// of the way through it, 0 ≤ num < den ≤ maxWeight (den 0 also means 0). A
// namespace of weight w has its turns at the positions k/w; the cursor
// records the position of the turn that got the last remainder unit, which
// is 0 while every weight is 1.
type roundPos struct{ num, den int }

// rotation is where the remainder units stand between plans: the planner's
// only state. A plan reads it and returns the moves that advance it; the
// caller installs them (advance) once the plan's claim succeeds.
type rotation struct {
	nsCursor    string            // last namespace that got a remainder unit
	nsCursorSet bool              // whether nsCursor is meaningful
	nsCursorAt  roundPos          // where in the round nsCursor got it
	routeCursor map[string]string // namespace → last task queue that got a remainder unit
}

// moves is what one plan moves the rotation by: the namespace cursor, if
// ns, to nsCursor at nsAt, and the route cursors of routes. routes is the
// planner's scratch, valid until the next plan.
type moves struct {
	ns       bool
	nsCursor string
	nsAt     roundPos
	routes   []routeCursorUpdate
}

// routeCursorUpdate is a route cursor to install when the plan commits.
type routeCursorUpdate struct{ namespace, taskQueue string }

// nsWork is a namespace's report while planning, with its routes'
// range [lo, hi) in scratch.routes, and whether its Pending saturated.
// Until the reports are finished, Pending counts the valid routes' rows
// only, and Invalid the others'.
type nsWork struct {
	NamespaceReport
	lo, hi      int
	tokens      int  // Tokens, or Unlimited without a rate
	pendingOver bool // Σ P_r passed math.MaxInt; Pending holds math.MaxInt
	validName   bool // the namespace passes Route.Validate
}

// scratch holds the buffers the planner reuses from plan to plan.
type scratch struct {
	routes     []RouteCount
	ns         []nsWork
	active     []int // indices into ns of namespaces with demand
	caps       []int
	grants     []int
	weights    []int // parallel to active, for a weighted fill
	turns      []int // scratch of fillWeighted, parallel to active
	cands      []int // scratch of fillWeighted
	limits     []int // per route, parallel to routes
	routeMoves []routeCursorUpdate
}

// cmpRoute orders route counts by route (see [outbox.Route.Compare]).
func cmpRoute(a, b RouteCount) int { return a.Route.Compare(b.Route) }

// prepare is the planner's first step: it validates s and groups its
// routes and claimed counts by namespace into sc.ns, and returns the
// plan's budget and s's routes, ordered. Without rates every namespace's
// tokens are Unlimited; with them the caller fills them in (tokensAt)
// before decide.
func (sc *scratch) prepare(s Snapshot, st settings) (int, []RouteCount, error) {
	budget := st.cfg.batchSize
	if s.Budget < 0 {
		return 0, nil, &SnapshotError{Count: s.Budget, Reason: "negative budget"}
	} else if s.Budget > 0 {
		budget = min(budget, s.Budget)
	}
	routes, err := sc.group(s.Pending)
	if err != nil {
		return 0, nil, err
	}
	if err := sc.placeClaimed(s.Claimed); err != nil {
		return 0, nil, err
	}
	if !st.cfg.hasRates() {
		for i := range sc.ns {
			sc.ns[i].tokens = Unlimited
		}
	}
	return budget, routes, nil
}

// group validates and groups pending by namespace into sc.ns in one pass
// over the caller's slice, which is used in place (never written) when it
// is already ordered, as stores return it. Otherwise it copies, orders and
// groups again. It returns the routes, ordered.
func (sc *scratch) group(pending []RouteCount) ([]RouteCount, error) {
	routes := pending
	ns, sorted, err := groupRoutes(sc.ns[:0], routes, true)
	if err != nil {
		return nil, err
	}
	if !sorted {
		routes = append(sc.routes[:0], pending...)
		slices.SortFunc(routes, cmpRoute)
		sc.routes = routes
		if ns, _, err = groupRoutes(ns[:0], routes, false); err != nil {
			return nil, err
		}
	}
	sc.ns = ns
	return routes, nil
}

// reasonNegativeClaimed is the Reason of a negative claimed count, the one
// SnapshotError about Snapshot.Claimed.
const reasonNegativeClaimed = "negative claimed count"

// placeClaimed validates claimed and sets the Claimed of each namespace of
// sc.ns, adding, in order, those with claimed rows and nothing pending.
func (sc *scratch) placeClaimed(claimed map[string]int) error {
	ns := sc.ns
	nPending := len(ns)
	found, negative := 0, false
	if len(claimed) > 0 {
		for i := range ns {
			if c, ok := claimed[ns[i].Namespace]; ok {
				ns[i].Claimed = c
				found++
				negative = negative || c < 0
			}
		}
	}
	extra := false
	if found < len(claimed) || negative { // else every count is checked and placed
		for name, c := range claimed {
			if c < 0 {
				return &SnapshotError{Namespace: name, Count: c, Reason: reasonNegativeClaimed}
			}
			if found == len(claimed) || c == 0 {
				continue
			}
			if _, ok := slices.BinarySearchFunc(ns[:nPending], name, func(w nsWork, name string) int {
				return strings.Compare(w.Namespace, name)
			}); !ok {
				ns = append(ns, nsWork{NamespaceReport: NamespaceReport{Namespace: name, Claimed: c}})
				extra = true
			}
		}
	}
	if extra {
		slices.SortFunc(ns, func(a, b nsWork) int { return strings.Compare(a.Namespace, b.Namespace) })
	}
	sc.ns = ns
	return nil
}

// decide is the planner's second step, a pure function of what prepare
// grouped (with tokens), st and the rotation r, which it only reads: the
// demands, the grants across namespaces, their split over routes, and the
// plan with the moves that advance r.
func (sc *scratch) decide(st settings, r *rotation, budget int, routes []RouteCount) (Plan, moves) {
	sc.routeMoves = sc.routeMoves[:0]
	total, over, maxWeight := sc.demand(st)
	m := sc.grant(r, budget, total, over, maxWeight)
	nClaims := sc.split(routes, r)
	m.routes = sc.routeMoves
	return sc.report(budget, routes, nClaims), m
}

// demand fills in each namespace's quota, ceiling, weight, headroom and
// demand, lists those with demand in sc.active, and returns Σ d_n (over:
// it passed math.MaxInt) and their largest weight.
func (sc *scratch) demand(st settings) (total int, over bool, maxWeight int) {
	cfg, ns := st.cfg, sc.ns
	active := sc.active[:0]
	maxWeight = 1
	for i := range ns {
		w := &ns[i]
		w.Quota = cfg.quota(w.Namespace)
		w.Ceiling = st.f.CeilingFor(w.Namespace, w.Quota, cfg.apportion)
		w.Weight = 1
		if cfg.weights != nil {
			w.Weight = cfg.weight(w.Namespace)
		}
		if c := w.effectiveCeiling(); c == Unlimited {
			w.Headroom = Unlimited
			w.Demand = w.Pending
		} else {
			w.Headroom = max(0, c-w.Claimed)
			w.Demand = min(w.Headroom, w.Pending)
		}
		if w.tokens != Unlimited {
			w.Demand = min(w.Demand, w.tokens)
		}
		if w.Hold > 0 {
			w.Demand = 0
		}
		if w.Demand > 0 {
			active = append(active, i)
			total, over = addOver(total, w.Demand, over)
			maxWeight = max(maxWeight, w.Weight)
		}
	}
	sc.active = active
	return total, over, maxWeight
}

// grant shares budget over the active namespaces' demands: each its whole
// demand when they fit, else max-min fairly (by weight) from the cursor of
// r. It returns the namespace cursor's move.
func (sc *scratch) grant(r *rotation, budget, total int, over bool, maxWeight int) moves {
	ns, active := sc.ns, sc.active
	if !over && total <= budget {
		for _, i := range active {
			ns[i].Granted = ns[i].Demand
		}
		return moves{}
	}
	caps := sc.caps[:0]
	for _, i := range active {
		caps = append(caps, ns[i].Demand)
	}
	start := 0
	if r.nsCursorSet {
		start, _ = slices.BinarySearchFunc(active, r.nsCursor, func(i int, name string) int {
			return strings.Compare(ns[i].Namespace, name)
		})
		if start < len(active) && ns[active[start]].Namespace == r.nsCursor {
			start++
		}
	}
	grants := growInts(sc.grants, len(caps))
	last, at := -1, roundPos{}
	if maxWeight == 1 {
		// Every turn is at position 0 of its round, so a cursor inside a
		// round (left by weights set before) is at the round's end: the
		// next round starts at the first namespace.
		if r.nsCursorAt.num != 0 {
			start = 0
		}
		last = fill(caps, grants, budget, start)
	} else {
		weights := sc.weights[:0]
		for _, i := range active {
			weights = append(weights, ns[i].Weight)
		}
		sc.weights = weights
		sc.turns = growInts(sc.turns, len(caps))
		last, at, sc.cands = fillWeighted(caps, weights, grants, sc.turns, budget, start, r.nsCursorAt, sc.cands[:0])
	}
	for k, i := range active {
		ns[i].Granted = grants[k]
	}
	sc.caps, sc.grants = caps, grants
	if last < 0 {
		return moves{}
	}
	return moves{ns: true, nsCursor: ns[active[last]].Namespace, nsAt: at}
}

// split splits each granted namespace's grant over its routes into
// sc.limits (recording route cursor moves), finishes every report's
// Pending, Held and Reason, and returns the number of claims.
func (sc *scratch) split(routes []RouteCount, r *rotation) int {
	limits := growInts(sc.limits, len(routes)) // written only in granted namespaces' ranges
	sc.limits = limits
	nClaims := 0
	for i := range sc.ns {
		w := &sc.ns[i]
		if w.Granted > 0 {
			nClaims += sc.splitRoutes(w, routes, limits, r)
		}
		w.Pending, _ = addOver(w.Pending, w.Invalid, w.pendingOver)
		w.Held = w.Pending - w.Granted
		w.Reason = w.holdReason()
	}
	return nClaims
}

// holdReason is why w's rows were held, once it is granted.
func (w *nsWork) holdReason() HoldReason {
	switch {
	case w.Held == 0:
		return HeldNone
	case w.Invalid > 0:
		return HeldInvalidRoute
	case w.Quota == 0:
		return HeldPaused
	case w.Hold > 0:
		return HeldAdaptive
	case w.Granted < w.Demand:
		return HeldBudget
	case w.tokens != Unlimited && w.tokens == w.Demand && (w.Headroom == Unlimited || w.tokens < w.Headroom):
		return HeldRate
	case w.adaptiveBinds():
		return HeldAdaptive
	}
	return HeldAtCeiling
}

// report builds the plan from the finished reports and route limits.
func (sc *scratch) report(budget int, routes []RouteCount, nClaims int) Plan {
	ns, limits := sc.ns, sc.limits
	p := Plan{
		Budget:     budget,
		Namespaces: make([]NamespaceReport, len(ns)),
	}
	for i := range ns {
		p.Namespaces[i] = ns[i].NamespaceReport
	}
	if nClaims > 0 {
		p.Claims = make([]ScopedClaim, 0, nClaims)
		for _, i := range sc.active {
			if w := &ns[i]; w.Granted > 0 {
				for j := w.lo; j < w.hi; j++ {
					if limits[j] > 0 {
						p.Claims = append(p.Claims, ScopedClaim{Route: routes[j].Route, Limit: limits[j]})
					}
				}
			}
		}
	}
	return p
}

// groupRoutes validates routes and appends one nsWork per namespace with
// pending rows to ns, in order. With checkOrder it stops early, reporting
// sorted = false, at the first route out of (namespace, task queue) order;
// without it the routes must be ordered. Routes with a count of 0 stay in
// their namespace's range but add nothing; so do routes Route.Validate
// rejects, whose rows go to Invalid. A malformed count or order is a store
// bug and fails the plan; an invalid route is a row written by other
// means, and fails nothing.
func groupRoutes(ns []nsWork, routes []RouteCount, checkOrder bool) (_ []nsWork, sorted bool, _ error) {
	for i := 0; i < len(routes); {
		name := routes[i].Route.Namespace
		if i > 0 && checkOrder && routes[i-1].Route.Namespace >= name {
			return ns, false, nil
		}
		valid := name != "" && limits.ValidName(name, maxNamespaceBytes)
		lo := i
		pending, invalid, over := 0, 0, false
		for ; i < len(routes) && routes[i].Route.Namespace == name; i++ {
			rc := &routes[i]
			if rc.Count < 0 {
				return ns, false, &SnapshotError{Namespace: name, TaskQueue: rc.Route.TaskQueue, Count: rc.Count, Reason: "negative pending count"}
			}
			var validTQ bool
			if i > lo {
				c := 0
				c, validTQ = nextTaskQueue(routes[i-1].Route.TaskQueue, rc.Route.TaskQueue)
				if c == 0 {
					return ns, false, &SnapshotError{Namespace: name, TaskQueue: rc.Route.TaskQueue, Count: rc.Count, Reason: "route listed twice"}
				} else if c > 0 && checkOrder {
					return ns, false, nil
				}
			} else {
				validTQ = limits.ValidName(rc.Route.TaskQueue, maxTaskQueueBytes)
			}
			if valid && validTQ {
				pending, over = addOver(pending, rc.Count, over)
			} else {
				invalid, _ = addOver(invalid, rc.Count, false)
			}
		}
		// A namespace whose routes all counted 0 has nothing pending.
		if pending > 0 || invalid > 0 {
			ns = append(ns, nsWork{
				NamespaceReport: NamespaceReport{Namespace: name, Pending: pending, Invalid: invalid},
				lo:              lo, hi: i, pendingOver: over, validName: valid,
			})
		}
	}
	return ns, true, nil
}

// nextTaskQueue returns compareNames(prev, tq) and limits.ValidName(tq,
// maxTaskQueueBytes), the two checks of every route but a namespace's
// first, reading tq's first eight bytes once for both.
func nextTaskQueue(prev, tq string) (int, bool) {
	if len(prev) < 8 || len(tq) < 8 || len(tq) > maxTaskQueueBytes {
		return compareNames(prev, tq), limits.ValidName(tq, maxTaskQueueBytes)
	}
	x, y := first8(prev), first8(tq)
	c := cmp.Compare(x, y)
	if c == 0 {
		c = strings.Compare(prev[8:], tq[8:])
	}
	// As in limits.ValidName: no byte ≥ 0x80 and none zero. Then tq is valid if
	// the rest is.
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	if (y|(y-lo)&^y)&hi != 0 {
		return c, limits.ValidName(tq, maxTaskQueueBytes)
	}
	return c, len(tq) == 8 || limits.ValidName(tq[8:], maxTaskQueueBytes)
}

// compareNames is strings.Compare, with a fast path for names of eight
// bytes or more whose first eight bytes differ, as the task queues of a
// namespace, listed one after the other in every sweep, often do.
func compareNames(a, b string) int {
	if len(a) >= 8 && len(b) >= 8 {
		if x, y := first8(a), first8(b); x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a, b)
}

// first8 returns the first eight bytes of s, big-endian, so that the
// numbers order as the bytes do.
func first8(s string) uint64 {
	_ = s[7]
	return uint64(s[0])<<56 | uint64(s[1])<<48 | uint64(s[2])<<40 | uint64(s[3])<<32 |
		uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7])
}

// splitRoutes splits w.Granted over w's routes into limits, from the route
// cursor of r, and returns the number of routes that got a limit.
func (sc *scratch) splitRoutes(w *nsWork, routes []RouteCount, limits []int, r *rotation) int {
	rs := routes[w.lo:w.hi]
	ls := limits[w.lo:w.hi]
	if w.Granted == w.Pending && !w.pendingOver && w.Invalid == 0 {
		n := 0
		for j := range rs {
			ls[j] = rs[j].Count
			if ls[j] > 0 {
				n++
			}
		}
		return n
	}
	caps := sc.caps[:0]
	for _, r := range rs {
		if w.Invalid > 0 && !validRoute(r.Route) {
			caps = append(caps, 0) // never granted, as if absent
		} else {
			caps = append(caps, r.Count)
		}
	}
	sc.caps = caps
	start := 0
	if cur, ok := r.routeCursor[w.Namespace]; ok {
		start, _ = slices.BinarySearchFunc(rs, cur, func(r RouteCount, tq string) int {
			return strings.Compare(r.Route.TaskQueue, tq)
		})
		if start < len(rs) && rs[start].Route.TaskQueue == cur {
			start++
		}
	}
	if last := fill(caps, ls, w.Granted, start); last >= 0 {
		sc.routeMoves = append(sc.routeMoves, routeCursorUpdate{w.Namespace, rs[last].Route.TaskQueue})
	}
	n := 0
	for _, l := range ls {
		if l > 0 {
			n++
		}
	}
	return n
}

// advance installs a plan's moves m; live are the plan's reports, and
// windowed says its snapshot covered only a window of the namespaces.
func (r *rotation) advance(m moves, live []NamespaceReport, windowed bool) {
	if m.ns {
		r.nsCursor, r.nsCursorAt, r.nsCursorSet = m.nsCursor, m.nsAt, true
	}
	for _, u := range m.routes {
		r.routeCursor[u.namespace] = u.taskQueue
	}
	// Forget the cursors of namespaces that went away, so memory follows
	// the live namespaces rather than every namespace ever seen. Only a
	// full count says which went away: after a windowed one, the
	// namespaces beyond the window are still there, and their cursors are
	// still needed when the rotation reaches them.
	if !windowed && len(r.routeCursor) > 2*len(live)+64 {
		keep := make(map[string]string, len(live))
		for _, w := range live {
			if tq, ok := r.routeCursor[w.Namespace]; ok {
				keep[w.Namespace] = tq
			}
		}
		r.routeCursor = keep
	}
}

// after returns where the next window starts once m is installed (no
// moves: where it starts now): the namespace cursor, or "" before the
// first remainder unit. A window is counted only when no namespace is
// weighted, and then a cursor left inside a round by weights set before
// (see roundPos) starts the next round at the first namespace.
func (r *rotation) after(m moves) string {
	cursor, at, set := r.nsCursor, r.nsCursorAt, r.nsCursorSet
	if m.ns {
		cursor, at, set = m.nsCursor, m.nsAt, true
	}
	if set && at.num == 0 {
		return cursor
	}
	return ""
}

// rotationUndo is the rotation as it was before a plan's moves.
type rotationUndo struct {
	nsCursor    string
	nsCursorSet bool
	nsCursorAt  roundPos
	routes      []routeUndo
}

type routeUndo struct {
	namespace, taskQueue string
	present              bool
}

// undoOf returns what undoes m once installed on r as it is now.
func (r *rotation) undoOf(m moves) rotationUndo {
	u := rotationUndo{nsCursor: r.nsCursor, nsCursorSet: r.nsCursorSet, nsCursorAt: r.nsCursorAt}
	for _, mv := range m.routes {
		tq, ok := r.routeCursor[mv.namespace]
		u.routes = append(u.routes, routeUndo{mv.namespace, tq, ok})
	}
	return u
}

// undo restores the rotation u saved. No moves have been installed since.
func (r *rotation) undo(u rotationUndo) {
	r.nsCursor, r.nsCursorSet, r.nsCursorAt = u.nsCursor, u.nsCursorSet, u.nsCursorAt
	for _, ru := range slices.Backward(u.routes) {
		if ru.present {
			r.routeCursor[ru.namespace] = ru.taskQueue
		} else {
			delete(r.routeCursor, ru.namespace)
		}
	}
}

// fill shares budget over caps max-min fairly into grants, where
// Σ caps > budget ≥ 0. With L the largest level such that
// Σ min(caps[i], L) ≤ budget, each grants[i] = min(caps[i], L), and the
// R = budget − Σ min(caps[i], L) remaining units go one each to the first R
// indices with caps[i] > L, scanning cyclically from start. It returns the
// index of the last index given a remainder unit, or -1 when R = 0.
// Cost: O(len(caps) · log budget).
func fill(caps, grants []int, budget, start int) int {
	fits := func(l int) bool { // Σ min(c, l) ≤ budget, without overflow
		s := 0
		for _, c := range caps {
			m := min(c, l)
			if m > budget-s {
				return false
			}
			s += m
		}
		return true
	}
	// Invariant: fits(lo) && !fits(hi), or lo == hi == budget.
	lo, hi := 0, budget
	if fits(hi) {
		lo = hi
	} else {
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	rem := budget
	for i, c := range caps {
		grants[i] = min(c, lo)
		rem -= grants[i]
	}
	last := -1
	n := len(caps)
	if start >= n {
		start = 0
	}
	for k := 0; rem > 0 && k < n; k++ {
		i := start + k
		if i >= n {
			i -= n
		}
		if caps[i] > lo {
			grants[i]++
			rem--
			last = i
		}
	}
	return last
}

// fillWeighted is fill with weights: it shares budget over caps into
// grants, where Σ caps > budget ≥ 0 and 1 ≤ weights[i] ≤ maxWeight, as
// the walk of Plan's rotation does. Index i (in namespace order; start is
// the first after the cursor's namespace, at the cursor's position at) has
// its turns at the positions j/weights[i] of an unending sequence of
// rounds, j = turns[i], turns[i] + 1, …, where turns[i] is its first turn
// after the cursor: the walk serves turns in (position, index) order, one
// unit each, skipping indices whose grant has reached their cap.
//
// Rather than walk unit by unit, it finds how far the walk gets:
//
//  1. whole rounds: each gives index i weights[i] turns, wherever it
//     starts, so with m the most rounds such that
//     Σ min(caps[i], m·weights[i]) ≤ budget, grants[i] = min(caps[i],
//     m·weights[i]), found by binary search;
//  2. within round m + 1, with R units left: with W the largest weight of
//     an index below its cap, the turns at positions up to at + x/W,
//     counted in closed form for an integer x, by binary search on x for
//     the last x whose turns number fewer than R;
//  3. the R′ units still left go to the turns between at + x/W and
//     at + (x+1)/W: at most one per index, as turns of index i are
//     1/weights[i] ≥ 1/W apart; sorted by position, then index.
//
// It returns the index given the last unit of step 3, and the position of
// its turn, or -1 when whole rounds used the budget (R = 0). cands is
// scratch, returned for reuse. Positions are compared exactly in int
// arithmetic: every product stays below 2^61 for weights ≤ maxWeight = 2^20.
// Cost: O(len(caps)·(log budget + log W)), plus O(k log k) to sort the k
// turns of step 3.
func fillWeighted(caps, weights, grants, turns []int, budget, start int, at roundPos, cands []int) (int, roundPos, []int) {
	wk := weightedWalk{caps: caps, weights: weights, grants: grants, turns: turns, p: at.num, q: max(at.den, 1)}
	wk.firstTurns(start)
	rem := wk.wholeRounds(budget)
	if rem == 0 {
		return -1, roundPos{}, cands
	}
	x := wk.withinRound(rem)
	return wk.lastTurns(x, rem, cands)
}

// weightedWalk is fillWeighted's state: its arguments, the cursor's
// position p/q, and W (wmax), the largest weight of an index below its cap
// after whole rounds.
type weightedWalk struct {
	caps, weights, grants, turns []int
	p, q, wmax                   int
}

// firstTurns sets each index's first turn at or after the cursor: a turn
// exactly at it comes after the cursor only for a namespace after the
// cursor's (index ≥ start).
func (wk *weightedWalk) firstTurns(start int) {
	p, q := wk.p, wk.q
	for i, w := range wk.weights {
		j := p * w / q
		if p*w%q != 0 || i < start {
			j++
		}
		wk.turns[i] = j
	}
}

// wholeRounds is step 1: it grants the most whole rounds that fit budget
// and returns the units left, R.
func (wk *weightedWalk) wholeRounds(budget int) int {
	caps, weights := wk.caps, wk.weights
	share := func(i, m int) int { // min(caps[i], m·weights[i]), without overflow
		if c, w := caps[i], weights[i]; m > (c-1)/w {
			return c
		}
		return m * weights[i]
	}
	fits := func(m int) bool { // Σ share(i, m) ≤ budget
		s := 0
		for i := range caps {
			g := share(i, m)
			if g > budget-s {
				return false
			}
			s += g
		}
		return true
	}
	lo, hi := 0, budget // fits(lo) && !fits(hi), or lo == hi == budget
	if fits(hi) {
		lo = hi
	} else {
		for hi-lo > 1 {
			if mid := lo + (hi-lo)/2; fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	rem := budget
	wk.wmax = 1
	for i := range caps {
		wk.grants[i] = share(i, lo)
		rem -= wk.grants[i]
		if wk.grants[i] < caps[i] {
			wk.wmax = max(wk.wmax, weights[i])
		}
	}
	return rem
}

// upTo counts the turns of index i in the next round at positions
// ≤ at + x/W, among its first min(caps[i] − grants[i], weights[i]).
func (wk *weightedWalk) upTo(i, x int) int {
	if x < 0 {
		return 0
	}
	w := wk.weights[i]
	k := (wk.p*wk.wmax+x*wk.q)*w/(wk.q*wk.wmax) - wk.turns[i] + 1
	return max(0, min(k, wk.caps[i]-wk.grants[i], w))
}

// withinRound is step 2: the last x whose turns up to at + x/W number
// fewer than rem (-1 if none).
func (wk *weightedWalk) withinRound(rem int) int {
	count := func(x int) int { // < rem when it returns early
		n := 0
		for i := range wk.caps {
			if n += wk.upTo(i, x); n >= rem {
				break
			}
		}
		return n
	}
	// count(lo) < rem ≤ count(hi); count(wmax) = Σ min(caps[i] − grants[i],
	// weights[i]) > rem, or whole rounds would have fit one more.
	lo, hi := -1, wk.wmax
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; count(mid) < rem {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// lastTurns is step 3: it grants the turns up to at + x/W, then the rem
// still left to the turns in (at + x/W, at + (x+1)/W] in (position, index)
// order, and returns the index given the last unit and its turn's
// position.
func (wk *weightedWalk) lastTurns(x, rem int, cands []int) (int, roundPos, []int) {
	turns, weights := wk.turns, wk.weights
	for i := range wk.caps {
		a, b := wk.upTo(i, x), wk.upTo(i, x+1)
		wk.grants[i] += a
		rem -= a
		if b > a {
			turns[i] += a // the turn's number
			cands = append(cands, i)
		}
	}
	slices.SortFunc(cands, func(a, b int) int {
		if c := cmp.Compare(turns[a]*weights[b], turns[b]*weights[a]); c != 0 {
			return c
		}
		return a - b
	})
	for _, i := range cands[:rem] {
		wk.grants[i]++
	}
	last := cands[rem-1]
	return last, roundPos{turns[last] % weights[last], weights[last]}, cands
}

func growInts(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n, n+n/4)
	}
	return s[:n]
}

// addOver returns a + b for non-negative a and b, saturating at math.MaxInt,
// and whether the true sum passed math.MaxInt (or over already had).
func addOver(a, b int, over bool) (int, bool) {
	if over || a > math.MaxInt-b {
		return math.MaxInt, true
	}
	return a + b, false
}
