// Package pgstore is a PostgreSQL outbox for many dispatcher nodes sharing
// one database: a [backpressure.OutboxStore] built on pgx v5's pgxpool.
//
// Quick start:
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/app")
//	if err != nil { ... }
//	defer pool.Close()
//	store, err := pgstore.New(ctx, pool, pgstore.Options{}) // schema "backpressure", 64 shards, 30s lease
//	if err != nil { ... }
//
//	// Producers: insert-or-ignore by dispatch key, one statement per batch.
//	_, err = store.Enqueue(ctx, []pgstore.Message{
//		{DispatchKey: "order-42/charge", Namespace: "acme", TaskQueue: "payments", Payload: body},
//	})
//
//	// Each dispatcher node: the shards it owns, and a planned sweep.
//	shards, err := backpressure.NewOwnedShardFraction(ownedIDs, store.ShardCount())
//	bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, shards)
//	rows, _, err := backpressure.Sweep(ctx, bp, store)
//	for _, r := range rows {
//		if runErr := run(r); runErr != nil {
//			err = store.Retry(ctx, r.DispatchKey, r.Token, 10*time.Second)
//		} else {
//			err = store.Settle(ctx, r.DispatchKey, r.Token) // ErrLeaseLost: another node owns it now
//		}
//	}
//
// # Exactly-once
//
// Every dispatch key is UNIQUE; Enqueue is insert-or-ignore. A claim is one
// statement that locks its rows FOR UPDATE SKIP LOCKED and stamps each with a
// lease and a fresh token from a sequence, so two claimers never both hold a
// live lease on a row. Settle and Retry need the token of the live claim: a
// claimer whose lease expired gets [ErrLeaseLost] and changes nothing.
// A crashed claimer's rows become claimable when their lease expires, and
// each claim counts an attempt. Settled rows are kept, for dedup and audit,
// until [Store.PurgeSettled] removes them.
//
// # Schema and statements
//
// All objects live in Options.Schema (validated as an identifier, then
// quoted; it is the only text ever pasted into SQL — every value is a
// parameter). New creates and migrates them idempotently, versioned, under a
// transaction-scoped advisory lock, so many nodes may start at once.
//
//	outbox (id, dispatch_key UNIQUE, namespace, task_queue, shard, payload,
//	        state, attempts, token, enqueued_at, visible_at, claimed_at,
//	        lease_expires_at, settled_at,
//	        claimable_at GENERATED: visible_at if pending, lease_expires_at if claimed)
//	outbox_route_oldest_idx (namespace, task_queue, enqueued_at, id) INCLUDE (shard, claimable_at)
//	                        WHERE state <> 'settled'  -- scoped claims, pending counts
//	outbox_oldest_idx       (enqueued_at, id) INCLUDE (shard, claimable_at)
//	                        WHERE state <> 'settled'  -- the unscoped claim
//	outbox_live_lease_idx   (lease_expires_at) INCLUDE (namespace, shard)
//	                        WHERE state = 'claimed'   -- claimed counts
//	outbox_settled_idx      (settled_at) WHERE state = 'settled'  -- PurgeSettled
//
// The scoped claim is ONE statement for all scopes: unnest of the routes and
// limits, and per scope a LATERAL subquery that walks outbox_route_oldest_idx
// oldest first, filters the owned shards (shard = ANY($n)) and claimable
// rows, and locks at most its limit FOR UPDATE SKIP LOCKED. Pending counts
// find the routes with a loose index scan (a recursive CTE, one index
// descent per route) and count each over a subquery LIMITed to the cap, so
// no call ever counts a whole backlog. explain_test.go checks with EXPLAIN
// that each statement uses its index; EXPLAIN.md shows the plans.
//
// # Testing
//
// The tests need a PostgreSQL: TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Each test runs in
// a schema of its own, dropped afterwards. Without a reachable database the
// tests skip, saying so in one line, unless PGSTORE_REQUIRE=1, which makes
// them fail.
package pgstore
