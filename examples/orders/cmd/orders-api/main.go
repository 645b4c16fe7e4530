// Command orders-api takes orders over HTTP (POST /orders, GET
// /orders/{id}) and enqueues each one's fulfilment in the outbox, in the
// transaction that inserts it. See package orders for its environment.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/backpressure/examples/orders"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := orders.FromEnv(":8080")
	if err != nil {
		log.Fatal(err)
	}
	if err := orders.RunAPI(ctx, c); err != nil {
		log.Fatal(err)
	}
}
