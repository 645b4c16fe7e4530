package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverSetup is one River installation in a fresh schema.
type riverSetup struct {
	pool   *pgxpool.Pool
	schema string
}

func newRiver(tb testing.TB, pool *pgxpool.Pool) *riverSetup {
	tb.Helper()
	ctx := context.Background()
	schema := freshSchema(tb, pool, "river")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		tb.Fatalf("rivermigrate.New: %v", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		tb.Fatalf("river migrate: %v", err)
	}
	return &riverSetup{pool: pool, schema: schema}
}

// drain enqueues rows no-op jobs spread over queues queues, then starts a
// River client with workersPerQueue workers on each queue and returns how
// long it took to complete them all (enqueue not included). fetchCooldown
// 0 keeps River's default.
func (r *riverSetup) drain(tb testing.TB, rows, queues, workersPerQueue int, fetchCooldown time.Duration) (time.Duration, drainStats) {
	tb.Helper()
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{r.schema, "river_job"}.Sanitize()); err != nil {
		tb.Fatalf("truncate: %v", err)
	}
	qs := make(map[string]river.QueueConfig, queues)
	for q := range queues {
		qs[fmt.Sprintf("q%d", q)] = river.QueueConfig{MaxWorkers: workersPerQueue}
	}
	client := newRiverClient(tb, riverpgxv5.New(r.pool), r.schema, qs, &noopWorker{}, fetchCooldown)
	params := make([]river.InsertManyParams, rows)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: fmt.Sprintf("q%d", i%queues)}}
	}
	elapsed, cpu := drainRiver(tb, client, params, func() cpuStopper { return startCPU(cpuAdmin, r.pool) })
	return elapsed, drainStats{pgCPU: cpu}
}

// newRiverClient builds a River client on driver running worker on queues,
// in schema ("": the driver's default), with fetchCooldown (0: River's
// default).
func newRiverClient[TTx any, T river.JobArgs](tb testing.TB, driver riverdriver.Driver[TTx], schema string, queues map[string]river.QueueConfig, worker river.Worker[T], fetchCooldown time.Duration) *river.Client[TTx] {
	tb.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	cfg := &river.Config{Queues: queues, Workers: workers, Schema: schema, Logger: quietLogger()}
	if fetchCooldown > 0 {
		cfg.FetchCooldown = fetchCooldown
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		tb.Fatalf("river.NewClient: %v", err)
	}
	return client
}

// drainRiver inserts params through client (untimed), then starts it and
// returns how long it took to complete them all and the CPU that the
// meter startMeter returns measured meanwhile; it stops the client.
func drainRiver[TTx any](tb testing.TB, client *river.Client[TTx], params []river.InsertManyParams, startMeter func() cpuStopper) (elapsed, cpu time.Duration) {
	tb.Helper()
	ctx := context.Background()
	rows := len(params)
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		tb.Fatalf("InsertManyFast: %v", err)
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: rows + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	m := startMeter()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		tb.Fatalf("river Start: %v", err)
	}
	for done := 0; done < rows; {
		select {
		case <-events:
			done++
		case <-time.After(2 * time.Minute):
			tb.Fatalf("river: %d of %d jobs completed after 2 minutes", done, rows)
		}
	}
	elapsed = time.Since(start)
	cpu = m.stop()
	stopCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := client.Stop(stopCtx); err != nil {
		tb.Fatalf("river Stop: %v", err)
	}
	return elapsed, cpu
}
