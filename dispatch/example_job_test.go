package dispatch_test

import (
	"context"
	"fmt"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// sendEmail is a job type: its task queue is named once, here, and both
// outbox.NewMessage and dispatch.Handle read it.
type sendEmail struct {
	To      string `json:"to"`
	OrderID string `json:"order_id"`
}

func (sendEmail) TaskQueue() string { return "emails" }

// A typed job end to end: enqueued with outbox.NewMessage (in a real
// service, with the store's EnqueueTx in the transaction that writes the
// order), handled by the func dispatch.Handle registers for its type.
func ExampleHandle() {
	store, _ := memstore.New(memstore.Options{}) // or sqlitestore, pgstore
	defer store.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	msg, err := outbox.NewMessage("acme", "order-1/email", sendEmail{To: "ann@example.com", OrderID: "order-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = store.Enqueue(ctx, []outbox.Message{msg})

	var mux dispatch.Mux
	dispatch.Handle(&mux, func(ctx context.Context, row outbox.Row, e sendEmail) error {
		fmt.Printf("email to %s for %s (task queue %q)\n", e.To, e.OrderID, row.TaskQueue)
		stop() // the only row; a service stops on SIGTERM
		return nil
	})
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 10}, owned(store.ShardCount()))
	d, _ := dispatch.New(bp, store, mux.HandleRow, dispatch.Options{Workers: 2})
	if err := d.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// email to ann@example.com for order-1 (task queue "emails")
}
