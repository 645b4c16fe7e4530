package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// Dispatcher settings of the drain: what a user running no-op-cheap
// handlers would pick, not tuned to the benchmark. Everything else is the
// dispatcher's and the store's default (CompleteBatch 100, FlushInterval
// 10ms, RefillDelay 1ms, a 30s lease, the pool's default size).
const (
	dispatchWorkers = 100 // Options.Workers
	dispatchBatch   = 100 // backpressure.Config.BatchSize: one sweep's claim budget
	taskQueues      = 2   // task queues per namespace

	// wideWorkers is Workers and BatchSize of the wide arms: River's 10
	// queues × 100 workers.
	wideWorkers = 1000
)

// dispatchSetup is one pgstore schema that a dispatcher drains.
type dispatchSetup struct {
	pool       *pgxpool.Pool
	store      *pgstore.Store
	namespaces int
	unscoped   bool
	workers    int // Options.Workers
	batch      int // backpressure.Config.BatchSize
	inFlight   int // Options.ClaimsInFlight (0: the default)
}

// newDispatchSetup opens a pgstore in a fresh schema on pool.
func newDispatchSetup(tb testing.TB, pool *pgxpool.Pool, namespaces int, unscoped bool) *dispatchSetup {
	tb.Helper()
	return newDispatchSetupWith(tb, pool, namespaces, unscoped, pgstore.Options{})
}

// newDispatchSetupWith is newDispatchSetup with the store's options opts
// (their Schema replaced by a fresh one).
func newDispatchSetupWith(tb testing.TB, pool *pgxpool.Pool, namespaces int, unscoped bool, opts pgstore.Options) *dispatchSetup {
	tb.Helper()
	opts.Schema = freshSchema(tb, pool, "dispatch")
	s, err := pgstore.New(context.Background(), pool, opts)
	if err != nil {
		tb.Fatalf("pgstore.New: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return &dispatchSetup{pool: pool, store: s, namespaces: namespaces, unscoped: unscoped, workers: dispatchWorkers, batch: dispatchBatch}
}

// settledCounter closes done once want rows are settled, and sums the
// sweeps' time.
type settledCounter struct {
	dispatch.NopMetrics
	want    int64
	settled atomic.Int64
	done    chan struct{}
	sweeps  atomic.Int64
	swept   atomic.Int64 // ns spent in sweeps
}

// Swept is called from the one sweep loop.
func (c *settledCounter) Swept(e dispatch.SweepEvent) {
	c.sweeps.Add(1)
	c.swept.Add(int64(e.Duration))
}

func (c *settledCounter) Completed(e dispatch.CompletionEvent) {
	if e.State == outbox.StateSettled && c.settled.Add(1) == c.want {
		close(c.done)
	}
}

// drainStats is what a dispatcher drain's sweeps did.
type drainStats struct {
	sweeps int64         // sweeps run
	swept  time.Duration // time spent in them
	pgCPU  time.Duration // CPU of the arm's PostgreSQL backends during the drain (see backendCPU); < 0: unknown
	// CPU of this whole process during the drain (see startProcCPU), for
	// the SQLite arms, whose database runs in the process; < 0: unknown.
	procCPU time.Duration
}

// drain enqueues rows no-op rows over d's namespaces (taskQueues task
// queues each), then runs a dispatcher on them and returns how long it
// took from Run until the last row's settle was written (enqueue not
// included, as for River), and what its sweeps did.
func (d *dispatchSetup) drain(tb testing.TB, rows int) (time.Duration, drainStats) {
	tb.Helper()
	drainPrepared(tb, d, rows)
	var store dispatch.Store = d.store
	if d.unscoped {
		store = unscopedStore{d.store}
	}
	opts := dispatch.Options{Workers: d.workers, ClaimsInFlight: d.inFlight}
	elapsed, st, cpu := drainDispatch(tb, d.store, store, rows, d.batch, opts, func() cpuStopper { return startCPU(cpuAdmin, d.pool) })
	st.pgCPU = cpu
	return elapsed, st
}

// drainPrepared empties d's outbox, enqueues rows rows over its
// namespaces and ANALYZEs it: what a drain does before its clock starts.
func drainPrepared(tb testing.TB, d *dispatchSetup, rows int) {
	tb.Helper()
	ctx := context.Background()
	table := pgx.Identifier{d.store.Schema(), "outbox"}.Sanitize()
	if _, err := adminExec(ctx, d, "TRUNCATE "+table); err != nil {
		tb.Fatalf("truncate: %v", err)
	}
	enqueueBacklog(tb, d.store, rows, d.namespaces)
	if _, err := adminExec(ctx, d, "ANALYZE "+table); err != nil {
		tb.Fatalf("analyze: %v", err)
	}
}

// backlogStore is what a drain needs of pgstore's and sqlitestore's Store
// besides claiming: enqueue, the shard count, and the untimed check.
type backlogStore interface {
	Enqueue(ctx context.Context, msgs []outbox.Message) (int, error)
	ShardCount() int
	Stats(ctx context.Context) (outbox.Stats, error)
}

// enqueueBacklog enqueues rows no-op rows into s over namespaces
// namespaces (taskQueues task queues each), 5,000 at a time.
func enqueueBacklog(tb testing.TB, s backlogStore, rows, namespaces int) {
	tb.Helper()
	ctx := context.Background()
	msgs := make([]outbox.Message, rows)
	for i := range msgs {
		msgs[i] = outbox.Message{
			DispatchKey: fmt.Sprintf("k%09d", i),
			Namespace:   fmt.Sprintf("ns%04d", i%namespaces),
			TaskQueue:   fmt.Sprintf("q%d", (i/namespaces)%taskQueues),
		}
	}
	for lo := 0; lo < rows; lo += 5000 {
		if _, err := s.Enqueue(ctx, msgs[lo:min(lo+5000, rows)]); err != nil {
			tb.Fatalf("Enqueue: %v", err)
		}
	}
}

// drainDispatch runs a dispatcher with the fair planner (BatchSize batch,
// no quota, opts with its Metrics and Logger set) on claim, which is s or
// claims from it, until the rows rows enqueued in s are settled; it returns
// how long that took from Run until the last row's settle was written,
// what its sweeps did, and the CPU that the meter startMeter returns
// measured meanwhile, then checks (untimed) that s has every row settled
// once.
func drainDispatch(tb testing.TB, s backlogStore, claim dispatch.Store, rows, batch int, opts dispatch.Options, startMeter func() cpuStopper) (time.Duration, drainStats, time.Duration) {
	tb.Helper()
	ctx := context.Background()
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		tb.Fatalf("backpressure.New: %v", err)
	}
	c := &settledCounter{want: int64(rows), done: make(chan struct{})}
	opts.Metrics, opts.Logger = c, quietLogger()
	noop := func(context.Context, outbox.Row) error { return nil }
	disp, err := dispatch.New(bp, claim, noop, opts)
	if err != nil {
		tb.Fatalf("dispatch.New: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	m := startMeter()
	start := time.Now()
	go func() { ran <- disp.Run(runCtx) }()
	select {
	case <-c.done:
	case <-time.After(drainTimeout(rows)):
		tb.Fatalf("dispatch: %d of %d rows settled after %v", c.settled.Load(), rows, drainTimeout(rows))
	}
	elapsed := time.Since(start)
	st := drainStats{sweeps: c.sweeps.Load(), swept: time.Duration(c.swept.Load())}
	cpu := m.stop()
	stop()
	if err := <-ran; err != nil {
		tb.Fatalf("dispatch Run: %v", err)
	}
	// Untimed: every row settled exactly once, none left behind.
	if stats, err := s.Stats(ctx); err != nil || stats.Settled != rows || stats.Total != rows {
		tb.Fatalf("after the drain: %+v, %v; want %d rows, all settled", stats, err, rows)
	}
	return elapsed, st, cpu
}

// drainTimeout is how long a drain of rows rows may take before the
// benchmark fails: 2 minutes, or 1 ms per row for larger backlogs
// (BenchmarkBacklogGrowth's 200,000 rows).
func drainTimeout(rows int) time.Duration {
	return max(2*time.Minute, time.Duration(rows)*time.Millisecond)
}

// adminExec runs an untimed statement of the benchmark's own on d's pool.
func adminExec(ctx context.Context, d *dispatchSetup, sql string) (int64, error) {
	tag, err := d.pool.Exec(ctx, sql)
	return tag.RowsAffected(), err
}

// unscopedStore is the same pgstore behind the same dispatcher, claiming
// as a dispatcher without backpressure would: oldest first whatever the
// namespace, with no counts. It reports the backlog as one route as deep
// as the sweep may count (no round trip), so the planner grants the whole
// budget to it, and claims that budget with the store's
// ClaimOutboxRowsUnscoped (on its Claimer, for benchmarks). Completion,
// lease extension and wake-ups are the store's own. Its Claimer holds the
// store's Claimer in a field rather than embedding it, so that the sweep
// does not find the store's count extension (backpressure.Counter)
// through it.
type unscopedStore struct{ s *pgstore.Store }

var (
	_ dispatch.Store  = unscopedStore{}
	_ outbox.Notifier = unscopedStore{}
)

// unscopedClaim is the benchmark baseline a pgstore Claimer has.
type unscopedClaim interface {
	ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error)
}

// unscopedClaimer is the planner's view of an unscopedStore.
type unscopedClaimer struct{ c unscopedClaim }

// Claimer returns the unscoped counts and claim.
func (u unscopedStore) Claimer() backpressure.OutboxStore[outbox.Row] {
	return unscopedClaimer{u.s.Claimer().(unscopedClaim)}
}

// Complete is the store's.
func (u unscopedStore) Complete(ctx context.Context, cs []outbox.Completion) ([]outbox.Result, error) {
	return u.s.Complete(ctx, cs)
}

// ExtendLeases is the store's.
func (u unscopedStore) ExtendLeases(ctx context.Context, leases []outbox.Lease) ([]outbox.Result, error) {
	return u.s.ExtendLeases(ctx, leases)
}

// Subscribe is the store's.
func (u unscopedStore) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	return u.s.Subscribe(ctx)
}

// Lease is the store's.
func (u unscopedStore) Lease() time.Duration { return u.s.Lease() }

// backlogRoute is the one route the unscoped counts report.
var backlogRoute = backpressure.Route{Namespace: "backlog"}

// CountClaimedOutboxRows reports nothing claimed: no ceiling is enforced.
func (unscopedClaimer) CountClaimedOutboxRows(context.Context, backpressure.OwnedShardFraction) (map[string]int, error) {
	return nil, nil
}

// CountPendingOutboxRows reports the backlog as one route, capPerRoute
// deep: as much as the sweep can use.
func (unscopedClaimer) CountPendingOutboxRows(_ context.Context, _ backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	return []backpressure.RouteCount{{Route: backlogRoute, Count: capPerRoute}}, nil
}

// ClaimOutboxRowsScoped claims the budget granted to the one route, oldest
// first over every namespace, and returns the rows as of that route (their
// Namespace and TaskQueue replaced by backlogRoute's): the planner refuses
// a claim's rows of routes it did not ask for (since 9bb904c), and a
// dispatcher without backpressure has one route. Completion goes by lease
// (key and token), which the rows keep.
func (u unscopedClaimer) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	limit := 0
	for _, c := range claims {
		limit += c.Limit
	}
	rows, err := u.c.ClaimOutboxRowsUnscoped(ctx, shards, limit)
	for i := range rows {
		rows[i].Namespace, rows[i].TaskQueue = backlogRoute.Namespace, backlogRoute.TaskQueue
	}
	return rows, err
}
