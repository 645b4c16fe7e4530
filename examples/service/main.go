// Command service is a production dispatcher on SQLite in a dozen lines:
// it sends a welcome email for each row of task queue "emails" in the
// outbox file $OUTBOX_DB, serves its liveness and readiness probes on
// $HEALTH_ADDR, and stops gracefully on SIGTERM or SIGINT (handlers get
// 10s to finish, then their ctx is cancelled). On PostgreSQL, open the
// store with pgstore.Open and add Cluster: store.Cluster(pgstore.MembershipOptions{}).
package main

import (
	"cmp"
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := sqlitestore.Open(ctx, cmp.Or(os.Getenv("OUTBOX_DB"), "outbox.db"), sqlitestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	var mux dispatch.Mux
	dispatch.Handle(&mux, sendWelcome)
	svc, err := dispatch.NewService(store, mux.HandleRow, dispatch.ServiceOptions{
		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 10},
		Options: dispatch.Options{Workers: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/livez", svc.LiveHandler())
	http.Handle("/readyz", svc.ReadyHandler())
	go func() { log.Fatal(http.ListenAndServe(cmp.Or(os.Getenv("HEALTH_ADDR"), ":8080"), nil)) }()
	if err := svc.Run(ctx); err != nil { // Start, wait for the signal, Stop
		log.Fatal(err)
	}
}

// WelcomeEmail is a job: its task queue is named once, here. A producer
// enqueues it with outbox.NewMessage in the transaction that creates the
// user.
type WelcomeEmail struct {
	To string `json:"to"`
}

// TaskQueue names the job's task queue.
func (WelcomeEmail) TaskQueue() string { return "emails" }

func sendWelcome(ctx context.Context, row outbox.Row, e WelcomeEmail) error {
	log.Printf("welcome email to %s (%s)", e.To, row.DispatchKey) // send it here: idempotent, keyed by row.DispatchKey
	return nil
}
