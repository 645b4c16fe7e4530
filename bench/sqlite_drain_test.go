package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
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
	db := openRiverSQLite(tb)
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: sqliteWorkers}}
	client := newRiverClient(tb, riversqlite.New(db), "", queues, &noopWorker{}, fetchCooldown)
	params := make([]river.InsertManyParams, rows)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	elapsed, cpu := drainRiver(tb, client, params, startProcCPU)
	_ = db.Close() // now rather than when the benchmark ends
	return elapsed, drainStats{procCPU: cpu}
}

// openSQLiteStore opens a sqlitestore on a new file of tb's temporary
// directory with every option at its default (WAL, synchronous FULL, one
// writer connection and 4 readers, 64 shards).
func openSQLiteStore(tb testing.TB) *sqlitestore.Store {
	tb.Helper()
	return openSQLiteStoreWith(tb, sqlitestore.Options{})
}

// openSQLiteStoreWith is openSQLiteStore with opts.
func openSQLiteStoreWith(tb testing.TB, opts sqlitestore.Options) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(tb.TempDir(), "outbox.db"), opts)
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
	s := openSQLiteStore(tb)
	enqueueBacklog(tb, s, rows, namespaces)
	elapsed, st, cpu := drainDispatch(tb, s, s, rows, dispatchBatch, dispatch.Options{Workers: sqliteWorkers}, startProcCPU)
	st.procCPU = cpu
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
	perArm := runDrainArms(b, arms, rows)
	for _, a := range arms {
		reportDrainArm(b, a, perArm, a.procCPU, "cpu-µs/row")
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

// startProcCPU starts a procMeter.
func startProcCPU() cpuStopper { return procMeter{before: processCPU()} }

// stop returns the CPU the process spent since start, or -1 if it could
// not be read.
func (m procMeter) stop() time.Duration {
	after := processCPU()
	if m.before < 0 || after < 0 {
		return -1
	}
	return after - m.before
}
