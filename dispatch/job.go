package dispatch

import (
	"context"

	"github.com/outboxkit/backpressure/outbox"
)

// Handle registers h on m for the task queue T names ([outbox.JobArgs]):
// each row's payload is decoded as JSON into a T, as [JSON] does (a payload
// that does not decode is dead-lettered with a *[PayloadError]), and h is
// called with it. With [outbox.NewMessage] on the producer's side, the task
// queue's name is written once, on T:
//
//	msg, err := outbox.NewMessage("acme", "order-1/email", OrderPlaced{OrderID: "order-1"})
//	// … store.EnqueueTx(ctx, tx, []outbox.Message{msg}) …
//	dispatch.Handle(&mux, sendEmail) // func(ctx, row, OrderPlaced) error
//
// It panics as [Mux.Handle] does: on a nil h, or a task queue already
// registered in m (two job types naming one task queue) or no row can
// have.
func Handle[T outbox.JobArgs](m *Mux, h func(ctx context.Context, row outbox.Row, args T) error) {
	var zero T
	m.Handle(zero.TaskQueue(), JSON(h))
}
