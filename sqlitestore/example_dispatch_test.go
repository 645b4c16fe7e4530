package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// A dispatcher over this store, as in the README's quick start (whole, as
// a program, in examples/quickstart): orders written with their outbox
// rows in one transaction, and a dispatcher that runs them fairly across
// tenants with at most 16 handlers at once and at most 10 per tenant. Here
// the handler stops the dispatcher after the last row; a service stops it
// on SIGTERM.
func Example_dispatch() {
	dir, _ := os.MkdirTemp("", "quickstart")
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{}) // 64 shards, 30s lease, 25 attempts
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, tenant TEXT)`); err != nil {
		panic(err)
	}

	// Producer: each order and its outbox row commit together, or not at all.
	for i, tenant := range []string{"acme", "acme", "globex"} {
		id := fmt.Sprintf("order-%d", i)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?)`, id, tenant)
		if err == nil {
			_, err = store.EnqueueTx(ctx, tx, []outbox.Message{{DispatchKey: id + "/email", Namespace: tenant, TaskQueue: "emails"}})
		}
		if err != nil {
			_ = tx.Rollback()
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
	}

	// Dispatcher: this node owns every shard (see pgstore for many nodes).
	shards, _ := backpressure.AllShards(store.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, shards)
	if err != nil {
		panic(err)
	}
	var ran atomic.Int64
	handle := func(ctx context.Context, row outbox.Row) error {
		// Send the email. An error retries with backoff; dispatch.Permanent(err) dead-letters.
		if ran.Add(1) == 3 {
			stop()
		}
		return nil
	}
	d, err := dispatch.New(bp, store, handle, dispatch.Options{Workers: 16})
	if err != nil {
		panic(err)
	}
	if err := d.Run(ctx); err != nil { // nil after a clean shutdown: results flushed
		panic(err)
	}

	st, _ := store.Stats(context.Background())
	fmt.Printf("ran %d, settled %d of %d\n", ran.Load(), st.Settled, st.Total)
	// Output:
	// ran 3, settled 3 of 3
}
