// Package sqlitestore is the embedded outbox: an outbox.Store on SQLite
// (modernc.org/sqlite, pure Go, no cgo), on a file or in memory. It is
// single-node: one dispatcher process owns every shard; for many nodes with
// membership and fenced ownership, use pgstore.
//
// Most applications open their own database and build the store on it with
// [New], so a business write and its outbox row commit in one transaction
// ([Store.EnqueueTx]); a dispatcher sweeps with backpressure.Sweep and
// completes what it ran in one batch ([Store.Complete]):
//
//	db, _ := sql.Open("sqlite", "file:app.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
//	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{}) // 64 shards, 30s lease, 25 attempts
//
//	// Producer: the order and its outbox row exist together or not at all.
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?)`, id, total)
//	store.EnqueueTx(ctx, tx, []outbox.Message{{DispatchKey: id + "/email", Namespace: "acme", TaskQueue: "emails", Payload: body}})
//	err = tx.Commit()
//
//	// Dispatcher: a fair sweep over the shards this node owns, then one batch.
//	rows, _, err := backpressure.Sweep(ctx, bp, store.Claimer())
//	for _, r := range rows { done = append(done, run(r)) } // outbox.SettleRow(r), RetryRow, DeadLetterRow
//	results, err := store.Complete(ctx, done)             // one statement, one commit
//
// [Open] opens a file the store owns alone (or ":memory:"), with
// [Store.Enqueue] for producers that need no transaction of their own; a
// runnable version of the above is the package example.
//
// # Semantics
//
// Rows are placed on backpressure.ShardFor(DispatchKey, ShardCount). A row
// is pending until a claim takes it (once its RunAt has come); a claim
// holds it for Options.Lease under a fresh token; a completion fenced by
// that token while the lease is live settles it (kept for dedup and audit
// until purged), retries it after a delay (recording the error), or
// dead-letters it. A retry of a row that has had its MaxAttempts claims
// dead-letters it instead. A dead row is never claimed again until
// [Store.Requeue]. A claim whose lease expires without a completion or an
// extension ([Store.ExtendLeases]) gives its rows back, so a crashed
// dispatcher loses nothing; its late completion then reports
// outbox.ErrLeaseLost for that row and changes nothing. Errors are the
// outbox package's (errors.Is and errors.As), plus [ErrReadOnly].
//
// The planner's counts and claim are on [Store.Claimer], not on the Store:
// an application enqueues, completes and inspects rows; only a sweep counts
// and claims them. The Claimer implements the optional
// backpressure.Counter for windows and full counts (not the claimed
// counts), so a sweep over many namespaces counts only the routes of the
// namespaces it can serve, and backpressure.TxSweeper, so a whole Sweep is
// one write transaction whose counts and claim see one state of the
// outbox. The Store implements outbox.Notifier ([Store.Subscribe]). It
// passes the storetest conformance suite.
//
// # Storage
//
// The schema is versioned (outbox_meta.schema_version). Open and New read
// the version first and migrate, in one write transaction, only when the
// database is new or older, so opening a current database never waits for
// the write lock; an old database is upgraded in place, and one from a
// newer version fails with an *outbox.SchemaVersionError. The shard count
// is recorded at creation and checked on every Open and every call. A file
// database runs in WAL mode with a busy timeout: reads (the counts, Get,
// Stats, ListDead) never wait for a writer, and every write is one
// transaction holding SQLite's write lock from its first statement. A store
// from Open writes on one connection and reads on a small pool (temporary
// storage in memory: a multi-row claim's statement journal would otherwise
// spill to a file); Options.ReadOnly opens a file for inspection. Several
// processes may share one file. ":memory:" is a private database on a
// single connection, gone at Close.
//
// SQLite has one writer at a time: while any transaction holds the write
// lock (an application transaction that called EnqueueTx, say), every
// claim and completion waits for it, up to the busy timeout; see
// [Store.EnqueueTx].
//
// Each method that reaches the database is one round trip (one statement or
// one transaction).
//
// # Kept counts
//
// With Options.RecountInterval positive (Open only; off by default), the
// Claimer answers the planner's counts (CountClaimedOutboxRows,
// CountPendingOutboxRows, CountOutboxRows, on the Claimer and in a sweep
// transaction) from counts it keeps, when nothing can have changed them
// since it last read them: it learns from its own claims, completions,
// enqueues and requeues what they changed, and reads again only the
// namespaces that got rows, never past a lease's end or a delayed row's
// run-at, and all of them at least every RecountInterval. A sweep
// transaction's claims count only once it commits. Every answer equals
// what a full count would return at that instant: before answering, the
// store asks SQLite (PRAGMA data_version on its writer connection, which
// costs no read of the outbox) whether any other connection committed —
// another Store, another process, an application's transaction that
// called EnqueueTx — and if one did it reads everything again. They pay
// beside many namespaces holding delayed rows (retries, schedules): the
// full count walks every route, the kept read only those enqueued into.
// Mechanism and figures: docs/sqlitestore.md.
//
// What is exported, and why: [Open] (a file the store owns) and [New] (an
// application's *sql.DB, for enqueueing in its own transactions), both
// configured by [Options], return the [Store]; its methods are the outbox
// contracts of package outbox, with the planner's counts and claim on
// [Store.Claimer]. [ErrReadOnly] and [ErrSweepTxDone] are this store's own
// conditions; every other error is package outbox's or backpressure's.
package sqlitestore
