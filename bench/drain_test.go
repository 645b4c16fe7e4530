package bench

import (
	"flag"
	"fmt"
	"testing"
	"time"
)

// Rows of the drain: the figure is taken over a backlog of drainRows; a
// smoke run (-benchtime=1x, as CI's bench-smoke runs every benchmark once)
// drains smokeRows only, to prove the benchmark runs without taking a
// minute. Its rates are not the figure.
const (
	drainRows = 20_000
	smokeRows = 2_000
)

// drainBacklog returns the backlog a drain iteration enqueues.
func drainBacklog() int {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return smokeRows
	}
	return drainRows
}

// arm is one way of draining the backlog.
type arm struct {
	name  string
	drain func(tb testing.TB, rows int) time.Duration
	total time.Duration
	trips *tripCounter // the dispatcher's pool's, nil for River
	tripN int64        // round trips during this arm's drains
	// A dispatcher's drain with its sweeps' stats; nil for River.
	stats func(tb testing.TB, rows int) (time.Duration, drainStats)
	drainStats
}

func (a *arm) rate(rows int) float64 { return float64(rows) / a.total.Seconds() }

// BenchmarkDrain is the end-to-end figure users feel: a backlog of no-op
// rows, enqueued before the clock starts, drained on one PostgreSQL
// database by
//
//   - river-default, river-1ms: River v0.51.2, 10 queues × 100 workers,
//     with its default fetch cooldown and with 1 ms, on a pool of 40
//     connections;
//   - fair-N: dispatch.Dispatcher on pgstore with the fair planner
//     (backpressure.SweepN, counts included), N namespaces × 2 task
//     queues, no quota; Workers 100, BatchSize 100, every other option
//     and the pool size (pgxpool's default) left at their defaults;
//   - unscoped-N: the same dispatcher, store, workers and completion path,
//     claiming oldest first whatever the namespace, with no counts (see
//     unscopedStore);
//   - fair-10-wide, unscoped-10-wide: the same at 10 namespaces with
//     River's concurrency, Workers 1,000 and BatchSize 1,000: a
//     sensitivity figure (a sweep's round trips cost about the same for
//     100 rows as for 1,000), not the headline.
//
// Every iteration runs every arm once, in an order that rotates from
// iteration to iteration, so that the machine's noise falls on all alike.
// It reports each arm's rows/s (rows over the summed drain times), the
// ratios dispatch/river (fair-N over the faster River arm; target ≥ 1.3)
// and fair/unscoped at each N (target ≥ 0.9); for each dispatcher arm, its
// round trips per row, its mean sweep time, and the share of the drain its
// one sweep loop spent sweeping (near 1: the rate is sweep latency bound,
// as sweeps on one Backpressure run one at a time).
//
//	cd bench && go test -run '^$' -bench Drain -benchtime 3x -count 3 -timeout 30m
//
// Under -benchtime=1x the backlog is 2,000 rows rather than 20,000 (see
// drainBacklog).
func BenchmarkDrain(b *testing.B) {
	rows := drainBacklog()
	riverPool := openPool(b, 40)
	trips := &tripCounter{}
	dispatchPool := openTracedPool(b, 0, trips)
	r := newRiver(b, riverPool)
	arms := []*arm{
		{name: "river-default", drain: func(tb testing.TB, rows int) time.Duration { return r.drain(tb, rows, 10, 100, 0) }},
		{name: "river-1ms", drain: func(tb testing.TB, rows int) time.Duration { return r.drain(tb, rows, 10, 100, time.Millisecond) }},
	}
	for _, ns := range []int{10, 1000} {
		fair := newDispatchSetup(b, dispatchPool, ns, false)
		unscoped := newDispatchSetup(b, dispatchPool, ns, true)
		arms = append(arms,
			&arm{name: fmt.Sprintf("fair-%d", ns), stats: fair.drain, trips: trips},
			&arm{name: fmt.Sprintf("unscoped-%d", ns), stats: unscoped.drain, trips: trips})
	}
	// The same dispatcher with River's concurrency: 1,000 workers, and
	// sweeps of up to 1,000 rows (a sweep claims at most min(idle workers,
	// BatchSize)). A sensitivity figure, not the headline: it shows how
	// far the sweep's fixed cost per round trip is what bounds the rate.
	for _, unscoped := range []bool{false, true} {
		s := newDispatchSetup(b, dispatchPool, 10, unscoped)
		s.workers, s.batch = wideWorkers, wideWorkers
		name := "fair-10-wide"
		if unscoped {
			name = "unscoped-10-wide"
		}
		arms = append(arms, &arm{name: name, stats: s.drain, trips: trips})
	}
	byName := make(map[string]*arm, len(arms))
	for _, a := range arms {
		byName[a.name] = a
	}
	b.ReportAllocs()
	iter := 0
	for b.Loop() {
		for k := range arms {
			a := arms[(iter+k)%len(arms)]
			var before int64
			if a.trips != nil {
				before = a.trips.n.Load()
			}
			if a.stats == nil {
				a.total += a.drain(b, rows)
				continue
			}
			d, st := a.stats(b, rows)
			a.total += d
			a.sweeps += st.sweeps
			a.swept += st.swept
			a.tripN += a.trips.n.Load() - before
		}
		iter++
	}
	perArm := rows * iter
	for _, a := range arms {
		b.ReportMetric(a.rate(perArm), a.name+"-rows/s")
		if a.stats != nil {
			// The enqueue's, TRUNCATE's and ANALYZE's few trips included.
			b.ReportMetric(float64(a.tripN)/float64(perArm), a.name+"-trips/row")
			// The mean sweep, and the share of the drain the one sweep
			// loop spent sweeping: near 1, sweep latency bounds the rate.
			b.ReportMetric(float64(a.swept.Microseconds())/1000/float64(a.sweeps), a.name+"-sweep-ms")
			b.ReportMetric(a.swept.Seconds()/a.total.Seconds(), a.name+"-sweeping")
		}
	}
	river := max(byName["river-default"].rate(perArm), byName["river-1ms"].rate(perArm))
	for _, ns := range []int{10, 1000} {
		fair, unscoped := byName[fmt.Sprintf("fair-%d", ns)], byName[fmt.Sprintf("unscoped-%d", ns)]
		b.ReportMetric(fair.rate(perArm)/river, fmt.Sprintf("fair-%d/river", ns))
		b.ReportMetric(fair.rate(perArm)/unscoped.rate(perArm), fmt.Sprintf("fair/unscoped-%d", ns))
	}
	fair, unscoped := byName["fair-10-wide"], byName["unscoped-10-wide"]
	b.ReportMetric(fair.rate(perArm)/river, "fair-10-wide/river")
	b.ReportMetric(fair.rate(perArm)/unscoped.rate(perArm), "fair/unscoped-10-wide")
}
