package pgstore

import "strings"

// claimScopedSQL is ClaimOutboxRowsScoped's statement. $2: lease µs, $3:
// owned shards, $4..$6: the scopes as parallel arrays (namespace, task
// queue, limit), $7: all shards owned. One statement claims every scope: a
// LATERAL subquery per scope walks outbox_route_oldest_idx highest priority
// first, then oldest, and locks at most its limit of claimable rows,
// skipping rows another claimer has locked. Oldest first, the walk reads and
// skips the route's older rows that are not claimable (delayed, leased, on
// other shards): claimable_at is a filter here, not a bound, since a range
// on it would not be in enqueue order.
const claimScopedSQL = `
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
)` + claimUpdate

// claimUnscopedSQL is ClaimOutboxRowsUnscoped's statement. $2: lease µs, $3:
// owned shards, $4: limit, $5: all shards owned. Oldest first over
// outbox_oldest_idx, whatever the route.
const claimUnscopedSQL = `
WITH picked AS (
	SELECT o.id
	FROM {schema}.outbox o
	WHERE o.state NOT IN ('settled', 'dead')
		AND o.claimable_at <= coalesce($1::timestamptz, now())
		AND ($5::bool OR o.shard = ANY ($3::int4[]))
	ORDER BY o.enqueued_at, o.id
	LIMIT (SELECT $4::int8) -- not a constant to the planner: see routeCount
	FOR UPDATE SKIP LOCKED
)` + claimUpdate

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
