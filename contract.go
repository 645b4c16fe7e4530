package backpressure

import "errors"

// The checks of what a store answers against its contract (see
// [StoreError]): a violation is a *StoreError naming the call, wrapping a
// *SnapshotError that says what broke. The window claim's answer is
// checked where it is planned (planClaimedWindow).

// broken turns a *SnapshotError the planner found in c's counts into the
// store's contract violation: a *StoreError naming the call that returned
// the counts, wrapping it. Other errors pass unchanged.
func (c *counts) broken(err error) error {
	var se *SnapshotError
	if !errors.As(err, &se) {
		return err
	}
	op := "CountOutboxRows"
	if claimed := se.Reason == reasonNegativeClaimed; claimed && !c.claimedToo {
		op = "CountClaimedOutboxRows"
	} else if !claimed && c.p.Namespaces == 0 && !c.p.Claimed {
		op = "CountPendingOutboxRows"
	}
	return &StoreError{Op: op, Err: err}
}

// checkClaimed checks what ClaimOutboxRowsScoped returned for claims
// against its contract: no more rows than the claims' limits add up to,
// and, for rows that say their route (as outbox.Row does), grouped by
// claim in the claims' order, at most Limit of each claim's route and none
// of a route not asked for. A violation is a *SnapshotError (see
// [ErrStore]); the rows stay claimed until their leases expire.
func checkClaimed[R any](claims []ScopedClaim, rows []R) error {
	if len(rows) > sumLimits(claims) {
		return &SnapshotError{Count: len(rows), Reason: "claim: more rows than the claims' limits"}
	}
	j, n := 0, 0
	for i := range rows {
		r, ok := any(rows[i]).(routed)
		if !ok {
			return nil
		}
		route := r.Route()
		for j < len(claims) && claims[j].Route != route {
			j, n = j+1, 0
		}
		if j == len(claims) {
			return &SnapshotError{Namespace: route.Namespace, TaskQueue: route.TaskQueue, Count: 1,
				Reason: "claim: a row of a route not asked for, or out of the claims' order"}
		}
		if n++; n > claims[j].Limit {
			return &SnapshotError{Namespace: route.Namespace, TaskQueue: route.TaskQueue, Count: n, Reason: "claim: more rows than the route's limit"}
		}
	}
	return nil
}
