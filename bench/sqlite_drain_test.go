package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the "sqlite" driver River's database is opened with, as sqlitestore's is
)

// sqliteWorkers is the concurrency of every SQLite arm: River's one queue
// of sqliteWorkers workers, and the dispatcher's Options.Workers.
const sqliteWorkers = dispatchWorkers

// sqliteNamespaces is the number of namespaces the dispatcher's backlog is
// spread over (taskQueues task queues each).
const sqliteNamespaces = 10

// openRiverSQLite opens a River database in a new file of tb's temporary
// directory the way River's own tests open theirs
// (rivershared/riversharedtest, v0.51.2): modernc.org/sqlite, a URI file
// name with _pragma=journal_mode(WAL), and at most one open connection,
// since River's services run statements concurrently and SQLite fails all
// but one of them with SQLITE_BUSY otherwise (the riversqlite package
// documentation recommends SetMaxOpenConns(1) too). synchronous is left at
// SQLite's default, FULL, as sqlitestore's default is. It migrates River's
// schema into it.
func openRiverSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(tb.TempDir(), "river.db")+"?_pragma=journal_mode(WAL)")
	if err != nil {
		tb.Fatalf("open river database: %v", err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	m, err := rivermigrate.New(riversqlite.New(db), nil)
	if err != nil {
		tb.Fatalf("rivermigrate.New: %v", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		tb.Fatalf("river migrate: %v", err)
	}
	return db
}

// riverSQLiteDrain enqueues rows no-op jobs on one queue of a fresh River
// database (see openRiverSQLite), then starts a River client with
// sqliteWorkers workers on it and returns how long it took to complete
// them all (enqueue not included) and the process's CPU meanwhile.
// fetchCooldown 0 keeps River's default.
func riverSQLiteDrain(tb testing.TB, rows int, fetchCooldown time.Duration) (time.Duration, drainStats) {
	tb.Helper()
	ctx := context.Background()
	db := openRiverSQLite(tb)
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	cfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: sqliteWorkers}},
		Workers: workers,
		Logger:  quietLogger(),
	}
	if fetchCooldown > 0 {
		cfg.FetchCooldown = fetchCooldown
	}
	client, err := river.NewClient(riversqlite.New(db), cfg)
	if err != nil {
		tb.Fatalf("river.NewClient: %v", err)
	}
	params := make([]river.InsertManyParams, rows)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		tb.Fatalf("InsertManyFast: %v", err)
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: rows + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	cpu := startProcCPU()
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
	elapsed := time.Since(start)
	st := drainStats{procCPU: cpu.stop()}
	stopCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := client.Stop(stopCtx); err != nil {
		tb.Fatalf("river Stop: %v", err)
	}
	_ = db.Close() // now rather than when the benchmark ends
	return elapsed, st
}

// openSQLiteStore opens a sqlitestore on a new file of tb's temporary
// directory with every option at its default (WAL, synchronous FULL, one
// writer connection and 4 readers, 64 shards).
func openSQLiteStore(tb testing.TB) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(tb.TempDir(), "outbox.db"), sqlitestore.Options{})
	if err != nil {
		tb.Fatalf("sqlitestore.Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// sqliteDispatchDrain enqueues rows no-op rows over namespaces namespaces
// (taskQueues task queues each) into a fresh sqlitestore (see
// openSQLiteStore), then runs a dispatcher with the fair planner on it
// (Workers sqliteWorkers, BatchSize dispatchBatch, no quota, every other
// option at its default) and returns how long it took from Run until the
// last row's settle was written (enqueue not included, as for River), what
// its sweeps did, and the process's CPU meanwhile.
func sqliteDispatchDrain(tb testing.TB, rows, namespaces int) (time.Duration, drainStats) {
	tb.Helper()
	ctx := context.Background()
	s := openSQLiteStore(tb)
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
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: dispatchBatch, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		tb.Fatalf("backpressure.New: %v", err)
	}
	c := &settledCounter{want: int64(rows), done: make(chan struct{})}
	noop := func(context.Context, outbox.Row) error { return nil }
	disp, err := dispatch.New(bp, s, noop, dispatch.Options{Workers: sqliteWorkers, Metrics: c, Logger: quietLogger()})
	if err != nil {
		tb.Fatalf("dispatch.New: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	cpu := startProcCPU()
	start := time.Now()
	go func() { ran <- disp.Run(runCtx) }()
	select {
	case <-c.done:
	case <-time.After(2 * time.Minute):
		tb.Fatalf("dispatch: %d of %d rows settled after 2 minutes", c.settled.Load(), rows)
	}
	elapsed := time.Since(start)
	st := drainStats{sweeps: c.sweeps.Load(), swept: time.Duration(c.swept.Load()), procCPU: cpu.stop()}
	stop()
	if err := <-ran; err != nil {
		tb.Fatalf("dispatch Run: %v", err)
	}
	// Untimed: every row settled exactly once, none left behind.
	if stats, err := s.Stats(ctx); err != nil || stats.Settled != rows || stats.Total != rows {
		tb.Fatalf("after the drain: %+v, %v; want %d rows, all settled", stats, err, rows)
	}
	_ = s.Close() // now rather than when the benchmark ends
	return elapsed, st
}

// BenchmarkDrainSQLite is BenchmarkDrain on SQLite: a backlog of no-op
// rows, enqueued before the clock starts into a fresh database file in the
// benchmark's temporary directory (one per drain), drained in this process
// by
//
//   - river-default, river-1ms: River v0.51.2 on
//     riverdriver/riversqlite v0.51.2 (database/sql, modernc.org/sqlite,
//     opened as River's own tests open it: see openRiverSQLite), one queue
//     of 100 workers, with its default fetch cooldown and with 1 ms; River
//     has no listener on SQLite and runs poll-only;
//   - fair-10: dispatch.Dispatcher on sqlitestore (Open on the file, every
//     option at its default) with the fair planner (backpressure.SweepN
//     through the store's sweep transaction), 10 namespaces × 2 task
//     queues, no quota; Workers 100, BatchSize 100, every other option at
//     its default.
//
// Both stores run WAL with synchronous FULL, so every commit waits for its
// fsync.
//
// Every iteration runs every arm once, in an order that rotates from
// iteration to iteration. It reports each arm's rows/s (rows over the
// summed drain times), the ratio fair-10/river (fair-10 over the faster
// River arm; the target: above 1), and each arm's cpu-µs/row: the
// CPU (user + system, getrusage) of this whole process during the timed
// drain, per row, which on SQLite holds the database's work too (there is
// no server; the database CPU per row BenchmarkDrain reports has no
// counterpart here). For fair-10 it also reports its mean sweep time and
// the share of the drain its sweep loop spent in sweeps.
//
//	cd bench && go test -run '^$' -bench DrainSQLite -benchtime 3x -count 3
//
// Under -benchtime=1x the backlog is 2,000 rows rather than 20,000 (see
// drainBacklog). It needs no PostgreSQL.
func BenchmarkDrainSQLite(b *testing.B) {
	rows := drainBacklog()
	arms := []*arm{
		{name: "river-default", stats: func(tb testing.TB, rows int) (time.Duration, drainStats) { return riverSQLiteDrain(tb, rows, 0) }},
		{name: "river-1ms", stats: func(tb testing.TB, rows int) (time.Duration, drainStats) {
			return riverSQLiteDrain(tb, rows, time.Millisecond)
		}},
		{name: fmt.Sprintf("fair-%d", sqliteNamespaces), stats: func(tb testing.TB, rows int) (time.Duration, drainStats) {
			return sqliteDispatchDrain(tb, rows, sqliteNamespaces)
		}},
	}
	for _, a := range arms {
		a.cpuKnown = true
	}
	b.ReportAllocs()
	iter := 0
	for b.Loop() {
		for k := range arms {
			a := arms[(iter+k)%len(arms)]
			d, st := a.stats(b, rows)
			a.total += d
			a.sweeps += st.sweeps
			a.swept += st.swept
			a.procCPU += st.procCPU
			a.cpuKnown = a.cpuKnown && st.procCPU >= 0
		}
		iter++
	}
	perArm := rows * iter
	for _, a := range arms {
		b.ReportMetric(a.rate(perArm), a.name+"-rows/s")
		if a.cpuKnown {
			b.ReportMetric(float64(a.procCPU.Microseconds())/float64(perArm), a.name+"-cpu-µs/row")
		}
		if a.sweeps > 0 {
			b.ReportMetric(float64(a.swept.Microseconds())/1000/float64(a.sweeps), a.name+"-sweep-ms")
			b.ReportMetric(a.swept.Seconds()/a.total.Seconds(), a.name+"-sweeping")
		}
	}
	faster := arms[0]
	if arms[1].rate(perArm) > faster.rate(perArm) {
		faster = arms[1]
	}
	fair := arms[2]
	b.ReportMetric(fair.rate(perArm)/faster.rate(perArm), fair.name+"/river")
}

// procMeter measures this process's CPU over an interval (see
// processCPU): start before, stop after.
type procMeter struct{ before time.Duration }

func startProcCPU() procMeter { return procMeter{before: processCPU()} }

// stop returns the CPU the process spent since start, or -1 if it could
// not be read.
func (m procMeter) stop() time.Duration {
	after := processCPU()
	if m.before < 0 || after < 0 {
		return -1
	}
	return after - m.before
}
