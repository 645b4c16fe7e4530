package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// BenchmarkDrain is the end-to-end figure users feel: a backlog of 20,000
// rows over 10 or 1,000 namespaces (2 task queues each) drained by one node
// owning every shard, batch size 100, no-op work, three ways in the same
// run, each on its own store (the fair and the unscoped drains take turns,
// sweep by sweep):
//
//   - fair: backpressure.Sweep, then one batched Complete per sweep;
//   - unscoped: the plain oldest-first claim, then one batched Complete;
//   - per-row: backpressure.Sweep, then one Settle per row, as a dispatcher
//     did before Complete existed. Its rate is measured over the first
//     2,000 rows of its backlog only (the rest is dropped untimed): at one
//     synchronous commit per row it is the slowest by far, and its rate per
//     row does not depend on how many rows follow.
//
// It reports rows/s of each, fair/unscoped and fair/per-row, and
// commits/row of each: the store's round trips, each its own transaction
// and commit (a claim, a count, a Complete and a Settle are one statement
// each; a Sweep is one count and one claim). Targets: fair/per-row ≥ 4,
// fair/unscoped ≥ 0.9.
//
//	go test -run '^$' -bench Drain -benchtime 3x ./pgstore
func BenchmarkDrain(b *testing.B) {
	for _, namespaces := range []int{10, 1000} {
		b.Run(fmt.Sprintf("namespaces=%d", namespaces), func(b *testing.B) {
			benchmarkDrain(b, namespaces)
		})
	}
}

// drainStore is one store of the drain benchmark, with its pool's tracer.
type drainStore struct {
	s     *pgstore.Store
	tr    *tracer
	rows  int
	trips int64
	d     time.Duration
}

// fill empties d's outbox and enqueues backlog rows keyed from first, over
// namespaces namespaces of queues task queues each, then VACUUM ANALYZEs
// it, so that every drain starts from the same table.
func (d *drainStore) fill(b *testing.B, first, backlog, namespaces, queues int) {
	ctx := context.Background()
	q := pgx.Identifier{d.s.Schema()}.Sanitize()
	if _, err := adminPool.Exec(ctx, "TRUNCATE "+q+".outbox"); err != nil {
		b.Fatal(err)
	}
	msgs := make([]outbox.Message, 0, backlog)
	for i := first; i < first+backlog; i++ {
		msgs = append(msgs, outbox.Message{
			DispatchKey: fmt.Sprintf("m%09d", i),
			Namespace:   fmt.Sprintf("ns%04d", i%namespaces),
			TaskQueue:   fmt.Sprintf("q%d", (i/namespaces)%queues),
			Payload:     []byte("payload"),
		})
	}
	for lo := 0; lo < len(msgs); lo += 5000 {
		if _, err := d.s.Enqueue(ctx, msgs[lo:min(lo+5000, len(msgs))]); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := adminPool.Exec(ctx, "VACUUM ANALYZE "+q+".outbox"); err != nil {
		b.Fatal(err)
	}
}

// step claims with claim and completes with complete once, and adds its
// time, rows and round trips to d. It returns how many rows it claimed.
func (d *drainStore) step(b *testing.B, claim func() ([]outbox.Row, error), complete func([]outbox.Row) error) int {
	trips := d.tr.queries.Load()
	start := time.Now()
	rows, err := claim()
	if err != nil {
		b.Fatal(err)
	}
	if err := complete(rows); err != nil {
		b.Fatal(err)
	}
	d.d += time.Since(start)
	d.rows += len(rows)
	d.trips += d.tr.queries.Load() - trips
	return len(rows)
}

// settleBatch settles rows in one Complete and returns its first error.
func (d *drainStore) settleBatch(rows []outbox.Row) error {
	completions := make([]outbox.Completion, len(rows))
	for i, r := range rows {
		completions[i] = outbox.SettleRow(r)
	}
	results, err := d.s.Complete(context.Background(), completions)
	for _, r := range results {
		if err == nil {
			err = r.Err
		}
	}
	return err
}

func benchmarkDrain(b *testing.B, namespaces int) {
	const (
		backlog      = 20_000
		perRowSample = 2_000
		batch        = 100
		queues       = 2
	)
	ctx := context.Background()
	newStore := func() *drainStore {
		tr := &tracer{}
		s, err := pgstore.New(ctx, newPool(b, tr, 2), pgstore.Options{Schema: testSchema(b)})
		if err != nil {
			b.Fatal(err)
		}
		return &drainStore{s: s, tr: tr}
	}
	fair, unscoped, perRow := newStore(), newStore(), newStore()
	all, _ := backpressure.AllShards(pgstore.DefaultShardCount)
	newPlanner := func() *backpressure.Backpressure {
		bp, err := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: backpressure.Unlimited}, all)
		if err != nil {
			b.Fatal(err)
		}
		return bp
	}
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, d := range []*drainStore{fair, unscoped, perRow} {
			d.fill(b, next, backlog, namespaces, queues)
		}
		next += backlog
		fairBP, perRowBP := newPlanner(), newPlanner()
		b.StartTimer()

		// The fair and the unscoped drain take turns, sweep by sweep, so
		// that what else the machine does falls on both alike.
		fairClaim := func() ([]outbox.Row, error) {
			rows, _, err := backpressure.Sweep(ctx, fairBP, fair.s.Claimer())
			return rows, err
		}
		unscopedClaim := func() ([]outbox.Row, error) {
			return claimerOf(unscoped.s).ClaimOutboxRowsUnscoped(ctx, all, batch)
		}
		for fairLeft, unscopedLeft := backlog, backlog; fairLeft > 0 || unscopedLeft > 0; {
			if fairLeft > 0 {
				n := fair.step(b, fairClaim, fair.settleBatch)
				if n == 0 {
					b.Fatalf("fair drain: %d rows left, and the sweep claimed none", fairLeft)
				}
				fairLeft -= n
			}
			if unscopedLeft > 0 {
				n := unscoped.step(b, unscopedClaim, unscoped.settleBatch)
				if n == 0 {
					b.Fatalf("unscoped drain: %d rows left, and the claim took none", unscopedLeft)
				}
				unscopedLeft -= n
			}
		}
		for left := perRowSample; left > 0; {
			n := perRow.step(b, func() ([]outbox.Row, error) {
				rows, _, err := backpressure.Sweep(ctx, perRowBP, perRow.s.Claimer())
				return rows, err
			}, func(rows []outbox.Row) error {
				for _, r := range rows {
					if err := perRow.s.Settle(ctx, r.Lease()); err != nil {
						return err
					}
				}
				return nil
			})
			if n == 0 {
				b.Fatalf("per-row drain: %d rows left, and the sweep claimed none", left)
			}
			left -= n
		}
	}
	b.StopTimer()
	rate := func(d *drainStore) float64 { return float64(d.rows) / d.d.Seconds() }
	b.ReportMetric(rate(fair), "fair-rows/s")
	b.ReportMetric(rate(unscoped), "unscoped-rows/s")
	b.ReportMetric(rate(perRow), "per-row-rows/s")
	b.ReportMetric(rate(fair)/rate(unscoped), "fair/unscoped")
	b.ReportMetric(rate(fair)/rate(perRow), "fair/per-row")
	b.ReportMetric(float64(fair.trips)/float64(fair.rows), "fair-commits/row")
	b.ReportMetric(float64(unscoped.trips)/float64(unscoped.rows), "unscoped-commits/row")
	b.ReportMetric(float64(perRow.trips)/float64(perRow.rows), "per-row-commits/row")
}
