package orders

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// RunWorker runs one dispatcher node until ctx is done, then stops it
// gracefully: it joins the workers' cluster, fulfils orders on the shards
// it owns, serves /livez and /readyz on c.Addr, and leaves at the end.
func RunWorker(ctx context.Context, c Config) error {
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := c.migrate(ctx, pool); err != nil {
		return err
	}
	store, err := pgstore.New(ctx, pool, pgstore.Options{Schema: c.outboxSchema()})
	if err != nil {
		return err
	}
	defer store.Close()
	var mux dispatch.Mux
	dispatch.Handle(&mux, fulfiller(pool, c.table()))
	svc, err := dispatch.NewService(store, mux.HandleRow, dispatch.ServiceOptions{
		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: c.Quota},
		Options: dispatch.Options{Workers: 16},
		Cluster: store.Cluster(pgstore.MembershipOptions{}),
	})
	if err != nil {
		return err
	}
	health := http.NewServeMux()
	health.Handle("/livez", svc.LiveHandler())
	health.Handle("/readyz", svc.ReadyHandler())
	srv := &http.Server{Addr: c.Addr, Handler: health, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Printf("orders-worker: health probes: %v", err)
		}
	}()
	defer srv.Close()
	return svc.Run(ctx) // Start, wait for ctx, Stop
}

// fulfiller returns the handler of Fulfil jobs. It runs at least once per
// order, so it is idempotent: only a placed order becomes fulfilled.
func fulfiller(pool *pgxpool.Pool, table string) func(context.Context, outbox.Row, Fulfil) error {
	stmt := fmt.Sprintf(`UPDATE %s SET status = 'fulfilled', fulfilled_at = now() WHERE id = $1 AND status = 'placed'`, table)
	return func(ctx context.Context, row outbox.Row, f Fulfil) error {
		// Pick, pack and ship here, keyed by row.DispatchKey.
		_, err := pool.Exec(ctx, stmt, f.OrderID)
		return err
	}
}
