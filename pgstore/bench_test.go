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

// BenchmarkSweepVsUnscoped measures claim throughput, in rows per second,
// of a full fair sweep (backpressure.Sweep: claimed counts, capped pending
// counts, the plan, one scoped claim) against the plain unscoped
// oldest-first claim of the same batch size, each on its own copy of the
// same outbox: 10 or 1,000 namespaces of 2 task queues each, one node
// owning all 64 shards (or, in the owned=16 cases, a quarter of them, as one
// of four nodes would), batch size 100. Each iteration runs one of each and
// times them separately; the claimed rows are then settled in bulk (with,
// when the node owns a quarter of the shards, three times as many of the
// others', as the three other nodes would) and the backlog topped up,
// outside the timings. It reports fair-rows/s,
// unscoped-rows/s and their ratio fair/unscoped (target ≥ 0.8), and splits
// the sweep: claim-only/unscoped is the rate of the sweep's scoped claim
// alone against the unscoped claim (the ratio a sweep would reach if
// counting were free), rest-µs/sweep the time of the rest of the sweep
// (its counts, its plan and, in a sweep transaction, its begin and commit).
//
//	go test -run '^$' -bench SweepVsUnscoped -benchtime 300x ./pgstore
func BenchmarkSweepVsUnscoped(b *testing.B) {
	for _, namespaces := range []int{10, 1000} {
		for _, quota := range []int{backpressure.Unlimited, 20} {
			q := "unlimited"
			if quota != backpressure.Unlimited {
				q = fmt.Sprint(quota)
			}
			b.Run(fmt.Sprintf("namespaces=%d/quota=%s", namespaces, q), func(b *testing.B) {
				benchmarkSweepVsUnscoped(b, namespaces, quota, pgstore.DefaultShardCount)
			})
		}
		b.Run(fmt.Sprintf("namespaces=%d/quota=unlimited/owned=16", namespaces), func(b *testing.B) {
			benchmarkSweepVsUnscoped(b, namespaces, backpressure.Unlimited, pgstore.DefaultShardCount/4)
		})
	}
}

// benchmarkSweepVsUnscoped runs one case, on a node owning the first owned
// shards. With no quota every route's pending count is capped at the batch
// size (Backpressure.PendingCountCap); a quota of 20 running rows per tenant
// caps it at 20. Either way each sweep claims a full batch: the claimed rows
// are settled between sweeps.
func benchmarkSweepVsUnscoped(b *testing.B, namespaces, quota, owned int) {
	const (
		batch    = 100
		queues   = 2
		backlog  = 20_000 // rows per copy, topped up when half is gone
		refillAt = backlog / 2
	)
	ctx := context.Background()
	ids := make([]int, owned)
	for i := range ids {
		ids[i] = i
	}
	shards, err := backpressure.NewOwnedShardFraction(ids, pgstore.DefaultShardCount)
	if err != nil {
		b.Fatal(err)
	}
	fair := newBenchStore(b, ctx)
	plain := newBenchStore(b, ctx)
	bp, err := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: quota}, shards)
	if err != nil {
		b.Fatal(err)
	}

	next := 0 // the next message number
	fill := func(rows int) {
		msgs := make([]outbox.Message, 0, rows)
		for ; len(msgs) < rows; next++ {
			ns := next % namespaces
			msgs = append(msgs, outbox.Message{
				DispatchKey: fmt.Sprintf("m%09d", next),
				Namespace:   fmt.Sprintf("ns%04d", ns),
				TaskQueue:   fmt.Sprintf("q%d", (next/namespaces)%queues),
				Payload:     []byte("payload"),
			})
		}
		for _, s := range []*pgstore.Store{fair, plain} {
			for lo := 0; lo < len(msgs); lo += 5000 {
				if _, err := s.Enqueue(ctx, msgs[lo:min(lo+5000, len(msgs))]); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := adminPool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{s.Schema()}.Sanitize()+".outbox"); err != nil {
				b.Fatal(err)
			}
		}
	}
	settleAll := func(s *pgstore.Store) {
		if _, err := adminPool.Exec(ctx, "UPDATE "+pgx.Identifier{s.Schema()}.Sanitize()+".outbox SET state = 'settled', finished_at = now() WHERE state = 'claimed'"); err != nil {
			b.Fatal(err)
		}
	}
	// The other nodes, when this one owns only some shards: each sweep they
	// claim and settle as many rows of their own shards, oldest first, as
	// this node does of its, so the rows of shards it does not own do not
	// pile up in the indexes it reads.
	others := func(s *pgstore.Store) {
		if owned == pgstore.DefaultShardCount {
			return
		}
		if _, err := adminPool.Exec(ctx, "UPDATE "+pgx.Identifier{s.Schema()}.Sanitize()+`.outbox SET state = 'settled', finished_at = now()
WHERE id IN (SELECT id FROM `+pgx.Identifier{s.Schema()}.Sanitize()+`.outbox WHERE state = 'pending' AND NOT shard = ANY ($1)
	ORDER BY enqueued_at, id LIMIT $2)`, ids, batch*(pgstore.DefaultShardCount/owned-1)); err != nil {
			b.Fatal(err)
		}
	}
	fill(backlog)
	pending := backlog

	timed := &claimTimer{planner: claimerOf(fair)}
	var fairTime, plainTime time.Duration
	var fairRows, plainRows int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rows, _, err := backpressure.Sweep(ctx, bp, timed)
		fairTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		fairRows += len(rows)

		start = time.Now()
		plainClaimed, err := claimerOf(plain).ClaimOutboxRowsUnscoped(ctx, shards, batch)
		plainTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		plainRows += len(plainClaimed)
		if len(rows) != batch || len(plainClaimed) != batch {
			b.Fatalf("iteration %d: fair sweep claimed %d, unscoped %d; want %d each", i, len(rows), len(plainClaimed), batch)
		}

		b.StopTimer()
		settleAll(fair)
		settleAll(plain)
		others(fair)
		others(plain)
		if pending -= batch * pgstore.DefaultShardCount / owned; pending < refillAt {
			fill(backlog - pending)
			pending = backlog
		}
		b.StartTimer()
	}
	b.StopTimer()
	fairRate := float64(fairRows) / fairTime.Seconds()
	plainRate := float64(plainRows) / plainTime.Seconds()
	b.ReportMetric(fairRate, "fair-rows/s")
	b.ReportMetric(plainRate, "unscoped-rows/s")
	b.ReportMetric(fairRate/plainRate, "fair/unscoped")
	b.ReportMetric(float64(fairRows)/timed.d.Seconds()/plainRate, "claim-only/unscoped")
	b.ReportMetric(float64((fairTime-timed.d).Microseconds())/float64(b.N), "rest-µs/sweep")
}

// claimTimer times a store's scoped claims.
type claimTimer struct {
	planner
	d time.Duration
}

func (c *claimTimer) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	start := time.Now()
	defer func() { c.d += time.Since(start) }()
	return c.planner.ClaimOutboxRowsScoped(ctx, f, claims)
}

// newBenchStore returns a store in a fresh schema of its own.
func newBenchStore(b *testing.B, ctx context.Context) *pgstore.Store {
	s, err := pgstore.New(ctx, newPool(b, nil, 2), pgstore.Options{Schema: testSchema(b)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}
