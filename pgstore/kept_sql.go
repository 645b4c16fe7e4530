package pgstore

// The statements that read kept counts (kept.go): the claimed counts and
// the pending counts, as sweepCounts reads them, with each route's next
// due time, of every namespace or of some. $1 the clock, $2 owned shards,
// $3 cap per route, $4 all shards owned, and for keptNamespacesSQL $5 the
// namespaces. Rows are (kind, namespace, task_queue, n, due): kind 0 a
// namespace's claimed rows, kind 1 a route with unsettled rows on the
// walk that has claimable rows (n ≥ 1) or a row that becomes claimable
// later (due: the earliest such claimable_at after now on an owned shard,
// a delayed row's run-at or a lease's end, as NextDue finds it), and one
// row of kind 2: the statement's snapshot (pg_current_snapshot(), in the
// namespace column), which tells the notices the read saw from the others
// (keptcount.Notified).

// namespaceRoutes is the routes walk of pendingCounts restricted to the
// namespaces $5: one routeStep per namespace for its first route, then
// one per route for the next route of the same namespace.
var namespaceRoutes = `
WITH RECURSIVE routes (namespace, task_queue, claimable_at, shard) AS (
	SELECT nx.namespace, nx.task_queue, nx.claimable_at, nx.shard
	FROM unnest($5::text[]) AS q (namespace)
	CROSS JOIN LATERAL ` + routeStep("", `
			AND o.namespace = q.namespace`) + ` nx
	UNION ALL
	SELECT nx.namespace, nx.task_queue, nx.claimable_at, nx.shard
	FROM routes r
	CROSS JOIN LATERAL ` + routeStep("", `
			AND o.namespace = r.namespace
			AND o.task_queue > r.task_queue`) + ` nx
)`

// keptCounts is a kept-counts statement over the routes CTE with.
func keptCounts(with string) string {
	return with + `
SELECT 0 AS kind, cl.namespace, ''::text COLLATE "C" AS task_queue, cl.count AS n, NULL::timestamptz AS due
FROM (` + claimedCounts("$4::bool") + `
) cl
UNION ALL
SELECT 1, nx.namespace, nx.task_queue, c.n, d.at
FROM routes nx` + routeCount("$4::bool") + `
LEFT JOIN LATERAL ` + routeDue("$4::bool") + ` d ON true
WHERE c.n > 0 OR d.at IS NOT NULL
UNION ALL
SELECT 2, pg_current_snapshot()::text COLLATE "C", '', 0, NULL
ORDER BY 1, 2, 3`
}

var (
	keptAllSQL        = keptCounts(pendingCounts.with)
	keptNamespacesSQL = keptCounts(namespaceRoutes)
)
