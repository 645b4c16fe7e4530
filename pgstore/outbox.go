package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
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
// commits, once per transaction.
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

// enqueueTxSQL is the enqueue statement with EnqueueTx's guard: $11 the
// database's name, $12 the settings table's oid, $13 the store id, as New
// read them (identitySQL). On another database's copy of the schema it
// inserts nothing, notifies nothing, and says so in its third column.
const enqueueTxSQL = `
WITH same AS MATERIALIZED (
	SELECT coalesce((
		SELECT current_database() = $11::text AND s.tableoid = $12::oid AND s.store_id = $13::text
		FROM {schema}.settings s), false) AS ok
),
ins AS (
	INSERT INTO {schema}.outbox (id, dispatch_key, namespace, task_queue, shard, payload, max_attempts, enqueued_at, visible_at, priority)
	SELECT m.id, m.dispatch_key, m.namespace, m.task_queue, m.shard, coalesce(m.payload, '\x'::bytea), m.max_attempts,
		t.now, coalesce(m.run_at, t.now), m.priority
	FROM same, (
		SELECT nextval('{schema}.outbox_id_seq') AS id, u.*
		FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::bytea[], $7::timestamptz[], $8::int4[], $10::int2[])
			WITH ORDINALITY AS u (dispatch_key, namespace, task_queue, shard, payload, run_at, max_attempts, priority, ord)
		WHERE (SELECT ok FROM same)
		ORDER BY u.ord
	) m,
		(SELECT coalesce($1::timestamptz, now()) AS now) t
	WHERE same.ok
	ORDER BY m.dispatch_key
	ON CONFLICT (dispatch_key) DO NOTHING
	RETURNING 1
)
SELECT c.n, (CASE WHEN c.n > 0 THEN pg_notify($9::text, '') END) IS NULL, same.ok
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
		prios = append(prios, int16(m.Priority)) // MinPriority..MaxPriority: validated
	}
	return []any{s.clock(), keys, spaces, queues, shards, payloads, runAts, attempts, s.channel, prios}, nil
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

// CountClaimedOutboxRows returns, per namespace, the rows on the owned
// shards whose lease is live now. It reads only the live-lease index, so its
// cost is O(claimed rows), however large the backlog. See
// [backpressure.OutboxStore].
func (c *claimer) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	s := (*Store)(c)
	const op = "CountClaimedOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	var claimed map[string]int
	if err := s.run(ctx, anyLoss, func() error {
		claimed = make(map[string]int)
		rows, err := s.pool.Query(ctx, s.sql.countClaimed, s.clock(), owned, all)
		if err != nil {
			return err
		}
		var (
			namespace string
			n         int64
		)
		_, err = pgx.ForEachRow(rows, []any{&namespace, &n}, func() error {
			claimed[namespace] = int(n)
			return nil
		})
		return err
	}); err != nil {
		return nil, opError(op, err)
	}
	return claimed, nil
}

// CountPendingOutboxRows returns the claimable rows (visible pending rows and
// rows whose lease expired) per route on the owned shards, each count capped
// at capPerRoute, in (namespace, task queue) order. Routes with none are
// left out. Cost: one index descent per route with unsettled rows, which
// finds the route and its earliest claimable time; a route whose rows are
// all delayed or leased costs no more. Per route with a claimable row, an
// index range over its claimable rows only — claimable_at ≤ now is a bound
// of the range, so rows in retry back-off and rows under a live lease are
// never read — that stops at the capPerRoute-th claimable row on the owned
// shards; the claimable rows on other shards met before then are read and
// skipped. Never the whole backlog. See [backpressure.OutboxStore].
func (c *claimer) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	s := (*Store)(c)
	const op = "CountPendingOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := call(op).Positive("capPerRoute", capPerRoute); err != nil {
		return nil, err
	}
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	counts, err := collectNoJIT(ctx, s, anyLoss, s.sql.countPending, []any{s.clock(), owned, int64(capPerRoute), all}, scanRouteCount)
	if err != nil {
		return nil, opError(op, err)
	}
	return counts, nil
}

// CountOutboxRows returns, in one statement (one round trip, one
// snapshot), the pending counts p describes and, when p.Claimed, what
// CountClaimedOutboxRows returns (see [backpressure.Counter]; it
// serves every CountParams). [backpressure.Sweep] uses it to count only the
// namespaces it can serve, and to make a sweep's counts one round trip
// rather than two.
//
// With p.Namespaces 0 the pending counts are what
// CountPendingOutboxRows returns for p.CapPerRoute, at its cost, and
// p.After is ignored. With p.Namespaces ≥ 1 they are those of a window:
// walking the namespaces in ascending byte order from the first one above
// p.After, wrapping around to the smallest, the first p.Namespaces of them
// with at least one claimable row on the owned shards, each with all its
// routes that have claimable rows, each count capped at p.CapPerRoute, in
// (namespace, task queue) order. Namespaces are compared in byte order, as
// the contract asks, whatever the database's collation: the namespace and
// task_queue columns are COLLATE "C" (schema version 3).
//
// A p.CapPerRoute below 1 or a negative p.Namespaces is an
// [*outbox.ArgumentError]; for a window, p.After must be valid UTF-8
// without NUL bytes (it may be empty).
//
// A window's cost: one index descent per route of the namespaces walked,
// plus, per route with a claimable row, the capped range of
// CountPendingOutboxRows — skipped when p.CapPerRoute is 1, as a
// sweep's window asks, and the route's earliest claimable row, which the
// descent found, is on an owned shard (always, on a node that owns every
// shard). The walk stops at the p.Namespaces-th namespace with claimable
// rows, so it reads the window's namespaces and those between them with
// none claimable, never the routes of the namespaces beyond the window.
// The claimed counts add the cost of CountClaimedOutboxRows.
func (c *claimer) CountOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, p backpressure.CountParams) (claimed map[string]int, pending []backpressure.RouteCount, err error) {
	s := (*Store)(c)
	const op = "CountOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, nil, err
	}
	args, err := s.countArgs(op, shards, p)
	if err != nil {
		return nil, nil, err
	}
	if !p.Claimed {
		sql := s.sql.countPending
		if p.Namespaces > 0 {
			sql = s.sql.countPendingWindow
		}
		pending, err := collectNoJIT(ctx, s, anyLoss, sql, args, scanRouteCount)
		if err != nil {
			return nil, nil, opError(op, err)
		}
		return nil, pending, nil
	}
	sql := s.sql.sweepCount
	if p.Namespaces > 0 {
		sql = s.sql.sweepCountWindow
	}
	var (
		kind int32
		rc   backpressure.RouteCount
		n    int64
	)
	if err := s.queryNoJIT(ctx, anyLoss, sql, args, func(rows pgx.Rows) error {
		claimed, pending = make(map[string]int), nil
		_, err := pgx.ForEachRow(rows, []any{&kind, &rc.Route.Namespace, &rc.Route.TaskQueue, &n}, func() error {
			if kind == 0 {
				claimed[rc.Route.Namespace] = int(n)
			} else {
				rc.Count = int(n)
				pending = append(pending, rc)
			}
			return nil
		})
		return err
	}); err != nil {
		return nil, nil, opError(op, err)
	}
	return claimed, pending, nil
}

// countArgs validates p for op and returns the parameters of the count
// statements that take CountParams: $1 the clock, $2 the owned shards, $3
// the cap, then, for a window (p.Namespaces > 0), $4 After and $5
// Namespaces, and last the flag that every shard is owned.
func (s *Store) countArgs(op string, shards backpressure.OwnedShardFraction, p backpressure.CountParams) ([]any, error) {
	if err := call(op).CountParams(p); err != nil {
		return nil, err
	}
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	args := []any{s.clock(), owned, int64(p.CapPerRoute)}
	if p.Namespaces > 0 {
		args = append(args, p.After, int64(p.Namespaces))
	}
	return append(args, all), nil
}

// scanRouteCount scans a (namespace, task queue, count) row.
func scanRouteCount(row pgx.CollectableRow) (backpressure.RouteCount, error) {
	var (
		rc backpressure.RouteCount
		n  int64
	)
	err := row.Scan(&rc.Route.Namespace, &rc.Route.TaskQueue, &n)
	rc.Count = int(n)
	return rc, err
}

// ClaimOutboxRowsScoped claims, in one statement across all scopes, at most
// each claim's Limit claimable rows of its route on the owned shards,
// highest Message.Priority first, then oldest, skipping rows another claimer holds locked (FOR UPDATE SKIP
// LOCKED). Each claimed row gets a fresh token, one more attempt and a lease
// of Options.Lease. The statement is atomic: on error nothing is claimed.
// Rows come back grouped by claim, in the claims' order, highest priority
// first, then oldest, within a route.
//
// A Limit below 1, a route backpressure.Route.Validate refuses, or a route
// named twice is an [*outbox.ArgumentError] (checked by internal/validate,
// before any round trip), and claims nothing. An empty claim list, or no
// shard owned, returns an empty slice without a round trip.
//
// Cost: per scope, one walk of its route's unsettled rows in enqueue order
// from the oldest until Limit claimable rows on the owned shards are found.
// Oldest first means the walk reads, and skips, every older row of the
// route that is not claimable now — rows in retry back-off, rows under a
// live lease, rows on other nodes' shards — so a route whose oldest rows
// are a large delayed backlog costs that backlog on every claim of it,
// though the pending count of the route does not read it.
//
// If ctx is cancelled while the statement runs, the claim is either rolled
// back or, if the server committed it before the cancellation arrived,
// kept: the call may then return ctx's error although rows were claimed.
// Such rows are not lost: no one can settle them without their tokens, and
// they are claimable again when their lease expires.
func (c *claimer) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	s := (*Store)(c)
	const op = "ClaimOutboxRowsScoped"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	owned, all, none, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	if err := call(op).Claims(claims); err != nil {
		return nil, err
	}
	var (
		spaces = make([]string, len(claims))
		queues = make([]string, len(claims))
		limits = make([]int64, len(claims))
		order  = make(map[backpressure.Route]int, len(claims))
	)
	for i, c := range claims {
		spaces[i], queues[i], limits[i] = c.Route.Namespace, c.Route.TaskQueue, int64(c.Limit)
		order[c.Route] = i
	}
	if len(claims) == 0 || none {
		return []outbox.Row{}, nil
	}
	claimed, err := s.claim(ctx, op, s.sql.claimScoped, owned, spaces, queues, limits, all)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(claimed, func(a, b outbox.Row) int {
		ra := order[backpressure.Route{Namespace: a.Namespace, TaskQueue: a.TaskQueue}]
		rb := order[backpressure.Route{Namespace: b.Namespace, TaskQueue: b.TaskQueue}]
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(b.Priority, a.Priority), a.EnqueuedAt.Compare(b.EnqueuedAt), cmp.Compare(a.ID, b.ID))
	})
	return claimed, nil
}

// ClaimOutboxRowsUnscoped claims at most limit claimable rows on the owned
// shards, oldest first whatever their namespace: the claim a dispatcher
// without backpressure makes, kept as the baseline the fair sweep is
// measured against. Leases, tokens and atomicity are as for
// ClaimOutboxRowsScoped, and so is a cancelled ctx. Rows come back
// oldest first. Cost: one walk of the unsettled rows in enqueue order until
// limit claimable owned rows are found, reading and skipping the older rows
// that are delayed, leased or on other shards.
func (c *claimer) ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error) {
	s := (*Store)(c)
	const op = "ClaimOutboxRowsUnscoped"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := call(op).Positive("limit", limit); err != nil {
		return nil, err
	}
	owned, all, none, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, err
	}
	if none {
		return []outbox.Row{}, nil
	}
	claimed, err := s.claim(ctx, op, s.sql.claimUnscoped, owned, int64(limit), all)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(claimed, func(a, b outbox.Row) int { return cmp.Or(a.EnqueuedAt.Compare(b.EnqueuedAt), cmp.Compare(a.ID, b.ID)) })
	return claimed, nil
}

// claim runs one of the claim statements, whose parameters are the clock,
// the lease, the owned shards and then args.
// A Membership's store claims with the fenced form of the statement, only
// on the shards it holds (see [Membership.fence]); if it holds none of
// them, it claims nothing without a round trip.
func (s *Store) claim(ctx context.Context, op, sql string, owned []int32, args ...any) ([]outbox.Row, error) {
	params := append([]any{s.clock(), s.lease.Microseconds(), owned}, args...)
	if s.fence != nil {
		var ok bool
		if sql, params, ok = s.fence.fence(&s.sql, sql, params); !ok {
			return nil, nil
		}
	}
	claimed, err := collectNoJIT(ctx, s, anyLoss, sql, params,
		func(row pgx.CollectableRow) (outbox.Row, error) { return scanRow(row) })
	if err != nil {
		return nil, opError(op, err)
	}
	return claimed, nil
}

// noJIT turns JIT off for the rest of the implicit transaction it runs in.
// set_config with is_local, not SET LOCAL: SET LOCAL outside an explicit
// transaction block logs a warning on every call.
const noJIT = `SELECT set_config('jit', 'off', true)`

// batchNoJIT runs sql with args with JIT off, and run on its results:
// noJIT and sql go as one batch, one round trip, and run in one implicit
// transaction, so the setting ends with it and the pool's session keeps its
// own. The claims, the pending counts and PurgeSettled run this way. Their
// row limits are parameters the planner estimates at a tenth of a route or
// of an index, so with a large backlog their estimated cost passes
// jit_above_cost, and PostgreSQL would compile each call: at 2,000,000
// unsettled rows in 20 routes, about 15 ms for a claim whose work takes 4–5
// ms. JIT is decided when a plan is made but compiled when the executor
// starts, so turning it off also stops a cached generic plan that was made
// with it on.
//
// again says whether the batch may run a second time after a lost
// connection (see [Store.run]).
func (s *Store) batchNoJIT(ctx context.Context, again bool, sql string, args []any, read func(pgx.BatchResults) error) error {
	return s.run(ctx, again, func() error { return s.batchNoJITOnce(ctx, sql, args, read) })
}

func (s *Store) batchNoJITOnce(ctx context.Context, sql string, args []any, run func(pgx.BatchResults) error) (err error) {
	b := &pgx.Batch{}
	b.Queue(noJIT)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		// Always, even if run panics: closing releases the connection.
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err = br.Exec(); err != nil {
		return err
	}
	return run(br)
}

// queryNoJIT is batchNoJIT for a statement that returns rows, read by read.
func (s *Store) queryNoJIT(ctx context.Context, again bool, sql string, args []any, read func(pgx.Rows) error) error {
	return s.batchNoJIT(ctx, again, sql, args, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		return read(rows)
	})
}

// collectNoJIT is queryNoJIT collecting each row with fn.
func collectNoJIT[T any](ctx context.Context, s *Store, again bool, sql string, args []any, fn pgx.RowToFunc[T]) ([]T, error) {
	var out []T
	err := s.queryNoJIT(ctx, again, sql, args, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, fn)
		return err
	})
	return out, err
}
