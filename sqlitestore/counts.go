package sqlitestore

import (
	"context"

	"github.com/outboxkit/backpressure"
)

// The Claimer's counts: each reads the database with the statements of
// claim.go and window.go, or, with kept counts on, goes through kept.go.

// CountClaimedOutboxRows returns, per namespace, the rows on the owned
// shards that hold a live lease now (pending, expired and settled rows are
// not counted; namespaces with none are left out). One read statement over
// the claimed-row index, outbox_leased, in namespace order: O(claimed rows),
// live leases and the expired ones not yet claimed again.
func (c *claimer) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	s := (*Store)(c)
	if err := s.ready(); err != nil {
		return nil, s.fail("CountClaimedOutboxRows", err)
	}
	if s.kept != nil {
		return s.claimedKept(ctx, nil, shards, nanos(s.now()))
	}
	return s.countClaimed(ctx, s.reader, nil, shards, nanos(s.now()))
}

// CountPendingOutboxRows returns, per route with claimable rows on the owned
// shards (visible pending rows and rows whose lease expired), the number of
// such rows capped at capPerRoute (≥ 1, else an *outbox.ArgumentError),
// sorted by namespace and task queue (the order the planner is fastest
// with). Scheduled rows (RunAt ahead), rows waiting out a retry delay, live
// leases, settled and dead rows are not claimable. Routes that
// backpressure.Route.Validate refuses (only a database written by an older
// version, or by hand, can hold such rows) are left out; Stats still counts
// their rows.
//
// One read statement. It walks outbox_routes (the routes with at least one
// pending or claimed row; a completion that settles or dead-letters a
// route's last one drops it) and, per route,
// that route's range of the route index in ID order, stopping at the
// capPerRoute-th claimable row. The entries it steps over on the way are
// counted in the cost, not the result: the scheduled rows (RunAt or a retry delay ahead, not yet
// visible), the rows under a live lease and, on a node owning part of the
// shards, the rows on shards it does not own. Its cost is therefore
// O(routes · log rows + Σ per route min(claimable, capPerRoute) + the
// delayed, leased and unowned rows before the cap is reached), bounded by
// the capped counts only when few rows are delayed, leased or elsewhere.
func (c *claimer) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	s := (*Store)(c)
	if err := s.ready(); err != nil {
		return nil, s.fail("CountPendingOutboxRows", err)
	}
	if s.kept != nil {
		return s.countPendingKept(ctx, shards, capPerRoute)
	}
	return s.countPending(ctx, "CountPendingOutboxRows", s.reader, nil, shards, capPerRoute, nanos(s.now()), nil)
}

// CountOutboxRows returns the pending counts p describes (see
// backpressure.Counter). With p.Namespaces 0 they are what
// CountPendingOutboxRows(ctx, shards, p.CapPerRoute) returns. With
// p.Namespaces ≥ 1 they are restricted to a window: in the cyclic namespace
// order that starts after p.After (ascending byte order, wrapping around
// so p.After itself comes last), the first p.Namespaces namespaces with at
// least one claimable row on the owned shards, or all of them when fewer
// have. Every route of those namespaces with claimable rows is returned,
// its count capped at p.CapPerRoute, sorted by namespace and task queue.
// Routes CountPendingOutboxRows leaves out (names ClaimOutboxRowsScoped
// would refuse) are left out here too, and do not make their namespace
// count towards the window.
//
// It does not serve p.Claimed: with it set, it returns
// backpressure.ErrNotSupported at once. Its calls are in-process, so one
// call would save nothing over two, and InSweepTx already runs a
// sweep's counts and claim in one transaction.
//
// It fails with an *outbox.ArgumentError when p.CapPerRoute is < 1 or
// p.Namespaces < 0, and with an *outbox.ShardCountError when shards does
// not split the store's shard count, before any query.
//
// One read transaction (one round trip). A window walks outbox_routes in
// (namespace, task queue) order from the first namespace after p.After,
// computing each route's capped count as CountPendingOutboxRows does, and
// stops at the route that completes the window: once p.Namespaces
// namespaces qualified, only the remaining routes of the last one are
// counted (by a second statement bounded to that namespace), so no route of
// a namespace beyond the window is probed. If the walk reaches the end of
// the namespaces before the window is full, it continues from the smallest
// namespace up to p.After. Its cost is that of CountPendingOutboxRows
// restricted to the routes of the namespaces it walks: those of the window
// and those of the namespaces without claimable rows it passes on the way.
func (c *claimer) CountOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	s := (*Store)(c)
	if p.Claimed {
		return nil, nil, backpressure.ErrNotSupported
	}
	if err := s.ready(); err != nil {
		return nil, nil, s.fail("CountOutboxRows", err)
	}
	if s.kept != nil {
		pending, err := s.countOutboxKept(ctx, shards, p)
		return nil, pending, err
	}
	pending, err := s.countOutboxRows(ctx, s.reader, nil, shards, p, nanos(s.now()), nil)
	return nil, pending, err
}
