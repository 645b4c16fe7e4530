-- ClaimOutboxRowsScoped's statement at schema version 12 (commit ac7b401), for BenchmarkRowCost's before arm.

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
)
UPDATE {schema}.outbox o SET
	state            = 'claimed',
	attempts         = o.attempts + 1,
	token            = nextval('{schema}.claim_token_seq'),
	claimed_at       = coalesce($1::timestamptz, now()),
	lease_expires_at = coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond'
WHERE o.id = ANY (ARRAY(SELECT picked.id FROM picked))
RETURNING o.id, o.dispatch_key, o.namespace, o.task_queue, o.shard, o.payload, o.state,
	o.attempts, o.max_attempts, o.token, o.enqueued_at, o.visible_at, o.claimed_at,
	o.lease_expires_at, o.finished_at, o.last_error, o.priority, o.headers, o.snoozes