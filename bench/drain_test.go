package bench

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDrainRiver drains a backlog of 20,000 no-op jobs with River
// (10 queues × 100 workers), with its default fetch cooldown and with 1 ms.
func BenchmarkDrainRiver(b *testing.B) {
	const rows = 20_000
	pool := openPool(b)
	r := newRiver(b, pool)
	for _, cooldown := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("cooldown=%v", cooldown), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += r.drain(b, rows, 10, 100, cooldown)
			}
			b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
		})
	}
}
