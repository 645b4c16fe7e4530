package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/sqlitestore"
	"github.com/riverqueue/river/riverdriver/riversqlite"
)

// sqliteSteadyRate is the producer's rate in BenchmarkSteadySQLite, rows/s.
const sqliteSteadyRate = 500

// steadySettle is how long a steady-state consumer runs idle before the
// producer starts (started, subscribed, River's services settled): 1 s,
// 100 ms under -benchtime=1x.
func steadySettle() time.Duration {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return 100 * time.Millisecond
	}
	return time.Second
}

// steadyArm is one consumer of BenchmarkSteadySQLite and what its runs
// recorded.
type steadyArm struct {
	name string
	// run runs one steady state, recording into l, and returns the rows
	// it enqueued and the process's CPU meanwhile (< 0: unknown).
	run      func(b *testing.B, l *latencies) (rows int, cpu time.Duration)
	all      []time.Duration // every row's latency, over the runs
	rows     int
	cpu      time.Duration
	cpuKnown bool
	trips    int64 // the consumer's round trips over the runs, where counted
}

// percentile returns the q-th quantile (0 < q < 1) of a's latencies,
// sorted.
func (a *steadyArm) percentile(q float64) time.Duration {
	return a.all[int(float64(len(a.all))*q)]
}

// BenchmarkSteadySQLite is BenchmarkSteady on SQLite: in one process, on a
// fresh database file per run, a producer enqueues no-op rows one at a
// time at 500 rows/s for 3 s, on the consumer's own store or client (so
// each side's in-process wake-up is what starts the rows: sqlitestore's
// notifier, signalled from the committing goroutine, and River's, which on
// SQLite has no listener and is poll-only, triggering its producer's fetch
// after a non-transactional Insert), while the consumer runs:
//
//   - dispatch-coalesce-none, dispatch-coalesce-2ms: dispatch.Dispatcher on
//     sqlitestore (Open, every option at its default) with the fair
//     planner, 10 namespaces, Workers 100, BatchSize 100, at
//     Options.Coalesce none and 2 ms (the default);
//   - dispatch-coalesce-2ms-kept: as dispatch-coalesce-2ms, with the
//     store's kept counts on (sqlitestore.Options.RecountInterval 1 s);
//   - river-default, river-1ms: River v0.51.2 on riversqlite v0.51.2
//     (opened as in BenchmarkDrainSQLite), one queue of 100 workers, with
//     its default fetch cooldown and with 1 ms.
//
// Every iteration runs every arm once, in an order that rotates from
// iteration to iteration. It reports, per arm, the p50 and p99 from the
// enqueue's commit (when Enqueue or Insert returned) to the handler's
// start over every row of its runs, and cpu-µs/row: the CPU (user +
// system, getrusage) of the whole process from the producer's start until
// the last row started, per row, which holds the producer's enqueues and
// the database's work (SQLite runs in the process; BenchmarkSteady's
// database CPU per row has no counterpart here). The ratios
// river/dispatch-p50 and river/dispatch-p99 are the faster River arm's
// percentile over dispatch-coalesce-2ms's (above 1: the dispatcher starts
// rows sooner).
//
//	cd bench && go test -run '^$' -bench SteadySQLite -benchtime 2x
//
// Under -benchtime=1x the producer runs 100 ms (see steadyFor). It needs
// no PostgreSQL.
func BenchmarkSteadySQLite(b *testing.B) {
	arms := []*steadyArm{
		{name: "dispatch-coalesce-none", run: func(b *testing.B, l *latencies) (int, time.Duration) {
			return steadySQLiteDispatch(b, sqliteSteadyRate, -1, l, sqlitestore.Options{})
		}},
		{name: "dispatch-coalesce-2ms", run: func(b *testing.B, l *latencies) (int, time.Duration) {
			return steadySQLiteDispatch(b, sqliteSteadyRate, 0, l, sqlitestore.Options{})
		}},
		{name: "river-default", run: func(b *testing.B, l *latencies) (int, time.Duration) {
			return steadySQLiteRiver(b, sqliteSteadyRate, 0, l)
		}},
		{name: "river-1ms", run: func(b *testing.B, l *latencies) (int, time.Duration) {
			return steadySQLiteRiver(b, sqliteSteadyRate, time.Millisecond, l)
		}},
		{name: "dispatch-coalesce-2ms-kept", run: func(b *testing.B, l *latencies) (int, time.Duration) {
			return steadySQLiteDispatch(b, sqliteSteadyRate, 0, l, sqlitestore.Options{RecountInterval: time.Second})
		}},
	}
	for _, a := range arms {
		a.cpuKnown = true
	}
	rotateArms(b, len(arms), func(i int) {
		a := arms[i]
		l := newLatencies()
		n, cpu := a.run(b, l)
		a.rows += n
		a.cpu += cpu
		a.cpuKnown = a.cpuKnown && cpu >= 0
		a.all = append(a.all, l.all...)
	})
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, a := range arms {
		slices.Sort(a.all)
		b.ReportMetric(ms(a.percentile(0.50)), a.name+"-p50-ms")
		b.ReportMetric(ms(a.percentile(0.99)), a.name+"-p99-ms")
		if a.cpuKnown {
			b.ReportMetric(float64(a.cpu.Microseconds())/float64(a.rows), a.name+"-cpu-µs/row")
		}
	}
	dispatchDefault, riverDefault, river1ms, kept := arms[1], arms[2], arms[3], arms[4]
	if kept.cpuKnown && dispatchDefault.cpuKnown {
		perRow := func(a *steadyArm) float64 { return a.cpu.Seconds() / float64(a.rows) }
		b.ReportMetric(perRow(kept)/perRow(dispatchDefault), "kept/recount-cpu")
	}
	for _, q := range []float64{0.50, 0.99} {
		fasterRiver := min(riverDefault.percentile(q), river1ms.percentile(q))
		b.ReportMetric(fasterRiver.Seconds()/dispatchDefault.percentile(q).Seconds(), fmt.Sprintf("river/dispatch-p%d", int(q*100)))
	}
}

// steadySQLiteDispatch runs one steady state of a dispatcher on a fresh
// sqlitestore (see openSQLiteStore), at Options.Coalesce coalesce, with
// the producer enqueueing on the same store; it returns the rows enqueued
// and the process's CPU from the producer's start until the last row
// started (and 20 ms more, for the last results).
func steadySQLiteDispatch(b *testing.B, rate int, coalesce time.Duration, l *latencies, opts sqlitestore.Options) (int, time.Duration) {
	s := openSQLiteStoreWith(b, opts)
	stop := startSteadyDispatch(b, s, s.ShardCount(), sqliteWorkers, coalesce, l)
	time.Sleep(steadySettle()) // subscribed and idle
	n, c := steadyProduce(b, rate, l, startProcCPU, enqueueSteady(s, sqliteNamespaces), "dispatch", "rows")
	stop()
	_ = s.Close() // now rather than when the benchmark ends
	return n, c
}

// steadySQLiteRiver runs one steady state of a River client on a fresh
// River database (see openRiverSQLite), one queue of sqliteWorkers
// workers, fetch cooldown cooldown (0: River's default), with the producer
// inserting through the same client; it returns the rows inserted and the
// process's CPU as steadySQLiteDispatch does.
func steadySQLiteRiver(b *testing.B, rate int, cooldown time.Duration, l *latencies) (int, time.Duration) {
	ctx := context.Background()
	db := openRiverSQLite(b)
	client, stop := startSteadyRiver(b, riversqlite.New(db), "", sqliteWorkers, cooldown, l)
	time.Sleep(steadySettle()) // started, idle
	n, c := steadyProduce(b, rate, l, startProcCPU, func(seq int) error {
		_, err := client.Insert(ctx, steadyArgs{Seq: seq}, nil)
		return err
	}, "river", "jobs")
	stop()
	_ = db.Close() // now rather than when the benchmark ends
	return n, c
}
