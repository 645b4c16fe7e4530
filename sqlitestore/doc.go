// Package sqlitestore is the embedded outbox: a backpressure.OutboxStore on
// SQLite (modernc.org/sqlite, pure Go, no cgo), on a file or in memory.
//
// Quick start:
//
//	ctx := context.Background()
//	store, err := sqlitestore.Open(ctx, "outbox.db", sqlitestore.Options{}) // 64 shards, 30s lease
//	if err != nil { ... }
//	defer store.Close()
//
//	// Producers enqueue; a dispatch key already present is ignored.
//	n, err := store.Enqueue(ctx, []sqlitestore.Message{
//		{DispatchKey: "order-42/email", Namespace: "acme", TaskQueue: "emails", Payload: body},
//	})
//
//	// A dispatcher sweeps fairly over the shards this node owns …
//	shards, _ := backpressure.AllShards(store.ShardCount())
//	bp, _ := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited}, shards)
//	rows, _, err := backpressure.Sweep(ctx, bp, store)
//
//	// … and settles each row it delivered, or retries it later.
//	for _, r := range rows {
//		if deliver(r) == nil {
//			err = store.Settle(ctx, r.DispatchKey, r.Token)
//		} else {
//			err = store.Retry(ctx, r.DispatchKey, r.Token, time.Minute)
//		}
//		// errors.Is(err, sqlitestore.ErrLeaseLost): the lease expired first;
//		// the row is (or will be) claimed again, so do not count it delivered.
//	}
//
// # Semantics
//
// Rows are placed on backpressure.ShardFor(DispatchKey, ShardCount). A row is
// pending until a claim takes it; a claim holds it for Options.Lease under a
// fresh token; Settle (with that token, while the lease is live) settles it
// for good and keeps it for audit; Retry puts it back to pending after a
// delay. A claim whose lease expires without a Settle or Retry gives its rows
// back, so a crashed dispatcher loses nothing; its late Settle then fails
// with ErrLeaseLost and changes nothing. Attempts counts the claims of a row.
// Dispatch keys, namespaces and task queues are valid UTF-8 without NUL
// bytes (Enqueue and ClaimOutboxRowsScoped refuse others with
// ErrInvalidArgument), and a claim names each route at most once.
// The store also implements the optional backpressure.PendingWindowCounter
// ([Store.CountPendingOutboxRowsWindow]), so a sweep over many namespaces
// counts only the routes of the namespaces it can serve, and the optional
// backpressure.TxSweeper ([Store.InSweepTx]), so a whole Sweep is one
// BEGIN IMMEDIATE transaction: its counts and its claim see one state of the
// outbox, and the claim takes the rows the counts found by primary key
// instead of searching each route again. The package passes the storetest
// conformance suite, its window and sweep-transaction checks included.
//
// # Storage
//
// The schema is versioned (outbox_meta.schema_version) and migrated in one
// transaction by Open, so opening is idempotent and an old database is
// upgraded in place; a database from a newer version fails with
// ErrSchemaTooNew. The shard count is recorded at creation and checked on
// every Open and every call. A file database runs in WAL mode with a busy
// timeout; every write is one BEGIN IMMEDIATE transaction on the store's one
// writer connection, and reads use a small pool of read connections.
// Temporary storage is in memory (temp_store=MEMORY): a multi-row claim's
// statement journal, which SQLite keeps inside a write transaction, would
// otherwise spill to a temporary file, costing about a tenth of a claim in
// write system calls. Several processes may share one file. ":memory:" is a
// private database on a single connection, gone at Close.
//
// Each method that reaches the database is one round trip (one statement or
// one transaction); [Store.RoundTrips] counts them.
package sqlitestore
