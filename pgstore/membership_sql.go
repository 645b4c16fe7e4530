package pgstore

// membershipStatements are the membership's SQL.
type membershipStatements struct {
	seed, renew, lock, rebalance, leave string
}

// prepareMembership is the membership's statement table, filled in by x.
func prepareMembership(x func(string) string) membershipStatements {
	return membershipStatements{
		seed:      x(memberSeedSQL),
		renew:     x(memberRenewSQL),
		lock:      x(memberLockSQL),
		rebalance: x(memberRebalanceSQL),
		leave:     x(memberLeaveSQL),
	}
}

// memberSeedSQL is Join's statement. $1: shard count. One ownership row per
// shard, unowned.
const memberSeedSQL = `
INSERT INTO {schema}.shard_owners (shard)
SELECT generate_series(0, $1::int4 - 1)
ON CONFLICT (shard) DO NOTHING`

// memberRenewSQL is a heartbeat's first statement (see beat). $1: node, $2:
// lease µs, $3: incarnation, $4: the transaction's guard, ms as text (see
// beatGuard): idle_in_transaction_session_timeout for the rest of the
// transaction. Renews (or starts) the node's member lease, a
// rejoin after it lapsed counting as a new join, and returns the live
// members, the node included. Another incarnation's row is taken over only
// once its member lease and every ownership lease under the name have lapsed
// (so its fenced claims have stopped, and every shard it held is taken at a
// new epoch); until then nothing is written and the node is not among the
// rows returned. Members whose lease lapsed over an hour ago are deleted, so
// crashed nodes' rows do not pile up.
const memberRenewSQL = `
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now,
	set_config('idle_in_transaction_session_timeout', $4::text, true) AS guard),
gone AS (
	DELETE FROM {schema}.members m USING t
	WHERE m.lease_expires_at < t.now - interval '1 hour' AND m.node <> $1::text
),
me AS (
	INSERT INTO {schema}.members AS m (node, joined_at, lease_expires_at, incarnation)
	SELECT $1::text, t.now, t.now + $2::bigint * interval '1 microsecond', $3::text FROM t
	ON CONFLICT (node) DO UPDATE SET
		lease_expires_at = excluded.lease_expires_at,
		joined_at = CASE WHEN m.lease_expires_at <= excluded.joined_at OR m.incarnation <> excluded.incarnation
			THEN excluded.joined_at ELSE m.joined_at END,
		incarnation = excluded.incarnation
	WHERE m.incarnation = excluded.incarnation
		OR m.lease_expires_at <= excluded.joined_at AND NOT EXISTS (
			SELECT FROM {schema}.shard_owners s
			WHERE s.owner = excluded.node AND s.lease_expires_at > excluded.joined_at)
	RETURNING m.node
)
SELECT m.node FROM {schema}.members m, t WHERE m.lease_expires_at > t.now AND m.node <> $1::text
UNION ALL
SELECT me.node FROM me`

// memberLockSQL is a heartbeat's second statement. $1: node, $2: assigned
// shards. Locks, in shard order, the ownership rows rebalance may update.
const memberLockSQL = `
SELECT s.shard FROM {schema}.shard_owners s
WHERE s.shard = ANY ($2::int4[]) OR s.owner = $1::text
ORDER BY s.shard
FOR UPDATE`

// memberRebalanceSQL is a heartbeat's last statement. $1: node, $2: assigned
// shards, $3: lease µs, $4: the shards the node drained since the last
// heartbeat. Releases what the node owns but is not assigned, except the
// shards it owns under a live lease that it starts draining now (not
// assigned, not in $4), whose leases it renews one more time; renews what it
// owns under a live lease (same epoch); takes what is assigned and free —
// unowned, or its owner's lease expired, this node's own lapsed lease
// included — with the epoch incremented, recording the acquisition in
// shard_epochs. Returns the shards held, their epochs, and whether each is
// one drained (kept, not assigned).
const memberRebalanceSQL = `
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
released AS (
	UPDATE {schema}.shard_owners s SET owner = NULL, lease_expires_at = t.now
	FROM t
	WHERE s.owner = $1::text AND NOT (s.shard = ANY ($2::int4[]))
		AND (s.shard = ANY ($4::int4[]) OR s.lease_expires_at <= t.now)
	RETURNING s.shard
),
held AS (
	UPDATE {schema}.shard_owners s SET
		epoch = CASE WHEN s.owner = $1::text AND s.lease_expires_at > t.now THEN s.epoch ELSE s.epoch + 1 END,
		owner = $1::text,
		lease_expires_at = t.now + $3::bigint * interval '1 microsecond'
	FROM t
	WHERE s.shard = ANY ($2::int4[])
			AND (s.owner = $1::text OR s.owner IS NULL OR s.lease_expires_at <= t.now)
		OR s.owner = $1::text AND s.lease_expires_at > t.now
			AND NOT (s.shard = ANY ($2::int4[])) AND NOT (s.shard = ANY ($4::int4[]))
	RETURNING s.shard, s.epoch, NOT (s.shard = ANY ($2::int4[])) AS keeping
),
logged AS (
	INSERT INTO {schema}.shard_epochs (shard, epoch, owner, acquired_at)
	SELECT h.shard, h.epoch, $1::text, t.now FROM held h, t
	ON CONFLICT (shard, epoch) DO NOTHING
)
SELECT h.shard, h.epoch, h.keeping FROM held h ORDER BY h.shard`

// memberLeaveSQL is Leave's statement. $1: node, $2: incarnation. Releases
// the node's shards and removes it, unless another incarnation holds the
// name now.
const memberLeaveSQL = `
WITH me AS (
	DELETE FROM {schema}.members m WHERE m.node = $1::text AND m.incarnation = $2::text
	RETURNING m.node
)
UPDATE {schema}.shard_owners s SET owner = NULL, lease_expires_at = clock_timestamp()
FROM me WHERE s.owner = me.node`
