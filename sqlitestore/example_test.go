package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// A business write and its outbox row in one transaction: the row exists
// exactly when the order does. A dispatcher then sweeps fairly and
// completes what it ran in one batch.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)

	// The application's own database: WAL, a busy timeout, and immediate
	// transactions (see New).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)`); err != nil {
		panic(err)
	}
	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	// Producer: the order and its outbox row commit together.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('order-42', 1999)`); err != nil {
		panic(err)
	}
	if _, err := store.EnqueueTx(ctx, tx, []outbox.Message{
		{DispatchKey: "order-42/email", Namespace: "acme", TaskQueue: "emails", Payload: []byte("order-42")},
	}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// Dispatcher: sweep the shards this node owns, run, complete in one batch.
	shards, _ := backpressure.AllShards(store.ShardCount())
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited}, shards)
	rows, _, err := backpressure.Sweep(ctx, bp, store.Claimer())
	if err != nil {
		panic(err)
	}
	var done []outbox.Completion
	for _, r := range rows {
		fmt.Printf("deliver %s to %s: %s\n", r.DispatchKey, r.Route(), r.Payload)
		done = append(done, outbox.SettleRow(r))
	}
	results, err := store.Complete(ctx, done)
	if err != nil {
		panic(err)
	}
	for i, res := range results {
		fmt.Println(rows[i].DispatchKey, res.State, res.Err)
	}
	stats, _ := store.Stats(ctx)
	fmt.Printf("settled %d of %d\n", stats.Settled, stats.Total)
	// Output:
	// deliver order-42/email to acme/emails: order-42
	// order-42/email settled <nil>
	// settled 1 of 1
}
