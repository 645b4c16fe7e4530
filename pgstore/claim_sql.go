package pgstore

import "strings"

// claimableRows is the rows a claim may take, as a subquery over ctid and
// the order columns cols, in the claims' order, at most limit rows, each
// locked FOR UPDATE SKIP LOCKED: the pending rows claimable now, from the
// claim's index (outbox_route_oldest_idx or outbox_oldest_idx, partial on
// pending rows, walked in order), and
// the claimed rows whose lease expired, from outbox_live_lease_idx (a range
// lease_expires_at <= now over claimed rows: one descent, empty while no
// lease has expired). A pending row is claimable once visible_at <= now
// (its claimable_at, spelt visible_at here): a bound on claimable_at would
// let the generic plan of a scoped claim take outbox_route_claimable_idx
// instead, a bitmap of the whole route then a sort for each scope, about
// three times the ordered walk's cost at 1,000 scopes of 10 rows
// (TestExplainClaimManyScopes). cond is the conditions both share (route, shards),
// each line starting with AND. Each branch stops at limit rows in its own
// order and the union is cut to limit in the same order; a pending row
// that a claimed row with an expired lease displaces stays locked (not
// updated) until the claim's transaction ends, which only delays it to
// another claimer. FOR UPDATE is not allowed on a UNION's branches
// themselves, so each is a subquery.
func claimableRows(cols, order, limit, cond string) string {
	branch := func(alias, state string) string {
		return `
			SELECT ` + alias + `.* FROM (
				SELECT o.ctid, ` + cols + `
				FROM {schema}.outbox o
				WHERE ` + state + cond + `
				ORDER BY ` + order + `
				LIMIT ` + limit + `
				FOR UPDATE SKIP LOCKED
			) ` + alias
	}
	return `(
		SELECT x.ctid FROM (` + branch("p", `o.state = 'pending'
					AND o.visible_at <= coalesce($1::timestamptz, now())`) + `
			UNION ALL` + branch("e", `o.state = 'claimed'
					AND o.lease_expires_at <= coalesce($1::timestamptz, now())`) + `
		) x
		ORDER BY ` + strings.ReplaceAll(order, "o.", "x.") + `
		LIMIT ` + limit + `
	)`
}

// claimScopedSQL is ClaimOutboxRowsScoped's statement. $2: lease µs, $3:
// owned shards, $4..$6: the scopes as parallel arrays (namespace, task
// queue, limit), $7: all shards owned. One statement claims every scope: a
// LATERAL subquery per scope (claimableRows) walks outbox_route_oldest_idx
// highest priority first, then oldest, and locks at most its limit of
// claimable rows, skipping rows another claimer has locked, with the
// route's claimed rows whose lease expired in the same order. Oldest
// first, the walk reads and skips the route's older pending rows that are
// not claimable (delayed, on other shards): visible_at is a filter here,
// not a bound, since a range on it would not be in enqueue order.
var claimScopedSQL = `
WITH picked AS (
	SELECT c.ctid
	FROM unnest($4::text[], $5::text[], $6::int8[]) AS s (namespace, task_queue, lim)
	CROSS JOIN LATERAL ` + claimableRows("o.priority, o.enqueued_at, o.id", "o.priority DESC, o.enqueued_at, o.id", "s.lim", `
					AND o.namespace = s.namespace
					AND o.task_queue = s.task_queue
					AND ($7::bool OR o.shard = ANY ($3::int4[]))`) + ` c
)` + claimUpdate

// claimUnscopedSQL is ClaimOutboxRowsUnscoped's statement. $2: lease µs, $3:
// owned shards, $4: limit, $5: all shards owned. Oldest first over
// outbox_oldest_idx, whatever the route, with the claimed rows whose lease
// expired in the same order (claimableRows).
var claimUnscopedSQL = `
WITH picked AS (
	SELECT c.ctid
	FROM ` + claimableRows("o.enqueued_at, o.id", "o.enqueued_at, o.id",
	"(SELECT $4::int8) -- not a constant to the planner: see routeCount\n", `
					AND ($5::bool OR o.shard = ANY ($3::int4[]))`) + ` c
)` + claimUpdate

// The claim's update, shared by the scoped and the unscoped claim: the
// picked rows (already locked FOR UPDATE SKIP LOCKED) get a fresh token, one
// more attempt and a lease of $2 microseconds. The picked rows are found by
// ctid (a TID scan: no index), gathered into an array: no other statement
// can update a row this one has locked, so its ctid holds; and a join with picked would let the planner, which cannot
// estimate a LIMIT taken from a parameter array, hash the whole table to
// update a hundred rows.
const claimUpdate = `
UPDATE {schema}.outbox o SET
	state            = 'claimed',
	attempts         = o.attempts + 1,
	token            = nextval('{schema}.claim_token_seq'),
	claimed_at       = coalesce($1::timestamptz, now()),
	lease_expires_at = coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond'
WHERE o.ctid = ANY (ARRAY(SELECT picked.ctid FROM picked))
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
	if strings.Count(claim, head) != 1 || strings.Count(claim, filter) != 2 {
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
	return strings.ReplaceAll(claim, filter, filter+`
					AND o.shard = ANY (ARRAY(SELECT owned.shard FROM owned))`)
}
