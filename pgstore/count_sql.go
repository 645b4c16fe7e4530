package pgstore

// routeStep is one step of the pending counts' walk over the routes, a
// loose index scan of outbox_route_claimable_idx, keyed (namespace,
// task_queue, claimable_at) INCLUDE (shard): the first entry, in the
// index's order, after the routes cond excludes. One index descent finds
// the next route with unsettled rows, its earliest claimable_at, which says
// whether it has a claimable row at all, and that row's shard. The walks
// mark the rows they return with wrapped when it is not "".
func routeStep(wrapped, cond string) string {
	if wrapped != "" {
		wrapped = ", " + wrapped + " AS wrapped"
	}
	return `
		(SELECT o.namespace, o.task_queue, o.claimable_at, o.shard` + wrapped + `
		FROM {schema}.outbox o
		WHERE o.state IN ('pending', 'claimed')` + cond + `
		ORDER BY o.namespace, o.task_queue, o.claimable_at
		LIMIT 1)`
}

// routeCount is the per-route count both pending counts share, as c.n, for
// the route nx a routeStep found: its claimable rows on the owned shards
// ($2, or every shard when the boolean parameter all is true), stopped at
// the cap ($3). It is 0, with no further read, when the route's earliest
// claimable_at is after now (or NULL); 1, with no further read, when the cap
// is 1 and that earliest row is on an owned shard (the route has a claimable
// row the node may claim, and the cap stops the count there), as it always
// is on a node that owns every shard, where a sweep's window then costs one
// index descent per route; else count(*) over a subquery LIMITed to the cap,
// evaluated only in this branch of the CASE, which walks
// outbox_route_claimable_idx (index-only where the visibility map allows)
// over the range claimable_at <= now: rows in retry back-off and under a
// live lease are outside the range and never read, and the scan stops at the
// cap-th owned row. The predicate state IN ('pending', 'claimed') is that
// index's; the ORDER BY costs nothing (it is the index's order) and rules
// out a bitmap scan, which would collect every entry of the range before the
// LIMIT could stop it.
//
// The cap is LIMIT (SELECT $3), not LIMIT $3, and the shortcut's test of the
// cap a subquery too, so that the planner cannot see their values in a
// custom plan either. With a bare $3 every custom plan (estimated with the
// real cap, or with the CASE folded) looked cheaper than the generic plan,
// so pgx's prepared statement was planned again on every call: about 0.4 ms,
// half the statement's cost at 20 routes. Now both plans carry the same
// estimate and PostgreSQL settles on the generic plan after its five custom
// ones. The unscoped claim's LIMIT is written the same way, for the same
// reason.
func routeCount(all string) string {
	return `
	CROSS JOIN LATERAL (
		SELECT CASE
			WHEN nx.claimable_at IS NULL OR nx.claimable_at > coalesce($1::timestamptz, now()) THEN 0
			WHEN (SELECT $3::int8 = 1) -- not folded: see routeCount
				AND (` + all + ` OR nx.shard = ANY ($2::int4[])) THEN 1
			ELSE (
				SELECT count(*)
				FROM (
					SELECT 1
					FROM {schema}.outbox o
					WHERE o.namespace = nx.namespace
						AND o.task_queue = nx.task_queue
						AND o.state IN ('pending', 'claimed')
						AND o.claimable_at <= coalesce($1::timestamptz, now())
						AND (` + all + ` OR o.shard = ANY ($2::int4[]))
					ORDER BY o.claimable_at -- the index's order: a scan that can stop at the cap
					LIMIT (SELECT $3::int8) -- not a constant to the planner: see routeCount
				) capped
			)
		END AS n
		OFFSET 0 -- evaluated once per route, not once per use of n
	) c`
}

// countQuery is a pending count in three parts: its WITH clause, its
// SELECT of (namespace, task_queue, n) without an ORDER BY, and the ORDER
// BY the count's contract asks for.
type countQuery struct{ with, sel, order string }

// pendingCounts is countPending. $2: owned shards, $3: cap per route, $4:
// all shards owned. routes walks every route with unsettled rows, one
// routeStep (one index descent) each, also a route whose rows are all
// delayed or leased, and routeCount counts each.
var pendingCounts = countQuery{
	with: `
WITH RECURSIVE routes (namespace, task_queue, claimable_at, shard) AS (` + routeStep("", "") + `
	UNION ALL
	SELECT nx.namespace, nx.task_queue, nx.claimable_at, nx.shard
	FROM routes r
	CROSS JOIN LATERAL ` + routeStep("", `
			AND (o.namespace, o.task_queue) > (r.namespace, r.task_queue)`) + ` nx
)`,
	sel: `
SELECT nx.namespace, nx.task_queue, c.n
FROM routes nx` + routeCount("$4::bool") + `
WHERE c.n > 0`,
	order: `
ORDER BY 1, 2`,
}

// firstWindowRoute and nextWindowRoute are the steps of a walk over the
// routes in a window's cyclic order after $4 (windowCounts' and the window
// claim's): the first route of a namespace above $4, else, wrapped, the
// first up to $4; then from the walk's row w, the next route in that order.
// Each is (A UNION ALL B …) LIMIT 1, aliased nx.
var (
	firstWindowRoute = `(` + routeStep("false", `
			AND o.namespace > $4::text`) + `
		UNION ALL` + routeStep("true", `
			AND o.namespace <= $4::text`) + `
		LIMIT 1
	) nx`
	nextWindowRoute = `(` + routeStep("false", `
			AND NOT w.wrapped
			AND (o.namespace, o.task_queue) > (w.namespace, w.task_queue)`) + `
		UNION ALL` + routeStep("true", `
			AND w.wrapped
			AND (o.namespace, o.task_queue) > (w.namespace, w.task_queue)
			AND o.namespace <= $4::text`) + `
		UNION ALL` + routeStep("true", `
			AND NOT w.wrapped
			AND o.namespace <= $4::text`) + `
		LIMIT 1
	) nx`
)

// windowCounts is countPendingWindow. $2: owned shards, $3: cap per route,
// $4: After, $5: the most namespaces, $6: all shards owned. walk visits the
// routes in the window's cyclic order — those of the namespaces above $4,
// then, wrapped, those up to $4 — one routeStep (one index descent) per
// route, and counts each with routeCount. It carries k, the namespaces with
// a claimable route so far, and has, whether the current namespace has
// one, and stops at the first route of a new namespace once k reaches $5:
// it reads the routes of the window's namespaces and of the namespaces
// between them with nothing claimable, and one index descent beyond. The
// final sort is over the window's routes only.
//
// Each step takes the first row of (A UNION ALL B UNION ALL C) LIMIT 1,
// relying on Append to run its branches in order and stop at the first
// row, as the loose index scan idiom does; a Parallel Append would not,
// and explain_test.go fails if one appears.
var windowCounts = countQuery{
	with: `
WITH RECURSIVE walk (namespace, task_queue, wrapped, n, k, has) AS (
	SELECT nx.namespace, nx.task_queue, nx.wrapped, c.n, (c.n > 0)::int::int8, c.n > 0
	FROM ` + firstWindowRoute + routeCount("$6::bool") + `
	UNION ALL
	SELECT nx.namespace, nx.task_queue, nx.wrapped, c.n,
		w.k + (c.n > 0 AND NOT (w.has AND nx.namespace = w.namespace))::int::int8,
		c.n > 0 OR (w.has AND nx.namespace = w.namespace)
	FROM walk w
	CROSS JOIN LATERAL ` + nextWindowRoute + routeCount("$6::bool") + `
	WHERE w.k < $5::int8 OR nx.namespace = w.namespace
)`,
	sel: `
SELECT walk.namespace, walk.task_queue, walk.n
FROM walk
WHERE walk.n > 0`,
	order: `
ORDER BY 1, 2`,
}

// claimedCounts is countClaimed, with all the parameter that says every
// shard is owned; $2: owned shards. Served by outbox_live_lease_idx (a
// range on lease_expires_at over claimed rows), so it reads live leases
// only.
func claimedCounts(all string) string {
	return `
SELECT o.namespace, count(*)
FROM {schema}.outbox o
WHERE o.state = 'claimed'
	AND o.lease_expires_at > coalesce($1::timestamptz, now())
	AND (` + all + ` OR o.shard = ANY ($2::int4[]))
GROUP BY o.namespace`
}

// sweepCounts is CountOutboxRows's statement with Claimed: the pending
// count q and the claimed counts, all the parameter of q that says every
// shard is owned, in one result of (kind, namespace, task_queue, n) rows: kind 0 for a
// namespace's claimed rows (with an empty task_queue), then kind 1 for the
// pending counts, in q's order. One statement, so one snapshot.
func sweepCounts(q countQuery, all string) string {
	return q.with + `
SELECT 0 AS kind, cl.namespace, ''::text COLLATE "C" AS task_queue, cl.count AS n
FROM (` + claimedCounts(all) + `
) cl
UNION ALL
SELECT 1, p.namespace, p.task_queue, p.n
FROM (` + q.sel + `
) p
ORDER BY 1, 2, 3`
}
