// Command outboxctl operates an outbox in PostgreSQL or SQLite: per-tenant
// state and why rows wait, dead letters, shared settings (pause, resume,
// quotas, weights), the dispatcher nodes' reports, the schema, and the
// admin pages. Run outboxctl -h for its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/backpressure/cmd/outboxctl/internal/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Config{Stdout: os.Stdout, Stderr: os.Stderr}.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
