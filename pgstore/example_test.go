package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// A producer enqueues (a resent key is ignored), a dispatcher node owning
// every shard sweeps with backpressure, and settles what it claimed.
func Example() {
	ctx := context.Background()
	// A schema of its own (here, for a test run that may share the
	// database with others), dropped at the end.
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	schema := "pgstore_example_" + hex.EncodeToString(suffix[:])
	defer adminPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")

	store, err := pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	inserted, err := store.Enqueue(ctx, []outbox.Message{
		{DispatchKey: "order-1/charge", Namespace: "acme", TaskQueue: "payments"},
		{DispatchKey: "order-2/charge", Namespace: "acme", TaskQueue: "payments"},
		{DispatchKey: "order-1/charge", Namespace: "acme", TaskQueue: "payments"}, // resent: ignored
		{DispatchKey: "invite-7/email", Namespace: "globex", TaskQueue: "emails"},
	})
	fmt.Println("inserted:", inserted, err)

	shards, _ := backpressure.AllShards(store.ShardCount())
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 1}, shards)
	rows, _, err := backpressure.Sweep(ctx, bp, store.Claimer())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rows { // acme is at its quota of 1: order-2 waits
		fmt.Println("claimed:", r.DispatchKey, "attempt", r.Attempts, "settle:", store.Settle(ctx, r.Lease()))
	}
	row, _ := store.Get(ctx, "order-2/charge")
	fmt.Println("order-2/charge:", row.State)
	// Output:
	// inserted: 3 <nil>
	// claimed: order-1/charge attempt 1 settle: <nil>
	// claimed: invite-7/email attempt 1 settle: <nil>
	// order-2/charge: pending
}

// A business write and its outbox row in one transaction: the row exists
// exactly when the order does. A dispatcher then claims it and completes
// the batch in one statement.
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	schema := "pgstore_example_" + hex.EncodeToString(suffix[:])
	defer adminPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")

	store, err := pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := adminPool.Exec(ctx, "CREATE TABLE "+orders+" (id int PRIMARY KEY)"); err != nil {
		fmt.Println(err)
		return
	}

	placeOrder := func(id int, fail bool) error {
		return pgx.BeginFunc(ctx, adminPool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id) VALUES ($1)", id); err != nil {
				return err
			}
			if _, err := store.EnqueueTx(ctx, tx, []outbox.Message{
				{DispatchKey: fmt.Sprintf("order-%d/charge", id), Namespace: "acme", TaskQueue: "payments"},
			}); err != nil {
				return err
			}
			if fail {
				return fmt.Errorf("card declined") // rolls back the order and its outbox row
			}
			return nil
		})
	}
	fmt.Println("order 1:", placeOrder(1, false))
	fmt.Println("order 2:", placeOrder(2, true))

	shards, _ := backpressure.AllShards(store.ShardCount())
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 10}, shards)
	rows, _, err := backpressure.Sweep(ctx, bp, store.Claimer())
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make([]outbox.Completion, len(rows))
	for i, r := range rows {
		fmt.Println("claimed:", r.DispatchKey)
		done[i] = outbox.SettleRow(r)
	}
	results, err := store.Complete(ctx, done)
	fmt.Println("completed:", len(results), err, results[0].State)
	// Output:
	// order 1: <nil>
	// order 2: card declined
	// claimed: order-1/charge
	// completed: 1 <nil> settled
}
