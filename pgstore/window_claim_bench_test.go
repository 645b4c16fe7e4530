package pgstore_test

import (
	"context"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// BenchmarkWindowClaimDrain drains 20,000 rows over 1,000 namespaces (two
// task queues each) with Sweep at BatchSize 100, settling each sweep's
// rows in one Complete, on two identical stores side by side, sweep by
// sweep: one with Options.WindowClaims (the window rule claimed by ClaimOutboxWindow), one
// with ClaimOutboxWindow hidden (a counted window, then the claim). It
// reports both rates, their ratio and the round trips per row.
//
//	go test -run '^$' -bench WindowClaimDrain -benchtime 3x ./pgstore
func BenchmarkWindowClaimDrain(b *testing.B) {
	const (
		backlog    = 20_000
		namespaces = 1000
		batch      = 100
	)
	ctx := context.Background()
	newStore := func(window bool) *drainStore {
		tr := &tracer{}
		s, err := pgstore.New(ctx, newPool(b, tr, 2), pgstore.Options{Schema: testSchema(b), WindowClaims: window})
		if err != nil {
			b.Fatal(err)
		}
		return &drainStore{s: s, tr: tr}
	}
	window, counted := newStore(true), newStore(false)
	all, _ := backpressure.AllShards(pgstore.DefaultShardCount)
	next := 0
	type sweepStore = backpressure.OutboxStore[outbox.Row]
	hidden := func(s *pgstore.Store) sweepStore {
		c := s.Claimer()
		return struct {
			sweepStore
			backpressure.Counter
		}{c, c.(backpressure.Counter)}
	}
	// step is one Sweep through store and one Complete of its rows.
	step := func(d *drainStore, bp *backpressure.Backpressure, store sweepStore) int {
		return d.step(b, func() ([]outbox.Row, error) {
			rows, _, err := backpressure.Sweep(ctx, bp, store)
			return rows, err
		}, d.settleBatch)
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		window.fill(b, next, backlog, namespaces, 2)
		counted.fill(b, next, backlog, namespaces, 2)
		next += backlog
		bw, err1 := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: backpressure.Unlimited}, all)
		bc, err2 := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: backpressure.Unlimited}, all)
		if err1 != nil || err2 != nil {
			b.Fatal(err1, err2)
		}
		b.StartTimer()
		for wl, cl := backlog, backlog; wl > 0 || cl > 0; {
			if wl > 0 {
				n := step(window, bw, window.s.Claimer())
				if n == 0 {
					b.Fatalf("window drain: %d rows left, and the sweep claimed none", wl)
				}
				wl -= n
			}
			if cl > 0 {
				n := step(counted, bc, hidden(counted.s))
				if n == 0 {
					b.Fatalf("counted drain: %d rows left, and the sweep claimed none", cl)
				}
				cl -= n
			}
		}
	}
	b.StopTimer()
	rate := func(d *drainStore) float64 { return float64(d.rows) / d.d.Seconds() }
	b.ReportMetric(rate(window), "window-rows/s")
	b.ReportMetric(rate(counted), "counted-rows/s")
	b.ReportMetric(rate(window)/rate(counted), "window/counted")
	b.ReportMetric(float64(window.trips)/float64(window.rows), "window-trips/row")
	b.ReportMetric(float64(counted.trips)/float64(counted.rows), "counted-trips/row")
}
