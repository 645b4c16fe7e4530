package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Enqueue inserts msgs in one statement and one transaction, placing each
// on shard backpressure.ShardFor(DispatchKey, ShardCount); rows get ids in
// batch order, so a batch is claimed oldest first in the order it was
// given. A message whose dispatch key is already in the outbox, whatever
// state that row is in, is ignored (insert-or-ignore), and so is a message
// whose key came earlier in the same batch: the first copy in the batch is
// the one inserted. It returns how many rows it inserted. The batch is
// atomic: on error nothing is inserted.
//
// A message that breaks a limit of [outbox.Message.Validate] fails the
// whole batch with an [*outbox.MessageError] before the database is
// touched. A message's RunAt delays its first claim; its MaxAttempts (0:
// Options.MaxAttempts) bounds its claims. Subscribers (see
// [Store.Subscribe]) are woken when the batch inserted rows. An empty batch
// returns 0 without a round trip. A batch that would leave a namespace over
// its Options.PendingCaps cap fails with an *outbox.PendingCapError
// (matching outbox.ErrPendingCap), nothing inserted. Cost:
// O(len(msgs) × log n).
func (s *Store) Enqueue(ctx context.Context, msgs []outbox.Message) (inserted int, err error) {
	const op = "Enqueue"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	args, err := s.enqueueArgs(op, msgs)
	if err != nil || args == nil {
		return 0, err
	}
	err = s.run(ctx, unsent, func() error {
		if namespaces, caps := s.caps.Capped(msgs); namespaces != nil {
			inserted, err = s.enqueueCapped(ctx, op, msgs, args, namespaces, caps)
			return err
		}
		inserted, err = scanEnqueue(s.pool.QueryRow(ctx, s.sql.enqueue, args...))
		return err
	})
	if s.kept != nil { // committed, or perhaps (err): read their counts again
		s.kept.Touched(namespacesOf(msgs))
	}
	if err != nil {
		return 0, opError(op, err)
	}
	return inserted, nil
}

// EnqueueTx inserts msgs as [Store.Enqueue] does, but in the caller's
// transaction tx, so that a business write and its outbox rows commit or
// roll back together: the rows exist exactly when tx commits. Until then
// they are invisible to every count and claim, which never wait for them;
// if tx rolls back, they never existed. Dedup works inside tx as outside
// it: a key tx already inserted, or that a committed row holds, is
// skipped. (An Enqueue elsewhere of a key tx inserted waits, as any insert
// of a duplicate key does, until tx ends.) Subscribers are woken when tx
// commits (each EnqueueTx that inserted rows sends a notification, all of
// them at the commit, which a subscriber's one-value channel folds).
//
// tx must be a transaction on the store's database and schema; a nil tx is
// an [*outbox.ArgumentError], and so is a tx already committed or rolled
// back. So is a tx on another database, checked by the insert statement
// itself (no extra round trip) against the identity New recorded (the
// database's name, the schema's settings table and its random id): where
// that database has the store's schema, nothing is inserted and tx is
// left as it was, usable; where it lacks the schema or its tables (SQLSTATE
// 3F000, 42P01, 42703), the statement failed, which leaves tx failed, as
// any failed statement in a PostgreSQL transaction does: the caller rolls
// it back. Any other database error leaves tx failed too. A batch refused
// by Options.PendingCaps (an *outbox.PendingCapError) is not a database
// error: tx is left usable, holding none of the batch, and holds the capped
// namespaces' advisory locks until it ends. EnqueueTx never retries: the
// transaction is the caller's.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, msgs []outbox.Message) (inserted int, err error) {
	const op = "EnqueueTx"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, argError(op, "tx", "nil pgx.Tx")
	}
	args, err := s.enqueueArgs(op, msgs)
	if err != nil || args == nil {
		return 0, err
	}
	args = append(args, s.identity.database, s.identity.settings, s.identity.storeID)
	if namespaces, caps := s.caps.Capped(msgs); namespaces != nil {
		inserted, err = s.enqueueCappedTx(ctx, tx, op, args, namespaces, caps)
	} else {
		inserted, err = s.enqueueTxRows(ctx, tx, op, args)
	}
	var (
		capErr *outbox.PendingCapError
		argErr *outbox.ArgumentError
		pe     *pgconn.PgError
	)
	switch {
	case errors.As(err, &capErr), errors.As(err, &argErr):
		return 0, err
	case errors.Is(err, pgx.ErrTxClosed):
		return 0, argError(op, "tx", "the transaction is already committed or rolled back")
	case errors.As(err, &pe) && (pe.Code == "3F000" || pe.Code == "42P01" || pe.Code == "42703"):
		return 0, argError(op, "tx", "is not on the store's database: it has no outbox schema %s (%s); tx is failed, roll it back", pgx.Identifier{s.schema}.Sanitize(), pe.Message)
	case err != nil:
		return 0, opError(op, err)
	}
	return inserted, nil
}

// enqueueTxRows runs EnqueueTx's guarded insert (enqueueTxSQL) on q, the
// caller's transaction or a savepoint in it, and returns the rows inserted,
// or an *outbox.ArgumentError when q is on another database's copy of the
// schema (nothing inserted, q unchanged).
func (s *Store) enqueueTxRows(ctx context.Context, q pgx.Tx, op string, args []any) (int, error) {
	var (
		n        int64
		notified bool
		same     bool
	)
	if err := q.QueryRow(ctx, s.sql.enqueueTx, args...).Scan(&n, &notified, &same); err != nil {
		return 0, err
	}
	if !same {
		return 0, argError(op, "tx", "is not on the store's database: its schema %s is another store's (database, table oid or store id differ); nothing was inserted, tx is unchanged", pgx.Identifier{s.schema}.Sanitize())
	}
	return int(n), nil
}

// enqueueTxSQL is the enqueue statement with EnqueueTx's guard: $12 the
// database's name, $13 the settings table's oid, $14 the store id, as New
// read them (identitySQL). On another database's copy of the schema it
// inserts nothing, notifies nothing, and says so in its third column.
const enqueueTxSQL = `
WITH same AS MATERIALIZED (
	SELECT coalesce((
		SELECT current_database() = $12::text AND s.tableoid = $13::oid AND s.store_id = $14::text
		FROM {schema}.settings s), false) AS ok
),
ins AS (
	INSERT INTO {schema}.outbox (id, dispatch_key, namespace, task_queue, shard, payload, max_attempts, enqueued_at, visible_at, priority, headers)
	SELECT m.id, m.dispatch_key, m.namespace, m.task_queue, m.shard, coalesce(m.payload, '\x'::bytea), m.max_attempts,
		t.now, coalesce(m.run_at, t.now), m.priority, m.headers
	FROM same, (
		SELECT nextval('{schema}.outbox_id_seq') AS id, u.*
		FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::bytea[], $7::timestamptz[], $8::int4[], $10::int2[], $11::jsonb[])
			WITH ORDINALITY AS u (dispatch_key, namespace, task_queue, shard, payload, run_at, max_attempts, priority, headers, ord)
		WHERE (SELECT ok FROM same)
		ORDER BY u.ord
	) m,
		(SELECT coalesce($1::timestamptz, now()) AS now) t
	WHERE same.ok
	ORDER BY m.dispatch_key
	ON CONFLICT (dispatch_key, shard) DO NOTHING
	RETURNING namespace, task_queue, shard, enqueued_at, visible_at
)
SELECT c.n, (CASE WHEN c.n > 0 THEN pg_notify($9::text, ` + notifyPayload + `) END) IS NULL, same.ok
FROM (SELECT count(*) AS n FROM ins) c, same`

// identitySQL reads the identity EnqueueTx checks: the database's name,
// the settings table's oid and the schema's store id.
const identitySQL = `SELECT current_database(), s.tableoid, s.store_id FROM {schema}.settings s`

// enqueueArgs validates msgs and returns the enqueue statement's
// parameters, or nil for an empty batch.
func (s *Store) enqueueArgs(op string, msgs []outbox.Message) ([]any, error) {
	if err := call(op).Messages(msgs); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	var (
		keys     = make([]string, 0, len(msgs))
		spaces   = make([]string, 0, len(msgs))
		queues   = make([]string, 0, len(msgs))
		shards   = make([]int32, 0, len(msgs))
		payloads = make([][]byte, 0, len(msgs))
		runAts   = make([]*time.Time, 0, len(msgs))
		attempts = make([]int32, 0, len(msgs))
		prios    = make([]int16, 0, len(msgs))
		headers  = make([][]byte, 0, len(msgs))
		seen     = make(map[string]struct{}, len(msgs))
	)
	for i := range msgs {
		m := &msgs[i]
		// A key earlier in the batch wins: later copies never reach the
		// statement, whose insert order (by key, for deadlock avoidance)
		// would otherwise decide between them.
		if _, dup := seen[m.DispatchKey]; dup {
			continue
		}
		seen[m.DispatchKey] = struct{}{}
		keys, spaces, queues, payloads = append(keys, m.DispatchKey), append(spaces, m.Namespace), append(queues, m.TaskQueue), append(payloads, m.Payload)
		shards = append(shards, int32(backpressure.ShardFor(m.DispatchKey, s.shardCount)))
		var runAt *time.Time
		if !m.RunAt.IsZero() {
			runAt = &m.RunAt
		}
		runAts = append(runAts, runAt)
		maxAttempts := s.maxAttempts
		if m.MaxAttempts > 0 {
			maxAttempts = m.MaxAttempts // ≤ outbox.MaxAttemptsLimit: validated
		}
		attempts = append(attempts, int32(maxAttempts))
		prios = append(prios, int16(m.Priority))                   // MinPriority..MaxPriority: validated
		headers = append(headers, outbox.EncodeHeaders(m.Headers)) // nil: NULL
	}
	return []any{s.clock(), keys, spaces, queues, shards, payloads, runAts, attempts, s.channel, prios, headers}, nil
}

// scanEnqueue reads the enqueue statement's count.
func scanEnqueue(row pgx.Row) (int, error) {
	var (
		n        int64
		notified bool
	)
	err := row.Scan(&n, &notified)
	return int(n), err
}

// The pending caps (Options.PendingCaps): a capped namespace's enqueue.

// capLockClassSQL is the first key of the advisory locks that serialise the
// producers of a capped namespace: pg_advisory_xact_lock(capLockClassSQL,
// hashtext(schema || '.' || namespace)). Two int4 keys are a lock space of
// their own, apart from the bigint keys of the migrators' lock; two
// namespaces whose hashes collide only wait for each other.
const capLockClassSQL = "1868722275" // 0x6f627063, "obpc"

// capLockSQL locks $2's namespaces in the order given (the caller sorts
// them), $1 the schema.
const capLockSQL = `
SELECT count(pg_advisory_xact_lock(` + capLockClassSQL + `, hashtext($1::text || '.' || u.n)))
FROM (SELECT n FROM unnest($2::text[]) WITH ORDINALITY AS u (n, i) ORDER BY i) u`

// capCountSQL returns the namespaces of $1 holding more unfinished rows than
// their caps $2: per namespace a walk of outbox_route_claimable_idx's
// entries of the namespace (its predicate is the unfinished rows, pending
// and claimed), stopped at the cap + 1.
const capCountSQL = `
SELECT u.n, u.c
FROM unnest($1::text[], $2::int8[]) AS u (n, c)
WHERE (SELECT count(*) FROM (
	SELECT 1 FROM {schema}.outbox o
	WHERE o.namespace = u.n AND o.state IN ('pending', 'claimed')
	LIMIT u.c + 1) x) > u.c
LIMIT 1`

// enqueueCapped is Enqueue for a batch with capped namespaces: in one
// transaction, the locks, the insert, the count; rolled back if a count is
// over its cap.
func (s *Store) enqueueCapped(ctx context.Context, op string, msgs []outbox.Message, args []any, namespaces []string, caps []int) (int, error) {
	var inserted int
	// The guarded insert (enqueueTxSQL) serves both paths; on the store's
	// own pool its identity check always passes.
	args = append(args[:len(args):len(args)], s.identity.database, s.identity.settings, s.identity.storeID)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		inserted, err = s.enqueueCappedTx(ctx, tx, op, args, namespaces, caps)
		return err
	})
	return inserted, err
}

// enqueueCappedTx locks namespaces in tx (until tx ends), then inserts in a
// savepoint and counts; over a cap, it rolls back to the savepoint, so tx
// holds nothing of the batch and stays usable, and returns a
// *outbox.PendingCapError.
func (s *Store) enqueueCappedTx(ctx context.Context, tx pgx.Tx, op string, args []any, namespaces []string, caps []int) (int, error) {
	if _, err := tx.Exec(ctx, capLockSQL, s.schema, namespaces); err != nil {
		return 0, err
	}
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return 0, err
	}
	inserted, err := s.enqueueTxRows(ctx, sp, op, args)
	if err != nil {
		return 0, errors.Join(err, sp.Rollback(context.WithoutCancel(ctx)))
	}
	caps64 := make([]int64, len(caps))
	for i, c := range caps {
		caps64[i] = int64(c)
	}
	var (
		ns  string
		cap int64
	)
	switch err := sp.QueryRow(ctx, s.sql.capCount, namespaces, caps64).Scan(&ns, &cap); {
	case errors.Is(err, pgx.ErrNoRows):
		return inserted, sp.Commit(ctx) // RELEASE
	case err != nil:
		return 0, errors.Join(err, sp.Rollback(context.WithoutCancel(ctx)))
	}
	if err := sp.Rollback(ctx); err != nil {
		return 0, err
	}
	return 0, &outbox.PendingCapError{Op: op, Namespace: ns, Cap: int(cap)}
}
