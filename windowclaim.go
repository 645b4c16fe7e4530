package backpressure

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// WindowClaim is the window rule a sweep hands a [WindowClaimer] in place
// of a list of claims: one row each for the first Namespaces namespaces
// with demand in the cyclic order after After. The sweep builds it only
// when the rule gives exactly the plan counted rows would: no namespace is
// weighted, no rate is configured, nothing of the node is in flight, and
// the store finds more than Namespaces namespaces with demand (else it
// claims nothing, and the sweep counts).
//
// A namespace has demand for the store when it is not in Skip and has a
// claimable row (visible pending, or with an expired lease) on the owned
// shards on a route [Route.Validate] accepts.
type WindowClaim struct {
	// After is where the walk over namespaces starts: ascending byte order
	// from the first namespace greater than After, wrapping around to the
	// smallest, so After itself comes last ("" starts at the smallest), as
	// in [CountParams.After].
	After string

	// Namespaces is how many namespaces get one row: n ≥ 1, the sweep's
	// budget.
	Namespaces int

	// Skip lists, sorted and distinct, the namespaces with no headroom
	// (their claimed rows reach their ceiling, or their ceiling is 0): the
	// store passes over them.
	Skip []string

	// RouteAfter maps a namespace to its route cursor: the task queue of
	// the route it was last served from. Within a namespace the row comes
	// from the first route in the cyclic order of task queues after that
	// one (from the smallest when the namespace has no entry) with a
	// claimable row on a valid route, and within the route it is the row
	// ClaimOutboxRowsScoped with Limit 1 would take (highest priority
	// first, then oldest). The store reads it during the call only and
	// never changes it.
	RouteAfter map[string]string
}

// WindowGrant is one row a [WindowClaimer] claimed: its route, and whether
// the namespace had a claimable row on any other route too (valid or not),
// which is when the planner moves the namespace's route cursor.
type WindowGrant struct {
	Route       Route
	OtherRoutes bool
}

// WindowClaimer is an optional extension of [OutboxStore]: a store that
// resolves a [WindowClaim] in its claim statement, so that a sweep under
// the window rule needs the claimed counts and the claim, and no pending
// count. [Sweep] uses it where the rule applies; the storetest suite checks
// that the rows it claims are exactly those a counted sweep claims on the
// same state.
type WindowClaimer[R any] interface {
	// ClaimOutboxWindow walks the namespaces as w describes and, atomically,
	// claims one row of each of the first w.Namespaces with demand, if more
	// than w.Namespaces namespaces have demand; if not, it claims nothing
	// and returns empty, non-nil slices. The rows come with their new lease
	// and claim token, one per grant, rows[i] from grants[i].Route, both in
	// namespace order (not walk order). Rows it does not return are
	// unchanged. Exactly-once, leases and tokens are as for
	// ClaimOutboxRowsScoped. A w.Namespaces below 1, or a Skip not sorted
	// and distinct, is an error and claims nothing; no shard owned claims
	// nothing. A store that does not serve a call returns an error
	// matching [ErrNotSupported] at once, without I/O; [Sweep] then counts.
	ClaimOutboxWindow(ctx context.Context, shards OwnedShardFraction, w WindowClaim) (rows []R, grants []WindowGrant, err error)
}

// windowClaimer returns store's WindowClaimer if a sweep s may use it:
// no weights and no rates (the window claim's skip list then names every
// namespace without headroom), shards owned, and no claim of b in flight
// (the store cannot correct for grants it does not know).
func (s *sweeper[R]) windowClaimer() WindowClaimer[R] {
	wc, ok := any(s.store).(WindowClaimer[R])
	if !ok || s.st.cfg.weights != nil || s.st.cfg.hasRates() || len(s.inflight) > 0 || len(s.st.f.owned) == 0 {
		return nil
	}
	return wc
}

// windowClaim builds the window rule for claimed counts: after the
// rotation cursor, budget namespaces, skipping those without headroom.
// It only reads b.
func (b *Backpressure) windowClaim(claimed map[string]int, st settings, budget int) WindowClaim {
	skip := slices.Clone(st.paused)
	for ns, c := range claimed {
		if atCeiling(st.cfg.ceiling(st.f, ns), c) {
			skip = append(skip, ns)
		}
	}
	slices.Sort(skip)
	return WindowClaim{After: b.after(), Namespaces: budget, Skip: slices.Compact(skip), RouteAfter: b.routeCursor}
}

// claimWindow plans and claims in one call of the store's WindowClaimer:
// the plan a counted window gives, when the store found more than the
// budget's namespaces with demand (ok), with its rows in s.won. It reports
// false, having claimed nothing, when the store found fewer or declined.
func (s *sweeper[R]) claimWindow(ctx context.Context, c *counts) (Plan, bool, error) {
	w := s.b.windowClaim(c.claimed, s.st, s.budget)
	rows, grants, err := s.wc.ClaimOutboxWindow(ctx, s.st.f, w)
	if errors.Is(err, ErrNotSupported) {
		s.wc = nil
		return Plan{}, false, nil
	}
	if err != nil {
		return Plan{}, false, &StoreError{Op: "ClaimOutboxWindow", Err: err}
	}
	if len(grants) == 0 && len(rows) == 0 {
		return Plan{}, false, nil
	}
	plan, err := s.b.planClaimedWindow(c, grants, len(rows), w, s.st, s.budget)
	if err != nil {
		return Plan{}, false, err
	}
	s.won, s.byWindow = rows, true
	return plan, true, nil
}

// planClaimedWindow is the plan of a window the store claimed: one row to
// each namespace of grants, the rotation cursor on the last of them in the
// walk after w.After, and the route cursor of each that had other routes on
// its route. It is the plan a counted window gives, less the reports of the
// window's namespaces that got no row. Grants that break the contract
// (not w.Namespaces of them, out of order, a namespace twice or skipped, an
// invalid route, not one row each) are a *SnapshotError; the rows stay
// claimed until their leases expire.
func (b *Backpressure) planClaimedWindow(c *counts, grants []WindowGrant, rows int, w WindowClaim, st settings, budget int) (Plan, error) {
	bad := func(g WindowGrant, reason string) error {
		return &SnapshotError{Namespace: g.Route.Namespace, TaskQueue: g.Route.TaskQueue, Count: 1, Reason: "window claim: " + reason}
	}
	if len(grants) != w.Namespaces || rows != len(grants) {
		return Plan{}, &SnapshotError{Count: len(grants), Reason: "window claim: not one row for each of the window's namespaces"}
	}
	pending := make([]RouteCount, len(grants))
	for i, g := range grants {
		switch {
		case i > 0 && grants[i-1].Route.Namespace >= g.Route.Namespace:
			return Plan{}, bad(g, "grants out of order or a namespace twice")
		case g.Route.Validate() != nil:
			return Plan{}, bad(g, "invalid route")
		}
		if _, skipped := slices.BinarySearch(w.Skip, g.Route.Namespace); skipped {
			return Plan{}, bad(g, "a skipped namespace")
		}
		pending[i] = RouteCount{Route: g.Route, Count: 1}
	}
	// Every namespace of pending has demand 1 and the budget covers them
	// all: the plan grants each its row and moves no cursor.
	plan, err := b.plan(Snapshot{Claimed: c.claimed, Pending: pending, Budget: budget}, st)
	if err != nil {
		return Plan{}, err
	}
	if plan.Granted() != len(grants) {
		return Plan{}, &SnapshotError{Count: len(grants), Reason: "window claim: a namespace without headroom got a row"}
	}
	// The moves a counted window makes: the rotation cursor to the last
	// namespace served in the walk (the largest at or before After, if any,
	// else the largest), and the route cursors of namespaces whose grant
	// was split over more than one claimable route.
	sc := &b.scratch
	last := len(grants) - 1
	if i, _ := slices.BinarySearchFunc(grants, w.After, func(g WindowGrant, after string) int {
		return strings.Compare(g.Route.Namespace, after)
	}); i < len(grants) && grants[i].Route.Namespace == w.After {
		last = i
	} else if i > 0 {
		last = i - 1
	}
	sc.nsCursor, sc.nsCursorAt, sc.nsCursorMove = grants[last].Route.Namespace, roundPos{}, true
	for _, g := range grants {
		if g.OtherRoutes {
			sc.routeMoves = append(sc.routeMoves, routeCursorUpdate{g.Route.Namespace, g.Route.TaskQueue})
		}
	}
	plan.Windowed, plan.countCap = true, 1
	c.pending, c.p = pending, CountParams{CapPerRoute: 1, After: w.After, Namespaces: w.Namespaces}
	return plan, nil
}
