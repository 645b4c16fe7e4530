-- Complete's statement at schema version 13 (commit 5ca35e2), for BenchmarkRowCost's v13-complete arm.

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
			WHEN c.outcome = 4 THEN 'pending'
			WHEN c.outcome = 3 OR (o.max_attempts > 0 AND o.attempts >= o.max_attempts) THEN 'dead'
			ELSE 'pending' END,
		finished_at = CASE
			WHEN c.outcome = 4 THEN NULL
			WHEN c.outcome = 1 OR c.outcome = 3 OR (o.max_attempts > 0 AND o.attempts >= o.max_attempts) THEN t.now
			END,
		visible_at = CASE
			WHEN c.outcome = 4 THEN t.now + c.delay_us * interval '1 microsecond'
			WHEN c.outcome = 1 OR c.outcome = 3 OR (o.max_attempts > 0 AND o.attempts >= o.max_attempts) THEN o.visible_at
			ELSE t.now + c.delay_us * interval '1 microsecond' END,
		last_error = CASE WHEN c.outcome = 1 OR (c.outcome = 4 AND c.error = '') THEN o.last_error ELSE c.error END,
		attempts = CASE WHEN c.outcome = 4 THEN o.attempts - 1 ELSE o.attempts END,
		snoozes = CASE WHEN c.outcome = 4 THEN o.snoozes + 1 ELSE o.snoozes END
	FROM (SELECT * FROM c ORDER BY c.dispatch_key) c, t -- lock order: see complete
	WHERE o.dispatch_key = c.dispatch_key
		AND o.dispatch_key = ANY ($2::text[]) -- an index bound, whatever the join: see liveLease
		AND o.token = c.token
		AND CASE WHEN o.state = 'claimed' THEN o.lease_expires_at > t.now ELSE false END
	RETURNING o.dispatch_key, o.state
)
SELECT d.state
FROM c
LEFT JOIN done d ON d.dispatch_key = c.dispatch_key
ORDER BY c.ord
