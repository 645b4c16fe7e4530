package backpressure

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// windowClaimer is the optional window claim a store may offer beside
// [OutboxStore] (documented there): found by type assertion, so that it
// adds no name to the package. After Sweep builds its arguments it claims
// one row of each of the first window.Namespaces namespaces with demand.
type windowClaimer[R any] interface {
	ClaimOutboxWindow(ctx context.Context, shards OwnedShardFraction, window CountParams, skip []string, routeAfter map[string]string) (rows []R, routes []RouteCount, err error)
}

// windowClaim is the window rule a sweep hands a store: where the walk
// starts and how many namespaces get a row (the window), the namespaces
// without headroom (skip), and the route cursors (routeAfter, b's own map,
// which the store only reads).
type windowClaim struct {
	window     CountParams
	skip       []string
	routeAfter map[string]string
}

// windowClaimer returns store's window claim if a sweep s may use it:
// no weights, no rates and no adaptive ceilings (the window claim's skip
// list then names every namespace without headroom), shards owned, and no claim of b in flight
// (the store cannot correct for grants it does not know).
func (s *sweeper[R]) windowClaimer() windowClaimer[R] {
	wc, ok := any(s.store).(windowClaimer[R])
	if !ok || s.st.cfg.weights != nil || s.st.cfg.hasRates() || s.e.b.adaptOn.Load() || len(s.inflight) > 0 || s.st.f.OwnedCount() == 0 {
		return nil
	}
	return wc
}

// newWindowClaim builds the window rule for claimed counts: after the
// cursor of r, budget namespaces, skipping those without headroom. It only
// reads r.
func newWindowClaim(r *rotation, claimed map[string]int, st settings, budget int) windowClaim {
	skip := slices.Clone(st.paused)
	for ns, c := range claimed {
		if atCeiling(st.cfg.ceiling(st.f, ns), c) {
			skip = append(skip, ns)
		}
	}
	slices.Sort(skip)
	return windowClaim{
		window:     CountParams{CapPerRoute: 1, After: r.after(moves{}), Namespaces: budget},
		skip:       slices.Compact(skip),
		routeAfter: r.routeCursor,
	}
}

// claimWindow plans and claims in one call of the store's window claim:
// the plan a counted window gives, when the store found more than the
// budget's namespaces with demand (ok), with its rows in s.won. It reports
// false, having claimed nothing, when the store found fewer or declined.
func (s *sweeper[R]) claimWindow(ctx context.Context, c *counts) (Plan, moves, bool, error) {
	w := newWindowClaim(&s.e.rot, c.claimed, s.st, s.budget)
	rows, grants, err := s.wc.ClaimOutboxWindow(ctx, s.st.f, w.window, w.skip, w.routeAfter)
	if errors.Is(err, ErrNotSupported) {
		s.wc = nil
		return Plan{}, moves{}, false, nil
	}
	if err != nil {
		return Plan{}, moves{}, false, &StoreError{Op: "ClaimOutboxWindow", Err: err}
	}
	if len(grants) == 0 && len(rows) == 0 {
		return Plan{}, moves{}, false, nil
	}
	plan, m, err := planClaimedWindow(&s.e.scratch, &s.e.rot, c, grants, len(rows), w, s.st, s.budget)
	if err != nil {
		return Plan{}, moves{}, false, err
	}
	s.won, s.byWindow = rows, true
	return plan, m, true, nil
}

// planClaimedWindow is the plan of a window the store claimed: one row to
// each namespace of grants (fewer than the window's when rows were locked
// or fenced), the rotation cursor on the last of them in the
// walk after w.After, and the route cursor of each that had other routes on
// its route. It is the plan a counted window gives, less the reports of the
// window's namespaces that got no row. Grants that break the contract
// (more than the window's namespaces, out of order, a namespace twice or
// skipped, an invalid route, a count other than 1 or 2, not one row each)
// break the store's contract (see [ErrStore]); the rows stay claimed until
// their leases expire.
func planClaimedWindow(sc *scratch, r *rotation, c *counts, grants []RouteCount, rows int, w windowClaim, st settings, budget int) (Plan, moves, error) {
	bad := func(g RouteCount, reason string) error {
		return &StoreError{Op: "ClaimOutboxWindow", Err: &SnapshotError{Namespace: g.Route.Namespace, TaskQueue: g.Route.TaskQueue, Count: g.Count, Reason: "window claim: " + reason}}
	}
	if len(grants) > w.window.Namespaces || rows != len(grants) {
		return Plan{}, moves{}, bad(RouteCount{Count: len(grants)}, "not one row for each namespace served")
	}
	pending := make([]RouteCount, len(grants))
	for i, g := range grants {
		switch {
		case i > 0 && grants[i-1].Route.Namespace >= g.Route.Namespace:
			return Plan{}, moves{}, bad(g, "grants out of order or a namespace twice")
		case !validRoute(g.Route):
			return Plan{}, moves{}, bad(g, "invalid route")
		case g.Count != 1 && g.Count != 2:
			return Plan{}, moves{}, bad(g, "a route count other than 1 or 2")
		}
		if _, skipped := slices.BinarySearch(w.skip, g.Route.Namespace); skipped {
			return Plan{}, moves{}, bad(g, "a skipped namespace")
		}
		pending[i] = RouteCount{Route: g.Route, Count: 1}
	}
	// Every namespace of pending has demand 1 and the budget covers them
	// all: the plan grants each its row and moves no cursor. The window
	// claim runs without rates, so the planner needs no tokens.
	budget, routes, err := sc.prepare(Snapshot{Claimed: c.claimed, Pending: pending, Budget: budget}, st)
	if err != nil {
		return Plan{}, moves{}, c.broken(err) // the claimed counts: the grants are checked
	}
	plan, m := sc.decide(st, r, budget, routes)
	if plan.Granted() != len(grants) {
		return Plan{}, moves{}, bad(RouteCount{Count: len(grants)}, "a namespace without headroom got a row")
	}
	// The moves a counted window makes: the rotation cursor to the last
	// namespace served in the walk (the largest at or before After, if any,
	// else the largest), and the route cursors of namespaces whose grant
	// was split over more than one claimable route.
	last := len(grants) - 1
	if i, found := slices.BinarySearchFunc(grants, w.window.After, func(g RouteCount, after string) int {
		return strings.Compare(g.Route.Namespace, after)
	}); found {
		last = i
	} else if i > 0 {
		last = i - 1
	}
	m.ns, m.nsCursor, m.nsAt = true, grants[last].Route.Namespace, roundPos{}
	for _, g := range grants {
		if g.Count > 1 {
			m.routes = append(m.routes, routeCursorUpdate{g.Route.Namespace, g.Route.TaskQueue})
		}
	}
	sc.routeMoves = m.routes
	plan.Windowed, plan.countCap = true, 1
	c.pending, c.p = pending, w.window
	return plan, m, nil
}
