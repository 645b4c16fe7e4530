package pgstore

// The statements of a row's life outside the claims: enqueue, complete
// and extend, inspection, requeue and purge.

// enqueueSQL is Enqueue's statement (EnqueueTx's is enqueueTxSQL). $2..$8,
// $10 and $11: parallel arrays of the messages, in batch order (a NULL
// run-at is the statement's time; $10 the priorities, $11 the headers, NULL
// for none), $9: the schema's channel. Ids are drawn in batch order, so a batch is claimed oldest first
// in the order it was given, but rows are inserted in dispatch-key order:
// concurrent batches that share keys then wait on each other's in-progress
// inserts in one global order and cannot deadlock. When it inserted rows,
// the statement notifies the channel (notifyPayload): delivered at
// commit, one notification per statement that inserted rows.
const enqueueSQL = `
WITH ins AS (
	INSERT INTO {schema}.outbox (id, dispatch_key, namespace, task_queue, shard, payload, max_attempts, enqueued_at, visible_at, priority, headers)
	SELECT m.id, m.dispatch_key, m.namespace, m.task_queue, m.shard, coalesce(m.payload, '\x'::bytea), m.max_attempts,
		t.now, coalesce(m.run_at, t.now), m.priority, m.headers
	FROM (
		SELECT nextval('{schema}.outbox_id_seq') AS id, u.*
		FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::bytea[], $7::timestamptz[], $8::int4[], $10::int2[], $11::jsonb[])
			WITH ORDINALITY AS u (dispatch_key, namespace, task_queue, shard, payload, run_at, max_attempts, priority, headers, ord)
		ORDER BY u.ord
	) m,
		(SELECT coalesce($1::timestamptz, now()) AS now) t
	ORDER BY m.dispatch_key
	ON CONFLICT (dispatch_key, shard) DO NOTHING
	RETURNING namespace, task_queue, shard, enqueued_at, visible_at
)
SELECT c.n, (CASE WHEN c.n > 0 THEN pg_notify($9::text, ` + notifyPayload + `) END) IS NULL
FROM (SELECT count(*) AS n FROM ins) c`

// notifyPayload is an enqueue's notification payload, from ins, the rows
// it inserted: a JSON object of its transaction's id and, per route and
// shard, the rows claimable at once and the earliest run-at of the others,
// {"x": "xid", "r": [[namespace, task_queue, shard, n, due], …]}; when
// that would pass 7,000 bytes (PostgreSQL refuses a payload of 8,000), the
// JSON array of the namespaces, or, longer still, an empty payload (any
// namespace). A store that hears it adds those rows to its kept pending
// counts without a read, or reads only those namespaces' counts again
// (kept.go). Evaluated only when rows were inserted: pg_current_xact_id()
// gives the transaction an id, which the insert already did.
const notifyPayload = `(
	SELECT CASE WHEN octet_length(p.routes) <= 7000 THEN p.routes
		WHEN octet_length(p.names) <= 7000 THEN p.names ELSE '' END
	FROM (
		SELECT json_build_object('x', pg_current_xact_id()::text,
				'r', json_agg(json_build_array(g.namespace, g.task_queue, g.shard, g.n, g.due)))::text AS routes,
			json_agg(DISTINCT g.namespace)::text AS names
		FROM (
			SELECT namespace, task_queue, shard,
				count(*) FILTER (WHERE visible_at <= enqueued_at) AS n,
				min(visible_at) FILTER (WHERE visible_at > enqueued_at) AS due
			FROM ins
			GROUP BY namespace, task_queue, shard
		) g
	) p)`

// completeSQL is Complete's statement. $2..$6: the completions as parallel
// arrays (dispatch key, token, outcome 1 settle / 2 retry / 3 dead-letter /
// 4 snooze, retry or snooze delay µs, error). A snooze gives the claim's
// attempt back, counts a snooze, and records its error only if it has one.
// One UPDATE … FROM the arrays, through the primary key (dispatch_key,
// shard), by its dispatch_key prefix. The fence — token, state claimed, live
// lease — is on the updated table itself, so a concurrent re-claim is
// rechecked against the row's newest version (READ COMMITTED's
// EvalPlanQual) and the completion loses. A retry of a row that has had
// max_attempts claims (0: no limit) is a dead-letter. The keys are distinct
// (Complete checks), so each entry updates at most its row; the statement
// returns the key and new state of each row it updated, and Complete puts
// them back in argument order (an entry with no row returned lost its
// lease). Until version 13 a final join of the entries with the updated
// rows did that in the database, ordered by the entries' ordinality: it
// cost a fifth of the statement's CPU (BenchmarkRowCost, v13-complete,
// and docs/pgstore.md, "Where a drained row's CPU goes"). The update walks
// the entries in dispatch-key order (a merge or nested loop over the sorted
// entries, each through the primary key), so it locks rows in that order:
// two calls over the same rows — a completer and a heartbeat's
// ExtendLeases, entries in any order — wait for each other rather than
// deadlock.
var completeSQL = `
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
FROM (
	SELECT *
	FROM unnest($2::text[], $3::int8[], $4::int4[], $5::int8[], $6::text[]) AS c (dispatch_key, token, outcome, delay_us, error)
	ORDER BY c.dispatch_key -- lock order: see above
) c, (SELECT coalesce($1::timestamptz, now()) AS now) t
WHERE o.dispatch_key = c.dispatch_key
	AND o.dispatch_key = ANY ($2::text[]) -- an index bound, whatever the join: see liveLease
	AND o.token = c.token
	AND ` + liveLease + `
RETURNING o.dispatch_key, o.state`

// liveLease is the fence of Complete and ExtendLeases on the row o: claimed,
// under a lease live at t.now. It is one CASE so that the planner can
// neither bound an index scan by it nor prove outbox_live_lease_idx's
// predicate (state = 'claimed') from it: both statements then find their
// rows through the key. On an outbox ANALYZEd while no row was claimed,
// the statistics say that index is empty, and the generic plan of a
// Complete that could use it walked it, every claimed row, for each entry
// (TestExplainNothingClaimed). As a condition of the updated table, it is
// rechecked against a concurrently updated row's newest version all the
// same. Both statements also bound the key by their array of keys
// (dispatch_key = ANY), which gives the planner an index scan of the key
// whatever join it picks for a large batch (at 1,000 entries over a small
// outbox it may hash the rows it finds and probe with the sorted entries,
// which keeps the key order of the updates; TestExplainUsesIndexes checks
// the plans of a small batch).
const liveLease = `CASE WHEN o.state = 'claimed' THEN o.lease_expires_at > t.now ELSE false END`

// extendSQL is ExtendLeases' statement. $2: lease µs, $3, $4: the leases as
// parallel arrays (dispatch key, token). Fenced as completeSQL is; reports
// each entry's new lease end, or NULL for a lost lease, in argument order.
var extendSQL = `
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
		AND o.dispatch_key = ANY ($3::text[]) -- an index bound, whatever the join: see liveLease
		AND o.token = c.token
		AND ` + liveLease + `
	RETURNING o.dispatch_key, o.lease_expires_at
)
SELECT d.lease_expires_at
FROM c
LEFT JOIN done d ON d.dispatch_key = c.dispatch_key
ORDER BY c.ord`

// getSQL is Get's statement. $1: dispatch key (no clock: inspection reads no
// time).
const getSQL = `SELECT ` + rowColumns + ` FROM {schema}.outbox o WHERE o.dispatch_key = $1`

// statsSQL is Stats' statement. One pass over the table.
const statsSQL = `
SELECT
	count(*) FILTER (WHERE o.state = 'pending' AND o.visible_at <= t.now),
	count(*) FILTER (WHERE o.state = 'pending' AND o.visible_at > t.now),
	count(*) FILTER (WHERE o.state = 'claimed' AND o.lease_expires_at > t.now),
	count(*) FILTER (WHERE o.state = 'claimed' AND o.lease_expires_at <= t.now),
	count(*) FILTER (WHERE o.state = 'settled'),
	count(*) FILTER (WHERE o.state = 'dead'),
	count(*)
FROM {schema}.outbox o, (SELECT coalesce($1::timestamptz, now()) AS now) t`

// listDeadSQL is ListDead's statement. $1: namespace ("" for all), $2:
// after, $3: limit. Dispatch keys in byte order, served by
// outbox_dead_key_idx.
const listDeadSQL = `
SELECT ` + rowColumns + `
FROM {schema}.outbox o
WHERE o.state = 'dead'
	AND ($1::text = '' OR o.namespace = $1::text)
	AND o.dispatch_key COLLATE "C" > $2::text
ORDER BY o.dispatch_key COLLATE "C"
LIMIT $3::int8`

// requeueSQL is Requeue's statement. $2: dispatch keys, $3: the schema's
// channel: requeued rows are claimable, so subscribers are told, as for an
// enqueue. It returns how many rows moved, whether it notified, and the
// rows' namespace when they share one (for the audit trail).
const requeueSQL = `
WITH moved AS (
	UPDATE {schema}.outbox o SET
		state       = 'pending',
		attempts    = 0,
		visible_at  = coalesce($1::timestamptz, now()),
		finished_at = NULL
	WHERE o.dispatch_key = ANY ($2::text[])
		AND o.state = 'dead'
	RETURNING o.namespace
)
SELECT c.n, (CASE WHEN c.n > 0 THEN pg_notify($3::text, '') END) IS NULL, c.ns
FROM (SELECT count(*) AS n, CASE WHEN count(DISTINCT namespace) = 1 THEN min(namespace) ELSE '' END AS ns FROM moved) c`

// purge is the statement that deletes up to $2 rows in state that
// finished before $1, oldest first: PurgeSettled's, served by
// outbox_settled_idx, and PurgeDead's, by outbox_finished_dead_idx, then
// by ctid (a TID scan of the rows it locked): a ctid array, not a join, so
// that no plan can hash the whole table to find the rows.
func purge(state string) string {
	return `
DELETE FROM {schema}.outbox o
WHERE o.ctid = ANY (ARRAY(
	SELECT p.ctid
	FROM {schema}.outbox p
	WHERE p.state = '` + state + `' AND p.finished_at < $1
	ORDER BY p.finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
))`
}
