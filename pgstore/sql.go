package pgstore

import "strings"

// statements holds the store's SQL with the quoted schema filled in. Every
// statement takes the clock as $1: coalesce($1, now()) is the injected time,
// or the database's when the store has no clock.
type statements struct {
	enqueue, countClaimed, countPending, countPendingWindow  string
	sweepCount, sweepCountWindow, claimScoped, claimUnscoped string
	complete, extend, get, stats, listDead, requeue          string
	purgeSettled, purgeDead                                  string
	capCount                                                 string // see pendingcap.go
	enqueueTx, identity                                      string // see outbox.go

	// The claims of a Membership's store (see fenced), and the
	// membership's own statements (see membership.go).
	claimScopedFenced, claimUnscopedFenced string
	claimWindow, claimWindowFenced         string // see window_claim.go
	membership                             membershipStatements
}

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

// The claim's update, shared by the scoped and the unscoped claim: the
// picked rows (already locked FOR UPDATE SKIP LOCKED) get a fresh token, one
// more attempt and a lease of $2 microseconds. The picked ids are gathered
// into an array and found through the primary key: a join with picked would
// let the planner, which cannot estimate a LIMIT taken from a parameter
// array, hash the whole table to update a hundred rows.
const claimUpdate = `
UPDATE {schema}.outbox o SET
	state            = 'claimed',
	attempts         = o.attempts + 1,
	token            = nextval('{schema}.claim_token_seq'),
	claimed_at       = coalesce($1::timestamptz, now()),
	lease_expires_at = coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond'
WHERE o.id = ANY (ARRAY(SELECT picked.id FROM picked))
RETURNING ` + rowColumns

// fenced turns a claim statement into its fenced form, for a store a
// [Membership] returns: the claim may take rows only on the shards of $3
// that the node (the text parameter node) holds at the epochs given in the
// parallel array epochs, under an ownership lease that is live at the
// statement's time. The CTE owned checks it against shard_owners and locks
// those ownership rows FOR SHARE, in shard order, for the rest of the
// claim's transaction: a heartbeat that releases or takes over a shard
// updates its row, so it waits for a claim in progress to commit, and a
// claim that waited on such an update re-reads the updated row (READ
// COMMITTED's recheck) and finds the owner or the epoch changed. So a claim
// on a shard commits before the shard's next acquisition does, and claims
// on a shard never interleave with another owner's. MATERIALIZED keeps the
// locking CTE from being folded into its one use.
func fenced(claim, epochs, node string) string {
	const head, filter = "WITH picked AS (", "o.shard = ANY ($3::int4[]))"
	if strings.Count(claim, head) != 1 || strings.Count(claim, filter) != 1 {
		panic("pgstore: fenced: the claim statement changed shape")
	}
	claim = strings.Replace(claim, head, `WITH owned AS MATERIALIZED (
	SELECT f.shard
	FROM {schema}.shard_owners f
	JOIN unnest($3::int4[], `+epochs+`::int8[]) AS m (shard, epoch) ON m.shard = f.shard AND m.epoch = f.epoch
	WHERE f.owner = `+node+`::text
		AND f.lease_expires_at > coalesce($1::timestamptz, now())
	ORDER BY f.shard
	FOR SHARE OF f
), picked AS (`, 1)
	return strings.Replace(claim, filter, filter+`
		AND o.shard = ANY (ARRAY(SELECT owned.shard FROM owned))`, 1)
}

func prepare(quotedSchema string) statements {
	x := func(s string) string { return expand(quotedSchema, s) }
	st := statements{
		// $2..$8 and $10: parallel arrays of the messages, in batch order
		// (a NULL run-at is the statement's time; $10 the priorities), $9:
		// the schema's channel. Ids are
		// drawn in batch order, so a batch is claimed oldest first in the
		// order it was given, but rows are inserted in dispatch-key order:
		// concurrent batches that share keys then wait on each other's
		// in-progress inserts in one global order and cannot deadlock. When
		// it inserted rows, the statement notifies the channel: delivered at
		// commit, and one notification per transaction however many
		// statements send it (PostgreSQL folds identical ones).
		enqueue: x(`
WITH ins AS (
	INSERT INTO {schema}.outbox (id, dispatch_key, namespace, task_queue, shard, payload, max_attempts, enqueued_at, visible_at, priority)
	SELECT m.id, m.dispatch_key, m.namespace, m.task_queue, m.shard, coalesce(m.payload, '\x'::bytea), m.max_attempts,
		t.now, coalesce(m.run_at, t.now), m.priority
	FROM (
		SELECT nextval('{schema}.outbox_id_seq') AS id, u.*
		FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::bytea[], $7::timestamptz[], $8::int4[], $10::int2[])
			WITH ORDINALITY AS u (dispatch_key, namespace, task_queue, shard, payload, run_at, max_attempts, priority, ord)
		ORDER BY u.ord
	) m,
		(SELECT coalesce($1::timestamptz, now()) AS now) t
	ORDER BY m.dispatch_key
	ON CONFLICT (dispatch_key) DO NOTHING
	RETURNING 1
)
SELECT c.n, (CASE WHEN c.n > 0 THEN pg_notify($9::text, '') END) IS NULL
FROM (SELECT count(*) AS n FROM ins) c`),

		// $2: owned shards, $3: all shards owned.
		countClaimed: x(claimedCounts("$3::bool")),

		countPending: x(pendingCounts.with + pendingCounts.sel + pendingCounts.order),

		countPendingWindow: x(windowCounts.with + windowCounts.sel + windowCounts.order),

		// countPending's and countPendingWindow's parameters and counts,
		// and countClaimed's counts, in one statement (see sweepCounts).
		sweepCount:       x(sweepCounts(pendingCounts, "$4::bool")),
		sweepCountWindow: x(sweepCounts(windowCounts, "$6::bool")),

		// $2: lease µs, $3: owned shards, $4..$6: the scopes as parallel
		// arrays (namespace, task queue, limit), $7: all shards owned. One
		// statement claims every
		// scope: a LATERAL subquery per scope walks outbox_route_oldest_idx
		// highest priority first, then oldest, and locks at most its limit of claimable rows,
		// skipping rows another claimer has locked. Oldest first, the walk
		// reads and skips the route's older rows that are not claimable
		// (delayed, leased, on other shards): claimable_at is a filter here,
		// not a bound, since a range on it would not be in enqueue order.
		claimScoped: x(`
WITH picked AS (
	SELECT c.id
	FROM unnest($4::text[], $5::text[], $6::int8[]) AS s (namespace, task_queue, lim)
	CROSS JOIN LATERAL (
		SELECT o.id
		FROM {schema}.outbox o
		WHERE o.namespace = s.namespace
			AND o.task_queue = s.task_queue
			AND o.state NOT IN ('settled', 'dead')
			AND o.claimable_at <= coalesce($1::timestamptz, now())
			AND ($7::bool OR o.shard = ANY ($3::int4[]))
		ORDER BY o.priority DESC, o.enqueued_at, o.id
		LIMIT s.lim
		FOR UPDATE SKIP LOCKED
	) c
)` + claimUpdate),

		// $2: lease µs, $3: owned shards, $4: limit, $5: all shards owned.
		// Oldest first over outbox_oldest_idx, whatever the route.
		claimUnscoped: x(`
WITH picked AS (
	SELECT o.id
	FROM {schema}.outbox o
	WHERE o.state NOT IN ('settled', 'dead')
		AND o.claimable_at <= coalesce($1::timestamptz, now())
		AND ($5::bool OR o.shard = ANY ($3::int4[]))
	ORDER BY o.enqueued_at, o.id
	LIMIT (SELECT $4::int8) -- not a constant to the planner: see routeCount
	FOR UPDATE SKIP LOCKED
)` + claimUpdate),

		// $2..$6: the completions as parallel arrays (dispatch key, token,
		// outcome 1 settle / 2 retry / 3 dead-letter, retry delay µs,
		// error). One UPDATE … FROM the arrays, through the dispatch key's
		// unique index. The fence — token, state claimed, live lease — is on
		// the updated table itself, so a concurrent re-claim is rechecked
		// against the row's newest version (READ COMMITTED's EvalPlanQual)
		// and the completion loses. A retry of a row that has had
		// max_attempts claims (0: no limit) is a dead-letter. The keys are
		// distinct (Complete checks), so each entry updates at most its row,
		// and the final join reports, in argument order, each entry's new
		// state, or NULL for a lost lease. The update walks the entries in
		// dispatch-key order (a nested loop over the sorted entries, each
		// through the unique index), so it locks rows in that order: two
		// calls over the same rows — a completer and a heartbeat's
		// ExtendLeases, entries in any order — wait for each other rather
		// than deadlock.
		complete: x(`
WITH c AS (
	SELECT *
	FROM unnest($2::text[], $3::int8[], $4::int4[], $5::int8[], $6::text[])
		WITH ORDINALITY AS c (dispatch_key, token, outcome, delay_us, error, ord)
), t AS (
	SELECT coalesce($1::timestamptz, now()) AS now
), done AS (
	UPDATE {schema}.outbox o SET
		state = CASE
			WHEN c.outcome = 1 THEN 'settled'
			WHEN c.outcome = 3 OR (o.max_attempts > 0 AND o.attempts >= o.max_attempts) THEN 'dead'
			ELSE 'pending' END,
		finished_at = CASE
			WHEN c.outcome = 1 OR c.outcome = 3 OR (o.max_attempts > 0 AND o.attempts >= o.max_attempts) THEN t.now
			END,
		visible_at = CASE
			WHEN c.outcome = 1 OR c.outcome = 3 OR (o.max_attempts > 0 AND o.attempts >= o.max_attempts) THEN o.visible_at
			ELSE t.now + c.delay_us * interval '1 microsecond' END,
		last_error = CASE WHEN c.outcome = 1 THEN o.last_error ELSE c.error END
	FROM (SELECT * FROM c ORDER BY c.dispatch_key) c, t -- lock order: see complete
	WHERE o.dispatch_key = c.dispatch_key
		AND o.token = c.token
		AND o.state = 'claimed'
		AND o.lease_expires_at > t.now
	RETURNING o.dispatch_key, o.state
)
SELECT d.state
FROM c
LEFT JOIN done d ON d.dispatch_key = c.dispatch_key
ORDER BY c.ord`),

		// $2: lease µs, $3, $4: the leases as parallel arrays (dispatch
		// key, token). Fenced as complete is; reports each entry's new
		// lease end, or NULL for a lost lease, in argument order.
		extend: x(`
WITH c AS (
	SELECT *
	FROM unnest($3::text[], $4::int8[]) WITH ORDINALITY AS c (dispatch_key, token, ord)
), t AS (
	SELECT coalesce($1::timestamptz, now()) AS now
), done AS (
	UPDATE {schema}.outbox o SET
		lease_expires_at = t.now + $2::bigint * interval '1 microsecond'
	FROM (SELECT * FROM c ORDER BY c.dispatch_key) c, t -- lock order: see complete
	WHERE o.dispatch_key = c.dispatch_key
		AND o.token = c.token
		AND o.state = 'claimed'
		AND o.lease_expires_at > t.now
	RETURNING o.dispatch_key, o.lease_expires_at
)
SELECT d.lease_expires_at
FROM c
LEFT JOIN done d ON d.dispatch_key = c.dispatch_key
ORDER BY c.ord`),

		// $1: dispatch key (no clock: inspection reads no time).
		get: x(`SELECT ` + rowColumns + ` FROM {schema}.outbox o WHERE o.dispatch_key = $1`),

		// One pass over the table.
		stats: x(`
SELECT
	count(*) FILTER (WHERE o.state = 'pending' AND o.visible_at <= t.now),
	count(*) FILTER (WHERE o.state = 'pending' AND o.visible_at > t.now),
	count(*) FILTER (WHERE o.state = 'claimed' AND o.lease_expires_at > t.now),
	count(*) FILTER (WHERE o.state = 'claimed' AND o.lease_expires_at <= t.now),
	count(*) FILTER (WHERE o.state = 'settled'),
	count(*) FILTER (WHERE o.state = 'dead'),
	count(*)
FROM {schema}.outbox o, (SELECT coalesce($1::timestamptz, now()) AS now) t`),

		// $1: namespace ("" for all), $2: after, $3: limit. Dispatch keys
		// in byte order, served by outbox_dead_key_idx.
		listDead: x(`
SELECT ` + rowColumns + `
FROM {schema}.outbox o
WHERE o.state = 'dead'
	AND ($1::text = '' OR o.namespace = $1::text)
	AND o.dispatch_key COLLATE "C" > $2::text
ORDER BY o.dispatch_key COLLATE "C"
LIMIT $3::int8`),

		// $2: dispatch keys, $3: the schema's channel: requeued rows are
		// claimable, so subscribers are told, as for an enqueue.
		requeue: x(`
WITH moved AS (
	UPDATE {schema}.outbox o SET
		state       = 'pending',
		attempts    = 0,
		visible_at  = coalesce($1::timestamptz, now()),
		finished_at = NULL
	WHERE o.dispatch_key = ANY ($2::text[])
		AND o.state = 'dead'
	RETURNING 1
)
SELECT c.n, (CASE WHEN c.n > 0 THEN pg_notify($3::text, '') END) IS NULL
FROM (SELECT count(*) AS n FROM moved) c`),

		// $1: finished before, $2: limit. Served by outbox_settled_idx,
		// then the primary key: an id array, not a join, so that no plan
		// can hash the whole table to find the rows.
		purgeSettled: x(purge("settled")),
		// Likewise, served by outbox_finished_dead_idx.
		purgeDead: x(purge("dead")),
	}
	// $8 (scoped) or $6 (unscoped): the epochs of the shards in $3, then
	// the node.
	st.claimScopedFenced = x(fenced(st.claimScoped, "$8", "$9"))
	st.claimUnscopedFenced = x(fenced(st.claimUnscoped, "$6", "$7"))
	st.claimWindow, st.claimWindowFenced = x(windowClaimSQL(false)), x(windowClaimSQL(true))
	st.membership = prepareMembership(x)
	st.capCount = x(capCountSQL)
	st.enqueueTx, st.identity = x(enqueueTxSQL), x(identitySQL)
	return st
}

// purge is the statement that deletes up to $2 rows in state that
// finished before $1, oldest first.
func purge(state string) string {
	return `
DELETE FROM {schema}.outbox o
WHERE o.id = ANY (ARRAY(
	SELECT p.id
	FROM {schema}.outbox p
	WHERE p.state = '` + state + `' AND p.finished_at < $1
	ORDER BY p.finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))`
}
