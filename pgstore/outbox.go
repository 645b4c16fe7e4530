package pgstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// CountClaimedOutboxRows returns, per namespace, the rows on the owned
// shards whose lease is live now. It reads only the live-lease index, so its
// cost is O(claimed rows), however large the backlog. See
// [backpressure.OutboxStore].
func (c *claimer) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	s := (*Store)(c)
	const op = "CountClaimedOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	read := func() (map[string]int, error) { return s.countClaimed(ctx, owned, all) }
	var claimed map[string]int
	if s.kept != nil {
		claimed, err = s.countClaimedKept(shards, read)
	} else {
		claimed, err = read()
	}
	if err != nil {
		return nil, opError(op, err)
	}
	return claimed, nil
}

// countClaimed reads the claimed counts on the owned shards.
func (s *Store) countClaimed(ctx context.Context, owned []int32, all bool) (map[string]int, error) {
	var claimed map[string]int
	if err := s.run(ctx, anyLoss, func() error {
		claimed = make(map[string]int)
		rows, err := s.pool.Query(ctx, s.sql.countClaimed, s.clock(), owned, all)
		if err != nil {
			return err
		}
		var (
			namespace string
			n         int64
		)
		_, err = pgx.ForEachRow(rows, []any{&namespace, &n}, func() error {
			claimed[namespace] = int(n)
			return nil
		})
		return err
	}); err != nil {
		return nil, err
	}
	return claimed, nil
}

// CountPendingOutboxRows returns the claimable rows (visible pending rows and
// rows whose lease expired) per route on the owned shards, each count capped
// at capPerRoute, in (namespace, task queue) order. Routes with none are
// left out. Cost: one index descent per route with unsettled rows, which
// finds the route and its earliest claimable time; a route whose rows are
// all delayed or leased costs no more. Per route with a claimable row, an
// index range over its claimable rows only — claimable_at ≤ now is a bound
// of the range, so rows in retry back-off and rows under a live lease are
// never read — that stops at the capPerRoute-th claimable row on the owned
// shards; the claimable rows on other shards met before then are read and
// skipped. Never the whole backlog. See [backpressure.OutboxStore].
func (c *claimer) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	s := (*Store)(c)
	const op = "CountPendingOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := call(op).Positive("capPerRoute", capPerRoute); err != nil {
		return nil, err
	}
	if s.kept != nil {
		_, pending, _, err := s.countKept(ctx, op, shards, backpressure.CountParams{CapPerRoute: capPerRoute})
		return pending, err
	}
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	counts, err := collectNoJIT(ctx, s, anyLoss, s.sql.countPending, []any{s.clock(), owned, int64(capPerRoute), all}, scanRouteCount)
	if err != nil {
		return nil, opError(op, err)
	}
	return counts, nil
}

// CountOutboxRows returns, in one statement (one round trip, one
// snapshot), the pending counts p describes and, when p.Claimed, what
// CountClaimedOutboxRows returns (see [backpressure.Counter]; it
// serves every CountParams). [backpressure.Sweep] uses it to count only the
// namespaces it can serve, and to make a sweep's counts one round trip
// rather than two.
//
// With p.Namespaces 0 the pending counts are what
// CountPendingOutboxRows returns for p.CapPerRoute, at its cost, and
// p.After is ignored. With p.Namespaces ≥ 1 they are those of a window:
// walking the namespaces in ascending byte order from the first one above
// p.After, wrapping around to the smallest, the first p.Namespaces of them
// with at least one claimable row on the owned shards, each with all its
// routes that have claimable rows, each count capped at p.CapPerRoute, in
// (namespace, task queue) order. Namespaces are compared in byte order, as
// the contract asks, whatever the database's collation: the namespace and
// task_queue columns are COLLATE "C" (schema version 3).
//
// A p.CapPerRoute below 1 or a negative p.Namespaces is an
// [*outbox.ArgumentError]; for a window, p.After must be valid UTF-8
// without NUL bytes (it may be empty).
//
// A window's cost: one index descent per route of the namespaces walked,
// plus, per route with a claimable row, the capped range of
// CountPendingOutboxRows — skipped when p.CapPerRoute is 1, as a
// sweep's window asks, and the route's earliest claimable row, which the
// descent found, is on an owned shard (always, on a node that owns every
// shard). The walk stops at the p.Namespaces-th namespace with claimable
// rows, so it reads the window's namespaces and those between them with
// none claimable, never the routes of the namespaces beyond the window.
// The claimed counts add the cost of CountClaimedOutboxRows.
func (c *claimer) CountOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, p backpressure.CountParams) (claimed map[string]int, pending []backpressure.RouteCount, err error) {
	s := (*Store)(c)
	const op = "CountOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, nil, err
	}
	args, err := s.countArgs(op, shards, p)
	if err != nil {
		return nil, nil, err
	}
	if s.kept != nil {
		if claimed, pending, ok, err := s.countKept(ctx, op, shards, p); ok || err != nil {
			return claimed, pending, err
		}
	}
	if !p.Claimed {
		sql := s.sql.countPending
		if p.Namespaces > 0 {
			sql = s.sql.countPendingWindow
		}
		pending, err := collectNoJIT(ctx, s, anyLoss, sql, args, scanRouteCount)
		if err != nil {
			return nil, nil, opError(op, err)
		}
		return nil, pending, nil
	}
	sql := s.sql.sweepCount
	if p.Namespaces > 0 {
		sql = s.sql.sweepCountWindow
	}
	var (
		kind int32
		rc   backpressure.RouteCount
		n    int64
	)
	if err := s.queryNoJIT(ctx, anyLoss, sql, args, func(rows pgx.Rows) error {
		claimed, pending = make(map[string]int), nil
		_, err := pgx.ForEachRow(rows, []any{&kind, &rc.Route.Namespace, &rc.Route.TaskQueue, &n}, func() error {
			if kind == 0 {
				claimed[rc.Route.Namespace] = int(n)
			} else {
				rc.Count = int(n)
				pending = append(pending, rc)
			}
			return nil
		})
		return err
	}); err != nil {
		return nil, nil, opError(op, err)
	}
	return claimed, pending, nil
}

// countArgs validates p for op and returns the parameters of the count
// statements that take CountParams: $1 the clock, $2 the owned shards, $3
// the cap, then, for a window (p.Namespaces > 0), $4 After and $5
// Namespaces, and last the flag that every shard is owned.
func (s *Store) countArgs(op string, shards backpressure.OwnedShardFraction, p backpressure.CountParams) ([]any, error) {
	if err := call(op).CountParams(p); err != nil {
		return nil, err
	}
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	args := []any{s.clock(), owned, int64(p.CapPerRoute)}
	if p.Namespaces > 0 {
		args = append(args, p.After, int64(p.Namespaces))
	}
	return append(args, all), nil
}

// scanRouteCount scans a (namespace, task queue, count) row.
func scanRouteCount(row pgx.CollectableRow) (backpressure.RouteCount, error) {
	var (
		rc backpressure.RouteCount
		n  int64
	)
	err := row.Scan(&rc.Route.Namespace, &rc.Route.TaskQueue, &n)
	rc.Count = int(n)
	return rc, err
}

// ClaimOutboxRowsScoped claims, in one statement across all scopes, at most
// each claim's Limit claimable rows of its route on the owned shards,
// highest Message.Priority first, then oldest, skipping rows another claimer holds locked (FOR UPDATE SKIP
// LOCKED). Each claimed row gets a fresh token, one more attempt and a lease
// of Options.Lease. The statement is atomic: on error nothing is claimed.
// Rows come back grouped by claim, in the claims' order, highest priority
// first, then oldest, within a route.
//
// A Limit below 1, a route backpressure.Route.Validate refuses, or a route
// named twice is an [*outbox.ArgumentError] (checked by internal/validate,
// before any round trip), and claims nothing. An empty claim list, or no
// shard owned, returns an empty slice without a round trip.
//
// Cost: per scope, one walk of its route's unsettled rows in enqueue order
// from the oldest until Limit claimable rows on the owned shards are found.
// Oldest first means the walk reads, and skips, every older row of the
// route that is not claimable now — rows in retry back-off, rows under a
// live lease, rows on other nodes' shards — so a route whose oldest rows
// are a large delayed backlog costs that backlog on every claim of it,
// though the pending count of the route does not read it.
//
// If ctx is cancelled while the statement runs, the claim is either rolled
// back or, if the server committed it before the cancellation arrived,
// kept: the call may then return ctx's error although rows were claimed.
// Such rows are not lost: no one can settle them without their tokens, and
// they are claimable again when their lease expires.
func (c *claimer) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	s := (*Store)(c)
	const op = "ClaimOutboxRowsScoped"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	owned, all, none, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	if err := call(op).Claims(claims); err != nil {
		return nil, err
	}
	var (
		spaces = make([]string, len(claims))
		queues = make([]string, len(claims))
		limits = make([]int64, len(claims))
		order  = make(map[backpressure.Route]int, len(claims))
	)
	for i, c := range claims {
		spaces[i], queues[i], limits[i] = c.Route.Namespace, c.Route.TaskQueue, int64(c.Limit)
		order[c.Route] = i
	}
	if len(claims) == 0 || none {
		return []outbox.Row{}, nil
	}
	claimed, err := s.claim(ctx, op, s.sql.claimScoped, owned, spaces, queues, limits, all)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(claimed, func(a, b outbox.Row) int {
		ra := order[backpressure.Route{Namespace: a.Namespace, TaskQueue: a.TaskQueue}]
		rb := order[backpressure.Route{Namespace: b.Namespace, TaskQueue: b.TaskQueue}]
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(b.Priority, a.Priority), a.EnqueuedAt.Compare(b.EnqueuedAt), cmp.Compare(a.ID, b.ID))
	})
	return claimed, nil
}

// ClaimOutboxRowsUnscoped claims at most limit claimable rows on the owned
// shards, oldest first whatever their namespace: the claim a dispatcher
// without backpressure makes, kept as the baseline the fair sweep is
// measured against. Leases, tokens and atomicity are as for
// ClaimOutboxRowsScoped, and so is a cancelled ctx. Rows come back
// oldest first. Cost: one walk of the unsettled rows in enqueue order until
// limit claimable owned rows are found, reading and skipping the older rows
// that are delayed, leased or on other shards.
func (c *claimer) ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error) {
	s := (*Store)(c)
	const op = "ClaimOutboxRowsUnscoped"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := call(op).Positive("limit", limit); err != nil {
		return nil, err
	}
	owned, all, none, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	if none {
		return []outbox.Row{}, nil
	}
	claimed, err := s.claim(ctx, op, s.sql.claimUnscoped, owned, int64(limit), all)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(claimed, func(a, b outbox.Row) int { return cmp.Or(a.EnqueuedAt.Compare(b.EnqueuedAt), cmp.Compare(a.ID, b.ID)) })
	return claimed, nil
}

// claim runs one of the claim statements, whose parameters are the clock,
// the lease, the owned shards and then args.
// A Membership's store claims with the fenced form of the statement, only
// on the shards it holds (see [Membership.fence]); if it holds none of
// them, it claims nothing without a round trip.
func (s *Store) claim(ctx context.Context, op, sql string, owned []int32, args ...any) ([]outbox.Row, error) {
	params := append([]any{s.clock(), s.lease.Microseconds(), owned}, args...)
	if s.fence != nil {
		var ok bool
		if sql, params, ok = s.fence.fence(&s.sql, sql, params); !ok {
			return nil, nil
		}
	}
	var claimed []outbox.Row
	var err error
	if seen := s.seenClaim(sql); seen != "" {
		claimed, err = s.claimKeptSeen(func(snap *string) ([]outbox.Row, error) {
			return collectClaim(ctx, s, seen, params,
				func(row pgx.CollectableRow) (outbox.Row, error) { return scanRow(row, snap) })
		})
	} else {
		claimed, err = s.kept.Claim(func() ([]outbox.Row, error) {
			return collectClaim(ctx, s, sql, params,
				func(row pgx.CollectableRow) (outbox.Row, error) { return scanRow(row) })
		})
	}
	if err != nil {
		return nil, opError(op, err)
	}
	return claimed, nil
}
