package bench

import (
	"flag"
	"fmt"
	"testing"
)

// Backlogs of BenchmarkBacklogGrowth: the drain's 20,000 rows and ten
// times as many; under -benchtime=1x (bench-smoke) a tenth of each, to
// prove it runs.
const (
	growthSmall = 20_000
	growthLarge = 200_000
)

// growthBacklogs returns the small and the large backlog.
func growthBacklogs() (small, large int) {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return growthSmall / 10, growthLarge / 10
	}
	return growthSmall, growthLarge
}

// BenchmarkBacklogGrowth is how the dispatcher's cost grows with the
// backlog: the fair-10-wide arm of BenchmarkDrain (pgstore, the fair
// planner, 10 namespaces × 2 task queues, Workers and BatchSize 1,000; the
// best fair arm at 10 namespaces in the README's runs) drains 200,000 rows
// and 20,000 rows, the two in an order that alternates from iteration to
// iteration, on one schema. It reports each backlog's rows/s and
// pg-µs/row (the CPU of the arm's PostgreSQL backends per row, see
// backendCPU) and their ratios, large over small: pg-large/small (issue
// 31's target ≤ 1.1) and rate-large/small. Each iteration drains 220,000
// rows, so it is a benchmark of its own, which make bench-drain runs:
//
//	cd bench && go test -run '^$' -bench BacklogGrowth -benchtime 2x -timeout 30m
func BenchmarkBacklogGrowth(b *testing.B) {
	small, large := growthBacklogs()
	trips := &tripCounter{}
	pool := openTracedPool(b, 0, trips)
	cpuAdmin = openPool(b, 2)
	s := newDispatchSetup(b, pool, 10, false)
	s.workers, s.batch = wideWorkers, wideWorkers
	arms := []*arm{{name: "small", stats: s.drain}, {name: "large", stats: s.drain}}
	for _, a := range arms {
		a.cpuKnown = true
	}
	sizes := []int{small, large}
	var drained [2]int // rows drained in all, per arm
	rotateArms(b, len(arms), func(i int) {
		a := arms[i]
		d, st := a.stats(b, sizes[i])
		a.total += d
		a.pgCPU += st.pgCPU
		a.cpuKnown = a.cpuKnown && st.pgCPU >= 0
		drained[i] += sizes[i]
	})
	rate := func(i int) float64 { return float64(drained[i]) / arms[i].total.Seconds() }
	perRow := func(i int) float64 { return float64(arms[i].pgCPU.Microseconds()) / float64(drained[i]) }
	for i, a := range arms {
		b.ReportMetric(rate(i), fmt.Sprintf("%d-rows/s", sizes[i]))
		if a.cpuKnown {
			b.ReportMetric(perRow(i), fmt.Sprintf("%d-pg-µs/row", sizes[i]))
		}
	}
	b.ReportMetric(rate(1)/rate(0), "rate-large/small")
	if arms[0].cpuKnown && arms[1].cpuKnown && arms[0].pgCPU > 0 {
		r := perRow(1) / perRow(0)
		b.ReportMetric(r, "pg-large/small")
		summary.record("PostgreSQL CPU per row, fair-10-wide, "+thousands(large)+" rows / "+thousands(small)+" rows", "%.2f×", "≤ 1.1×", r,
			fmt.Sprintf("%.1f / %.1f µs", perRow(1), perRow(0)))
	}
}
