package bench

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/pgstore"
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
	trips *tripCounter // the dispatcher's pool's, nil for the peers
	tripN int64        // round trips during this arm's drains
	// One drain, with what its sweeps did (none for the peers) and its
	// CPU: of its PostgreSQL backends, or of the process for SQLite's.
	stats func(tb testing.TB, rows int) (time.Duration, drainStats)
	total time.Duration
	drainStats
	cpuKnown bool // every drain's pgCPU and procCPU was read
}

func (a *arm) rate(rows int) float64 { return float64(rows) / a.total.Seconds() }

// armsFlag keeps only the arms whose name it matches (a regexp; the
// ratios of arms left out are not reported).
var armsFlag = flag.String("drain.arms", "", "run only the drain arms whose name matches this regexp")

// cpuAdmin is the pool backendCPU queries pg_stat_activity on.
var cpuAdmin *pgxpool.Pool

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
//   - fair-N-wide, unscoped-N-wide: the same with River's concurrency,
//     Workers 1,000 and BatchSize 1,000 (a sweep's round trips cost about
//     the same for 100 rows as for 1,000); fair-N-wide-serial the same
//     with one claim in flight (Options.ClaimsInFlight 1) rather than the
//     default two; fair-1000-window the fair-1000 arm on a store with
//     pgstore's opt-in window claim (Options.WindowClaims), reported as
//     window/counted-1000;
//   - graphile-local, graphile-plain: graphile-worker 0.18.0 under Node,
//     with its local queue (batched fetch and completion) and without,
//     concurrentJobs 100 (see graphile/drain.mjs), when bench/graphile has
//     it installed (make bench-drain runs npm ci there).
//
// Each arm reports pg-µs/row: the CPU (user + system, /proc/<pid>/stat)
// of the PostgreSQL backends serving its connections (found by
// application_name) during the timed drain, per row; the server's
// background processes (WAL writer, checkpointer) are not in it.
//
// Every iteration runs every arm once, in an order that rotates from
// iteration to iteration, so that the machine's noise falls on all alike.
// It reports each arm's rows/s (rows over the summed drain times), the
// ratios dispatch/river (fair-N over the faster River arm; target ≥ 1.3)
// and fair/unscoped at each N (target ≥ 0.9); for each dispatcher arm, its
// round trips per row, its mean sweep time, and the share of the drain its
// sweep loop spent in sweeps (summed over sweeps in flight at once, so
// above 1 when claims overlap).
//
//	cd bench && go test -run '^$' -bench 'Drain$' -benchtime 3x -count 3 -timeout 30m
//
// It also reports, and prints in the summary table after the run (see
// TestMain), issue 31's drain rows: the best fair arm at each N (the
// fastest of fair-N and its variants, see bestFair) over graphile-local
// and over river-1ms (best-fair-N/graphile-local, best-fair-N/river-1ms),
// fair/unscoped-N-wide, and the best fair arm's pg-µs/row at 10
// namespaces over graphile-local's (best-fair-10/graphile-local-pg).
//
// Under -benchtime=1x the backlog is 2,000 rows rather than 20,000 (see
// drainBacklog).
func BenchmarkDrain(b *testing.B) {
	rows := drainBacklog()
	trips := &tripCounter{}
	dispatchPool := openTracedPool(b, 0, trips)
	cpuAdmin = openPool(b, 2)
	arms := drainArms(b, openPool(b, 40), dispatchPool, trips)
	if *armsFlag != "" {
		re, err := regexp.Compile(*armsFlag)
		if err != nil {
			b.Fatalf("-drain.arms: %v", err)
		}
		arms = slices.DeleteFunc(arms, func(a *arm) bool { return !re.MatchString(a.name) })
	}
	byName := make(map[string]*arm, len(arms))
	for _, a := range arms {
		byName[a.name] = a
	}
	perArm := runDrainArms(b, arms, rows)
	for _, a := range arms {
		reportDrainArm(b, a, perArm, a.pgCPU, "pg-µs/row")
	}
	// ratio reports x's rate over y's, when both arms ran.
	ratio := func(name string, x, y *arm) {
		if x != nil && y != nil {
			b.ReportMetric(x.rate(perArm)/y.rate(perArm), name)
		}
	}
	fasterRiver := byName["river-default"]
	if r1 := byName["river-1ms"]; fasterRiver == nil || (r1 != nil && r1.rate(perArm) > fasterRiver.rate(perArm)) {
		fasterRiver = r1
	}
	for _, ns := range []int{10, 1000} {
		fair := byName[fmt.Sprintf("fair-%d", ns)]
		ratio(fmt.Sprintf("fair-%d/river", ns), fair, fasterRiver)
		ratio(fmt.Sprintf("fair/unscoped-%d", ns), fair, byName[fmt.Sprintf("unscoped-%d", ns)])
		wide := byName[fmt.Sprintf("fair-%d-wide", ns)]
		ratio(fmt.Sprintf("fair-%d-wide/serial", ns), wide, byName[fmt.Sprintf("fair-%d-wide-serial", ns)])
		ratio(fmt.Sprintf("fair-%d-wide/graphile-local", ns), wide, byName["graphile-local"])
		ratio(fmt.Sprintf("fair-%d-wide/river-1ms", ns), wide, byName["river-1ms"])
	}
	ratio("fair-10-wide/river", byName["fair-10-wide"], fasterRiver)
	ratio("window/counted-1000", byName["fair-1000-window"], byName["fair-1000"])
	ratio("fair/unscoped-10-wide", byName["fair-10-wide"], byName["unscoped-10-wide"])
	summarizeDrain(b, arms, byName, perArm)
}

// drainArms returns BenchmarkDrain's arms: River's on riverPool,
// graphile-worker's when installed, and the dispatcher's on dispatchPool
// (whose round trips trips counts).
func drainArms(b *testing.B, riverPool, dispatchPool *pgxpool.Pool, trips *tripCounter) []*arm {
	r := newRiver(b, riverPool)
	arms := []*arm{
		{name: "river-default", stats: func(tb testing.TB, rows int) (time.Duration, drainStats) { return r.drain(tb, rows, 10, 100, 0) }},
		{name: "river-1ms", stats: func(tb testing.TB, rows int) (time.Duration, drainStats) {
			return r.drain(tb, rows, 10, 100, time.Millisecond)
		}},
	}
	if g := newGraphile(b, cpuAdmin); g != nil {
		arms = append(arms,
			&arm{name: "graphile-local", stats: func(tb testing.TB, rows int) (time.Duration, drainStats) { return g.drain(tb, rows, "local") }},
			&arm{name: "graphile-plain", stats: func(tb testing.TB, rows int) (time.Duration, drainStats) { return g.drain(tb, rows, "plain") }})
	}
	for _, ns := range []int{10, 1000} {
		fair := newDispatchSetup(b, dispatchPool, ns, false)
		unscoped := newDispatchSetup(b, dispatchPool, ns, true)
		arms = append(arms,
			&arm{name: fmt.Sprintf("fair-%d", ns), stats: fair.drain, trips: trips},
			&arm{name: fmt.Sprintf("unscoped-%d", ns), stats: unscoped.drain, trips: trips})
	}
	// pgstore's opt-in window claim (Options.WindowClaims), where the window
	// rule applies: 1,000 namespaces, BatchSize 100.
	window := newDispatchSetupWith(b, dispatchPool, 1000, false, pgstore.Options{WindowClaims: true})
	arms = append(arms, &arm{name: "fair-1000-window", stats: window.drain, trips: trips})
	// The same dispatcher with River's concurrency: 1,000 workers, and
	// sweeps of up to 1,000 rows (a sweep claims at most min(idle workers,
	// BatchSize)), fair and unscoped, at 10 and 1,000 namespaces; and fair
	// with one claim in flight (ClaimsInFlight 1) rather than the default
	// two: what overlapping claims buy.
	for _, ns := range []int{10, 1000} {
		for _, v := range []struct {
			suffix   string
			unscoped bool
			inFlight int
		}{{"fair-%d-wide", false, 0}, {"unscoped-%d-wide", true, 0}, {"fair-%d-wide-serial", false, 1}} {
			s := newDispatchSetup(b, dispatchPool, ns, v.unscoped)
			s.workers, s.batch, s.inFlight = wideWorkers, wideWorkers, v.inFlight
			arms = append(arms, &arm{name: fmt.Sprintf(v.suffix, ns), stats: s.drain, trips: trips})
		}
	}
	return arms
}

// bestFair returns the fastest of the arms that run the fair planner at ns
// namespaces (fair-<ns> and its -wide, -wide-serial and -window variants:
// the default options, River's concurrency, and the documented options),
// or nil when none ran.
func bestFair(arms []*arm, ns, perArm int) *arm {
	var best *arm
	prefix := fmt.Sprintf("fair-%d", ns)
	for _, a := range arms {
		if a.name != prefix && !strings.HasPrefix(a.name, prefix+"-") {
			continue
		}
		if best == nil || a.rate(perArm) > best.rate(perArm) {
			best = a
		}
	}
	return best
}

// summarizeDrain reports, and records in the summary table in the order of
// issue 31's table, the drain rows: the best fair arm over graphile-worker's
// local queue and over River with a 1 ms cooldown, at 10 and 1,000
// namespaces; fair over unscoped with BatchSize 1,000 at each; and the
// PostgreSQL CPU per row of the best fair arm at 10 namespaces against
// graphile-worker's. Rows whose arms did not run are left out.
func summarizeDrain(b *testing.B, arms []*arm, byName map[string]*arm, perArm int) {
	graphile, river1 := byName["graphile-local"], byName["river-1ms"]
	nss := []int{10, 1000}
	targets := map[string][2]string{"graphile-local": {"≥ 1.1×", "≥ 1.0×"}, "river-1ms": {"≥ 1.5×", "≥ 1.3×"}}
	for _, peer := range []*arm{graphile, river1} {
		for i, ns := range nss {
			best := bestFair(arms, ns, perArm)
			if peer == nil || best == nil {
				continue
			}
			r := best.rate(perArm) / peer.rate(perArm)
			b.ReportMetric(r, fmt.Sprintf("best-fair-%d/%s", ns, peer.name))
			summary.record(fmt.Sprintf("best fair %s namespaces / %s (rows/s)", thousands(ns), peer.name), "%.2f×",
				targets[peer.name][i], r, "best: "+best.name)
		}
	}
	for _, ns := range nss {
		fair, unscoped := byName[fmt.Sprintf("fair-%d-wide", ns)], byName[fmt.Sprintf("unscoped-%d-wide", ns)]
		if fair != nil && unscoped != nil {
			r := fair.rate(perArm) / unscoped.rate(perArm)
			if ns == 1000 { // 10's is reported above as fair/unscoped-10-wide
				b.ReportMetric(r, "fair/unscoped-1000-wide")
			}
			summary.record(fmt.Sprintf("fair / the same dispatcher unscoped, %s namespaces, BatchSize 1,000 (rows/s)", thousands(ns)), "%.2f", "≥ 0.95", r, "")
		}
	}
	best := bestFair(arms, 10, perArm)
	if best == nil || graphile == nil || !best.cpuKnown || !graphile.cpuKnown || graphile.pgCPU <= 0 {
		return
	}
	ours := float64(best.pgCPU.Microseconds()) / float64(perArm)
	theirs := float64(graphile.pgCPU.Microseconds()) / float64(perArm)
	b.ReportMetric(ours/theirs, "best-fair-10/graphile-local-pg")
	note := "best: " + best.name
	summary.record("PostgreSQL CPU per row, best fair 10 namespaces (µs)", "%.1f", "≤ 13 on the quiet machine", ours, note)
	summary.record("PostgreSQL CPU per row, graphile-local (µs)", "%.1f", "", theirs, "")
	summary.record("PostgreSQL CPU per row, best fair 10 namespaces / graphile-local", "%.2f×", "≤ 1.0×", ours/theirs, note)
}

// thousands formats n with a comma between thousands, as the README does.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// runDrainArms runs every arm once per iteration of b, in an order that
// rotates from iteration to iteration, drains of rows rows, summing each
// arm's drain times, sweeps, CPU and round trips; it returns the rows
// each arm drained in all.
func runDrainArms(b *testing.B, arms []*arm, rows int) (perArm int) {
	for _, a := range arms {
		a.cpuKnown = true
	}
	iters := rotateArms(b, len(arms), func(i int) {
		a := arms[i]
		var before int64
		if a.trips != nil {
			before = a.trips.n.Load()
		}
		d, st := a.stats(b, rows)
		a.total += d
		a.sweeps += st.sweeps
		a.swept += st.swept
		a.pgCPU += st.pgCPU
		a.procCPU += st.procCPU
		a.cpuKnown = a.cpuKnown && st.pgCPU >= 0 && st.procCPU >= 0
		if a.trips != nil {
			a.tripN += a.trips.n.Load() - before
		}
	})
	return rows * iters
}

// rotateArms reports allocations and, once per iteration of b, runs each
// of n arms (run(i) runs arm i) in an order that rotates from iteration
// to iteration, so that the machine's noise falls on all alike; it
// returns the iterations run.
func rotateArms(b *testing.B, n int, run func(i int)) (iters int) {
	b.ReportAllocs()
	for b.Loop() {
		for k := range n {
			run((iters + k) % n)
		}
		iters++
	}
	return iters
}

// reportDrainArm reports a's rows/s over perArm rows, cpu per row as
// a.name+"-"+cpuUnit when every drain's was read, its round trips per row
// when counted, and for a dispatcher arm its mean sweep and the share of
// the drain spent sweeping.
func reportDrainArm(b *testing.B, a *arm, perArm int, cpu time.Duration, cpuUnit string) {
	b.ReportMetric(a.rate(perArm), a.name+"-rows/s")
	if a.cpuKnown {
		b.ReportMetric(float64(cpu.Microseconds())/float64(perArm), a.name+"-"+cpuUnit)
	}
	if a.trips != nil {
		// The enqueue's, TRUNCATE's and ANALYZE's few trips included.
		b.ReportMetric(float64(a.tripN)/float64(perArm), a.name+"-trips/row")
	}
	if a.sweeps > 0 {
		// The mean sweep, and the share of the drain the one sweep
		// loop spent sweeping: near 1, sweep latency bounds the rate.
		b.ReportMetric(float64(a.swept.Microseconds())/1000/float64(a.sweeps), a.name+"-sweep-ms")
		b.ReportMetric(a.swept.Seconds()/a.total.Seconds(), a.name+"-sweeping")
	}
}
