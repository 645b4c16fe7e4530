package pgstore

import "strings"

// statements holds the store's SQL with the quoted schema filled in. Every
// statement takes the clock as $1: coalesce($1, now()) is the injected time,
// or the database's when the store has no clock.
type statements struct {
	enqueue, countClaimed, countPending, countPendingWindow      string
	claimScoped, claimUnscoped, settle, retry, get, purgeSettled string
}

// cappedCount is the per-route count both pending counts share, for the
// route ({ns}, {tq}): the claimable rows on the owned shards ($2, or every
// shard when the boolean parameter {all} is true), stopped at the cap ($3),
// walking outbox_route_claimable_idx over claimable_at <= now; routes with
// none are dropped.
//
// The cap is LIMIT (SELECT $3), not LIMIT $3, so that the planner cannot
// see its value in a custom plan either. With a bare $3 every custom plan
// (estimated with the real cap) looked cheaper than the generic plan
// (estimated with PostgreSQL's default for an unknown limit), so pgx's
// prepared statement was planned again on every call: about 0.4 ms, half
// the statement's cost at 20 routes. Now both plans carry the same estimate
// and PostgreSQL settles on the generic plan after its five custom ones.
// The unscoped claim's LIMIT is written the same way, for the same reason.
const cappedCount = `
	CROSS JOIN LATERAL (
		SELECT count(*) AS n
		FROM (
			SELECT 1
			FROM {schema}.outbox o
			WHERE o.namespace = {ns}
				AND o.task_queue = {tq}
				AND o.state IN ('pending', 'claimed')
				AND o.claimable_at <= coalesce($1::timestamptz, now())
				AND ({all} OR o.shard = ANY ($2::int4[]))
			ORDER BY o.claimable_at -- the index's order: a scan that can stop at the cap
			LIMIT (SELECT $3::int8) -- not a constant to the planner: see cappedCount
		) capped
	) c
	WHERE c.n > 0`

// windowCounts is countPendingWindow's per-namespace step: the routes of
// namespace {ns} with claimable rows on the owned shards ($2, or all of
// them when $6 is true) and their
// counts capped at $3, as two arrays in task-queue order, both NULL when
// the namespace has none. A loose index scan over outbox_route_oldest_idx
// finds the namespace's routes with one index descent each; per route the
// count is countPending's, over outbox_route_claimable_idx bounded by
// claimable_at <= now and stopped at the cap.
var windowCounts = `
	SELECT array_agg(q.task_queue ORDER BY q.task_queue) AS queues, array_agg(c.n ORDER BY q.task_queue) AS counts
	FROM (
		WITH RECURSIVE queues (task_queue) AS (
			(SELECT o.task_queue
			FROM {schema}.outbox o
			WHERE o.state <> 'settled'
				AND o.namespace = {ns}
			ORDER BY o.task_queue
			LIMIT 1)
			UNION ALL
			SELECT next.task_queue
			FROM queues q
			CROSS JOIN LATERAL (
				SELECT o.task_queue
				FROM {schema}.outbox o
				WHERE o.state <> 'settled'
					AND o.namespace = {ns}
					AND o.task_queue > q.task_queue
				ORDER BY o.task_queue
				LIMIT 1
			) next
		)
		SELECT queues.task_queue FROM queues
	) q` + strings.NewReplacer("{tq}", "q.task_queue", "{all}", "$6::bool").Replace(cappedCount)

// windowPart is the CTE name that takes, from the namespace walk, in
// order, the first limit namespaces whose windowCounts are not empty.
func windowPart(name, walk, limit string) string {
	return name + ` AS (
	SELECT w.namespace, c.queues, c.counts
	FROM ` + walk + ` w
	CROSS JOIN LATERAL (` + strings.ReplaceAll(windowCounts, "{ns}", "w.namespace") + `
	) c
	WHERE c.queues IS NOT NULL
	LIMIT ` + limit + `
)`
}

// namespaceWalk is a loose index scan over outbox_route_oldest_idx: the
// namespaces with unsettled rows above {from}, ascending, each found with
// one index descent, and below or at {to} if given.
func namespaceWalk(name, from, to string) string {
	return name + ` (namespace) AS (
	(SELECT o.namespace
	FROM {schema}.outbox o
	WHERE o.state <> 'settled'` + from + to + `
	ORDER BY o.namespace
	LIMIT 1)
	UNION ALL
	SELECT next.namespace
	FROM ` + name + ` w
	CROSS JOIN LATERAL (
		SELECT o.namespace
		FROM {schema}.outbox o
		WHERE o.state <> 'settled'
			AND o.namespace > w.namespace` + to + `
		ORDER BY o.namespace
		LIMIT 1
	) next
)`
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

func prepare(quotedSchema string) statements {
	x := func(s string) string { return expand(quotedSchema, s) }
	return statements{
		// $2..$6: parallel arrays of the messages, in batch order. Ids are
		// drawn in batch order, so a batch is claimed oldest first in the
		// order it was given, but rows are inserted in dispatch-key order:
		// concurrent batches that share keys then wait on each other's
		// in-progress inserts in one global order and cannot deadlock.
		enqueue: x(`
INSERT INTO {schema}.outbox (id, dispatch_key, namespace, task_queue, shard, payload, enqueued_at, visible_at)
SELECT m.id, m.dispatch_key, m.namespace, m.task_queue, m.shard, coalesce(m.payload, '\x'::bytea), t.now, t.now
FROM (
	SELECT nextval('{schema}.outbox_id_seq') AS id, u.*
	FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::bytea[])
		WITH ORDINALITY AS u (dispatch_key, namespace, task_queue, shard, payload, ord)
	ORDER BY u.ord
) m,
	(SELECT coalesce($1::timestamptz, now()) AS now) t
ORDER BY m.dispatch_key
ON CONFLICT (dispatch_key) DO NOTHING`),

		// $2: owned shards, $3: all shards owned. Served by
		// outbox_live_lease_idx (a range on lease_expires_at over claimed
		// rows), so it reads live leases only.
		countClaimed: x(`
SELECT o.namespace, count(*)
FROM {schema}.outbox o
WHERE o.state = 'claimed'
	AND o.lease_expires_at > coalesce($1::timestamptz, now())
	AND ($3::bool OR o.shard = ANY ($2::int4[]))
GROUP BY o.namespace`),

		// $2: owned shards, $3: cap per route, $4: all shards owned. A
		// loose index scan over outbox_route_oldest_idx finds each route
		// with unsettled rows with one index descent; per route, count(*)
		// over a subquery LIMITed to the cap walks outbox_route_claimable_idx (index-only where the
		// visibility map allows) over the range claimable_at <= now, so
		// rows in retry back-off and under a live lease are outside the
		// range and never read, and stops at the cap-th owned row. The
		// predicate state IN ('pending', 'claimed') is that index's; the
		// ORDER BY costs nothing (it is the index's order) and rules out a
		// bitmap scan, which would collect every entry of the range before
		// the LIMIT could stop it.
		countPending: x(`
WITH RECURSIVE routes (namespace, task_queue) AS (
	(SELECT o.namespace, o.task_queue
	FROM {schema}.outbox o
	WHERE o.state <> 'settled'
	ORDER BY o.namespace, o.task_queue
	LIMIT 1)
	UNION ALL
	SELECT next.namespace, next.task_queue
	FROM routes r
	CROSS JOIN LATERAL (
		SELECT o.namespace, o.task_queue
		FROM {schema}.outbox o
		WHERE o.state <> 'settled'
			AND (o.namespace, o.task_queue) > (r.namespace, r.task_queue)
		ORDER BY o.namespace, o.task_queue
		LIMIT 1
	) next
)
SELECT r.namespace, r.task_queue, c.n
FROM routes r` + strings.NewReplacer("{ns}", "r.namespace", "{tq}", "r.task_queue", "{all}", "$4::bool").Replace(cappedCount) + `
ORDER BY r.namespace, r.task_queue`),

		// $2: owned shards, $3: cap per route, $4: After, $5: the most
		// namespaces, $6: all shards owned. after walks the namespaces
		// above $4, wrapped those from the smallest up to $4 (so $4 itself
		// comes last); each is
		// walked lazily, one index descent per namespace, only as far as
		// its consumer pulls. first takes from after, in order, the first
		// $5 namespaces whose windowCounts are not empty; second takes from
		// wrapped as many more as first left room for, and is not run at
		// all (LIMIT 0) when first filled the window. No namespace beyond
		// the window has its routes read. The final sort is over the
		// window's routes only.
		countPendingWindow: x(`
WITH RECURSIVE ` + namespaceWalk("after", `
		AND o.namespace > $4::text`, "") + `, ` + namespaceWalk("wrapped", "", `
		AND o.namespace <= $4::text`) + `,
` + windowPart("first", "after", "$5") + `,
` + windowPart("second", "wrapped", "greatest($5 - (SELECT count(*) FROM first), 0)") + `
SELECT win.namespace, r.task_queue, r.n
FROM (
	SELECT * FROM first
	UNION ALL
	SELECT * FROM second
) win
CROSS JOIN LATERAL unnest(win.queues, win.counts) AS r (task_queue, n)
ORDER BY win.namespace, r.task_queue`),

		// $2: lease µs, $3: owned shards, $4..$6: the scopes as parallel
		// arrays (namespace, task queue, limit), $7: all shards owned. One
		// statement claims every
		// scope: a LATERAL subquery per scope walks outbox_route_oldest_idx
		// oldest first and locks at most its limit of claimable rows,
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
			AND o.state <> 'settled'
			AND o.claimable_at <= coalesce($1::timestamptz, now())
			AND ($7::bool OR o.shard = ANY ($3::int4[]))
		ORDER BY o.enqueued_at, o.id
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
	WHERE o.state <> 'settled'
		AND o.claimable_at <= coalesce($1::timestamptz, now())
		AND ($5::bool OR o.shard = ANY ($3::int4[]))
	ORDER BY o.enqueued_at, o.id
	LIMIT (SELECT $4::int8) -- not a constant to the planner: see cappedCount
	FOR UPDATE SKIP LOCKED
)` + claimUpdate),

		// $2: dispatch key, $3: token. The conditions are on the updated
		// table itself, so a concurrent re-claim is rechecked against the
		// row's newest version (READ COMMITTED's EvalPlanQual) and loses.
		settle: x(`
WITH done AS (
	UPDATE {schema}.outbox o SET
		state      = 'settled',
		settled_at = coalesce($1::timestamptz, now())
	WHERE o.dispatch_key = $2
		AND o.token = $3
		AND o.state = 'claimed'
		AND o.lease_expires_at > coalesce($1::timestamptz, now())
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM done), EXISTS (SELECT 1 FROM {schema}.outbox o WHERE o.dispatch_key = $2)`),

		// $2: dispatch key, $3: token, $4: delay µs.
		retry: x(`
WITH done AS (
	UPDATE {schema}.outbox o SET
		state      = 'pending',
		visible_at = coalesce($1::timestamptz, now()) + $4::bigint * interval '1 microsecond'
	WHERE o.dispatch_key = $2
		AND o.token = $3
		AND o.state = 'claimed'
		AND o.lease_expires_at > coalesce($1::timestamptz, now())
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM done), EXISTS (SELECT 1 FROM {schema}.outbox o WHERE o.dispatch_key = $2)`),

		// $1: dispatch key (no clock: inspection reads no time).
		get: x(`SELECT ` + rowColumns + `, o.state FROM {schema}.outbox o WHERE o.dispatch_key = $1`),

		// $1: settled before, $2: limit. Served by outbox_settled_idx,
		// then the primary key: an id array, not a join, so that no plan
		// can hash the whole table to find the rows.
		purgeSettled: x(`
DELETE FROM {schema}.outbox o
WHERE o.id = ANY (ARRAY(
	SELECT p.id
	FROM {schema}.outbox p
	WHERE p.state = 'settled' AND p.settled_at < $1
	ORDER BY p.settled_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))`),
	}
}
