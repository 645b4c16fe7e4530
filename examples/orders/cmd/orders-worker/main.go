// Command orders-worker fulfils the orders the API enqueued: one
// dispatcher node of as many as run, health probes on $ADDR. See package
// orders for its environment.
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
	c, err := orders.FromEnv(":8081")
	if err != nil {
		log.Fatal(err)
	}
	if err := orders.RunWorker(ctx, c); err != nil {
		log.Fatal(err)
	}
}
