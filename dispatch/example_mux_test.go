package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// A Mux sends each row to the handler of its task queue; a row on a task
// queue nobody handles is dead-lettered at once, with an error that says
// so.
func ExampleMux() {
	store, _ := memstore.New(memstore.Options{}) // or sqlitestore, pgstore
	defer store.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	_, _ = store.Enqueue(ctx, []outbox.Message{
		{DispatchKey: "order-1/email", Namespace: "acme", TaskQueue: "emails"},
		{DispatchKey: "invoice-7", Namespace: "globex", TaskQueue: "invoices"},
		{DispatchKey: "order-1/sms", Namespace: "acme", TaskQueue: "sms"},
	})

	var mu sync.Mutex
	var ran []string
	record := func(what string) dispatch.Handler {
		return func(ctx context.Context, row outbox.Row) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, what+" "+row.DispatchKey)
			return nil
		}
	}
	var mux dispatch.Mux
	mux.Handle("emails", record("email"))
	mux.Handle("invoices", record("bill"))

	var handled atomic.Int64
	handle := func(ctx context.Context, row outbox.Row) error {
		defer func() {
			if handled.Add(1) == 3 {
				stop() // every row handled; a service stops on SIGTERM
			}
		}()
		return mux.HandleRow(ctx, row)
	}
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, owned(store.ShardCount()))
	d, err := dispatch.New(bp, store, handle, dispatch.Options{Workers: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := d.Run(ctx); err != nil {
		fmt.Println(err)
	}

	slices.Sort(ran)
	fmt.Println(ran)
	dead, _ := store.ListDead(context.Background(), outbox.ListDeadParams{})
	for _, row := range dead {
		fmt.Printf("dead: %s: %s\n", row.DispatchKey, row.LastError)
	}
	// Output:
	// [bill invoice-7 email order-1/email]
	// dead: order-1/sms: permanent: dispatch: no handler for task queue "sms" (namespace "acme")
}

// JSON decodes each row's payload into the handler's type; a payload that
// does not decode is dead-lettered without calling it.
func ExampleJSON() {
	type invoice struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	bill := dispatch.JSON(func(ctx context.Context, row outbox.Row, inv invoice) error {
		fmt.Printf("bill %s for %s: %d cents\n", inv.ID, row.Namespace, inv.Cents)
		return nil
	})

	ctx := context.Background()
	err := bill(ctx, outbox.Row{Namespace: "globex", Payload: []byte(`{"id":"invoice-7","cents":1250}`)})
	fmt.Println("err:", err)
	err = bill(ctx, outbox.Row{Namespace: "globex", Payload: []byte(`{"id":7}`)})
	fmt.Println("dead-lettered:", dispatch.IsPermanent(err))
	fmt.Println("err:", err)
	// Output:
	// bill invoice-7 for globex: 1250 cents
	// err: <nil>
	// dead-lettered: true
	// err: permanent: dispatch: payload does not decode as JSON into dispatch_test.invoice: json: cannot unmarshal number into Go struct field invoice.id of type string
}

func owned(shardCount int) backpressure.OwnedShardFraction {
	f, _ := backpressure.AllShards(shardCount)
	return f
}
