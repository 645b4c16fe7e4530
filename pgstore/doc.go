// Package pgstore is a PostgreSQL outbox for many dispatcher nodes sharing
// one database: an [outbox.Store] built on pgx v5's pgxpool.
//
// Quick start: a producer writes its business row and its outbox row in
// one transaction, so the outbox row exists exactly when the business row
// does; a dispatcher node sweeps with backpressure and completes what it
// ran in one batch.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/app")
//	if err != nil { ... }
//	defer pool.Close()
//	store, err := pgstore.New(ctx, pool, pgstore.Options{}) // schema "backpressure", 64 shards when new, 30s lease, 25 attempts
//	if err != nil { ... }
//
//	// Producer: the order and its outbox row commit (or roll back) together.
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", 42, 1999); err != nil {
//			return err
//		}
//		_, err := store.EnqueueTx(ctx, tx, []outbox.Message{
//			{DispatchKey: "order-42/charge", Namespace: "acme", TaskQueue: "payments", Payload: body},
//		})
//		return err
//	})
//
//	// Each dispatcher node: the shards it owns, a planned sweep, one batched completion.
//	shards, err := backpressure.NewOwnedShardFraction(ownedIDs, store.ShardCount())
//	bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, shards)
//	wake, err := store.Subscribe(ctx) // a value soon after rows commit
//	for {
//		rows, _, err := backpressure.Sweep(ctx, bp, store.Claimer())
//		done := make([]outbox.Completion, len(rows))
//		for i, r := range rows {
//			if runErr := run(r); runErr != nil {
//				done[i] = outbox.RetryRow(r, 10*time.Second, runErr) // dead after MaxAttempts
//			} else {
//				done[i] = outbox.SettleRow(r)
//			}
//		}
//		results, err := store.Complete(ctx, done) // one statement; results[i].Err: lease lost
//		if len(rows) == 0 {
//			select { case <-wake: case <-time.After(time.Second): } // poll as a fallback
//		}
//	}
//
// The planner's counts and claim are on [Store.Claimer], not on the Store:
// an application enqueues, completes and inspects rows; only a sweep counts
// and claims them. dispatch.New takes the Store itself and sweeps through
// its Claimer.
//
// # Exactly-once settling, at-least-once execution
//
// A handler can run again after a crash or a lost lease: execution is at
// least once, so a handler's effect must be idempotent (the README's "At
// least once" shows how, with the dispatch key and the claim token).
// Settling, dedup and dead-lettering happen once, fenced by the claim token:
//
// Every dispatch key is unique (the primary key is (dispatch_key, shard),
// and a key's shard is a function of the key and the recorded shard
// count, which never changes); Enqueue and EnqueueTx are insert-or-ignore.
// A claim is one statement that locks its rows FOR UPDATE SKIP LOCKED and
// stamps each with a lease and a fresh token from a sequence, so two
// claimers never both hold a live lease on a row. Complete (and Settle,
// Retry, ExtendLeases) need the token of the live claim: a claimer whose
// lease expired gets [outbox.ErrLeaseLost] for that row and changes
// nothing. A crashed claimer's rows become claimable when their lease
// expires, and each claim counts an attempt; a Retry past the row's
// MaxAttempts, or a DeadLetter, makes it dead: never claimed again until
// [Store.Requeue]. Settled and dead rows are kept, for dedup and audit,
// until [Store.PurgeSettled] and [Store.PurgeDead] remove them. If a
// claim's ctx is cancelled, or its connection dies, after the server
// committed the claim, the call returns an error though the rows were
// claimed; nobody holds their tokens, so they stay claimed, unsettled,
// until the lease expires, and then are claimed again (see "Lost
// connections" on [Store]).
//
// Rows enqueued with EnqueueTx are invisible to every count and claim until
// the caller's transaction commits, and never make a sweep wait: the counts
// read a snapshot, and the claims skip what they cannot see. A Message's
// RunAt delays its first claim as a retry delay does.
//
// The shard count rows are placed with is recorded in the schema when it is
// created and never changes: every store on the schema uses it, and New
// refuses an Options.ShardCount that differs (see [Options.ShardCount]).
//
// # Schema and statements
//
// All objects live in Options.Schema (validated as an identifier, then
// quoted; it is the only text ever pasted into SQL — every value is a
// parameter). New reads the schema's version first: a schema at
// [SchemaVersion] is used as it is, with no lock and no DDL (so the
// application's role needs no CREATE privilege); a missing or older one is
// created and migrated idempotently, versioned, under a transaction-scoped
// advisory lock, so many nodes may start at once.
//
// The tables, their indexes and how each statement uses them are described
// in docs/pgstore.md; the cost notes on each method state what a call
// reads.
//
// # Many nodes: membership with fenced ownership (optional)
//
// Nodes that have a control plane pass their owned shards to
// backpressure.New and SetOwnedShards as before. Nodes that have none can
// join a membership kept in the schema: [Store.Join] returns a
// [Membership] whose heartbeats renew a member lease,
// assign the shards over the live members by rendezvous hashing
// ([AssignShards]: a join or a leave moves about 1/n of them), and take,
// renew or release the node's shards. Every lease is judged by the
// database's clock, never the nodes'. Each node then sweeps through
// [Membership.Store], whose claims are fenced, and applies its owned set
// with [Membership.Follow]:
//
//	store, err := pgstore.Open(ctx, url, pgstore.Options{}) // claim lease 30s
//	m, err := store.Join(ctx, pgstore.MembershipOptions{}) // lease 45s, heartbeat every 11.25s
//	defer m.Leave(context.Background())
//	bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, m.Owned())
//	go m.Follow(ctx, bp) // SetOwnedShards at every change
//	d, err := dispatch.New(bp, m.Store(), handler, dispatch.Options{Workers: 32})
//	err = d.Run(ctx)
//
// Fencing: each shard has one ownership row (owner, epoch, lease); an
// acquisition increments the epoch, and happens only once the previous
// owner released the shard or its lease expired. A fenced claim checks,
// inside the claim statement and at its instant, that the node owns each
// shard it claims on, at the epoch it acquired, under a live lease; so a
// node paused or cut off past its lease claims nothing even before it
// notices, and no two nodes ever claim on one shard at the same time. The
// claimed counts are per shard, whoever claimed the rows, so a new owner's
// headroom includes the rows the previous owner still runs, and each
// namespace's rows running cluster-wide stay within the sum of the current
// owners' ceilings. Keep the membership lease at least the claim lease plus
// a heartbeat, so that a node that dies keeps its shards, and its ceiling,
// until its claimed rows' leases run out. A node drains a shard it is no
// longer assigned for one heartbeat (no claims on it, out of its owned set)
// before releasing it. After a crash, the dead node's
// shards move within a membership lease and a heartbeat; after a join,
// within a few heartbeats. A node name is held by one live member at a
// time: a second Join under it fails with [ErrNodeNameInUse] until the
// first leaves or lapses. A node's own view ([Membership.Owned]) lapses a
// membership lease after its last confirmed heartbeat was sent, so it never
// names a shard the database no longer gives it. Tables: members (node,
// joined_at, lease_expires_at, incarnation), shard_owners (shard, owner, epoch, lease_expires_at),
// shard_epochs (shard, epoch, owner, acquired_at: every acquisition, for
// audit).
//
// # Wake-ups
//
// The enqueue statement (and Requeue's) calls pg_notify on a channel named
// after the schema when it inserted rows, with what it inserted as the
// payload: its transaction's id and, per route and shard, the rows
// claimable at once and the earliest run-at of the others (a JSON object;
// the JSON array of the namespaces when that would pass 7,000 bytes, and
// empty beyond; Requeue's is always empty: any namespace). PostgreSQL
// delivers a notification only when its transaction commits, all of a
// transaction's at once, so a bulk enqueue wakes dispatchers once, and
// many EnqueueTx calls in one transaction send one notification each but
// at the same instant, which a subscriber's channel (one value) folds into
// a wake-up or two. [Store.Subscribe] serves them through one listening
// connection per Store.
//
// # Kept counts
//
// With Options.RecountInterval positive (off by default: on a plain
// trickle they save a round trip per wake-up but about even CPU; beside
// many namespaces holding delayed rows they halve the counts' cost), a
// Store answers the planner's
// counts (CountClaimedOutboxRows,
// CountPendingOutboxRows, CountOutboxRows) without a statement when
// nothing can have changed them since it last read them: it keeps them
// from what its own claims, completions and enqueues return, and from the
// notifications it hears while a subscriber listens ([Store.Subscribe]),
// which carry the rows each enqueue added per route and its transaction's
// id: it adds them without a read unless its last read's snapshot, or a
// claim's since, saw that transaction, and then reads only that
// namespace's counts. A count it cannot know exactly is read: claimed
// counts always exact, pending counts kept only while it listens (another
// process's enqueue may be missing from them until its notification
// arrives, as from a count read a moment earlier), never past a lease's
// end or a delayed row's run-at, and read whole at least every
// Options.RecountInterval. Kept counts assume, as the planner does, that
// only this node claims on its shards and that rows are completed through
// the Store that claimed them; a change made to the outbox outside the
// store's calls (SQL of one's own, an operator tool's requeue in another
// process) is seen within RecountInterval. A Membership's fenced store
// ([Membership.Store]) keeps nothing. Mechanism and figures:
// docs/pgstore.md, "Kept counts".
// explain_test.go checks with EXPLAIN that each statement uses its index,
// and that the count's claimable_at is an index bound, with a route whose
// backlog is mostly delayed; EXPLAIN.md shows the plans.
//
// # Large backlogs and JIT
//
// The claims, the pending counts and [Store.PurgeSettled] run with JIT off
// for their own implicit transaction, leaving the session's setting alone:
// their estimated cost grows with the backlog, and compiling would cost
// more than the work (figures in docs/pgstore.md). [Open] also runs its
// pool's sessions with jit = off, unless its URL sets jit.
//
// # Testing
//
// The tests need a PostgreSQL: TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Each test runs in
// a schema of its own, dropped afterwards. Without a reachable database the
// tests skip, saying so in one line, unless PGSTORE_REQUIRE=1, which makes
// them fail.
//
// What is exported, and why: [Open] (a pool the store owns) and [New] (an
// application's pool), configured by [Options] with [DefaultSchema] and
// [DefaultShardCount] as its zero values, return the [Store], whose
// planner-facing counts and claim are on [Store.Claimer]; [SchemaVersion]
// is the schema this package migrates to, for operators comparing
// databases. [Membership] with [MembershipOptions] is the optional fenced
// shard ownership for users without a membership of their own, and
// [AssignShards] the assignment rule it applies, exported so that an
// operator can predict it; [MaxNodeBytes] bounds a node name. Errors are
// package outbox's or backpressure's.
package pgstore
