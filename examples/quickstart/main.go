// Command quickstart is a service that writes orders and sends an email for
// each, fairly across tenants, with at most 16 handlers at once and at most
// 10 per tenant. It runs on embedded SQLite in a temporary directory and
// stops once every email is sent; a service would run until SIGTERM.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// orderPlaced is an outbox row's payload: what the email needs.
type orderPlaced struct {
	OrderID    string `json:"order_id"`
	Tenant     string `json:"tenant"`
	TotalCents int    `json:"total_cents"`
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, total_cents INTEGER NOT NULL)`); err != nil {
		return err
	}
	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{}) // 64 shards, 30s lease, 25 attempts
	if err != nil {
		return err
	}
	defer store.Close()

	// Producer: each order and its outbox row commit together, or not at all.
	placed := 0
	for _, o := range []orderPlaced{
		{"order-1", "acme", 1999}, {"order-2", "globex", 4500}, {"order-3", "acme", 250},
		{"order-4", "", 990}, // no tenant: the outbox refuses the row, so the order is rolled back too
		{"order-5", "globex", 12000},
	} {
		err := placeOrder(ctx, db, store, o)
		if errors.Is(err, outbox.ErrInvalidMessage) {
			fmt.Printf("%s not placed: its email could not be queued, so the order was rolled back\n", o.OrderID)
			continue
		}
		if err != nil {
			return err
		}
		placed++
	}

	// Dispatcher: this node owns every shard (pgstore's membership shares them out among nodes).
	shards, err := backpressure.AllShards(store.ShardCount())
	if err != nil {
		return err
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, shards)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var sent []string
	handle := dispatch.JSON(func(ctx context.Context, row outbox.Row, o orderPlaced) error {
		// Send the email here: nil settles the row, an error retries it with
		// backoff, dispatch.Permanent(err) dead-letters it.
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, fmt.Sprintf("email to %s: %s, total $%d.%02d", o.Tenant, o.OrderID, o.TotalCents/100, o.TotalCents%100))
		if len(sent) == placed {
			stop() // every email sent; a service stops on SIGTERM (signal.NotifyContext)
		}
		return nil
	})
	d, err := dispatch.New(bp, store, handle, dispatch.Options{Workers: 16})
	if err != nil {
		return err
	}
	if err := d.Run(runCtx); err != nil { // nil after a clean shutdown: every result written
		return err
	}

	slices.Sort(sent) // handlers run concurrently
	for _, s := range sent {
		fmt.Println(s)
	}
	var orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		return err
	}
	st, err := store.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%d orders, %d outbox rows, %d settled\n", orders, st.Total, st.Settled)
	return nil
}

// placeOrder writes the order and its outbox row in one transaction.
func placeOrder(ctx context.Context, db *sql.DB, store *sqlitestore.Store, o orderPlaced) error {
	payload, err := json.Marshal(o)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?, ?)`, o.OrderID, o.Tenant, o.TotalCents); err != nil {
		return err
	}
	if _, err := store.EnqueueTx(ctx, tx, []outbox.Message{{
		DispatchKey: o.OrderID + "/email", Namespace: o.Tenant, TaskQueue: "emails", Payload: payload,
	}}); err != nil {
		return err
	}
	return tx.Commit()
}
