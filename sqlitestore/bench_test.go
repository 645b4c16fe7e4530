package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// benchBatch is the claim budget of both the fair sweep and the unscoped
// claim.
const benchBatch = 100

// benchBacklog is the number of claimable rows each store holds before
// every claim, spread evenly over the namespaces.
const benchBacklog = 10_000

// BenchmarkFairSweepVsUnscoped measures claim throughput (rows/s) of a full
// fair sweep (backpressure.Sweep: two counts, a plan and a scoped claim, in
// the store's sweep transaction)
// against a plain unscoped oldest-first claim of the same batch size, each
// on its own file store with the same backlog. Each iteration runs one of
// each; only the claims are timed, then the claimed rows are settled and
// replaced on the same routes so the backlog stays the same. It reports
// both rates and their ratio (target: fair/unscoped ≥ 0.8), and splits the
// sweep: claim-only/unscoped is the rate of the sweep's scoped claim alone
// against the unscoped claim (the ratio a sweep would reach if counting were
// free), rest-µs/sweep the time of the rest of the sweep (its counts, its
// plan and, in a sweep transaction, its begin and commit).
func BenchmarkFairSweepVsUnscoped(b *testing.B) {
	for _, namespaces := range []int{10, 1000} {
		b.Run(fmt.Sprintf("namespaces=%d", namespaces), func(b *testing.B) {
			b.ReportAllocs()
			fair, unscoped := benchStore(b, namespaces), benchStore(b, namespaces)
			shards, err := backpressure.AllShards(fair.ShardCount())
			if err != nil {
				b.Fatal(err)
			}
			bp, err := backpressure.New(backpressure.Config{BatchSize: benchBatch, DefaultQuota: backpressure.Unlimited}, shards)
			if err != nil {
				b.Fatal(err)
			}
			ctx := b.Context()
			timed := &claimTimer{Store: fair}
			var fairRows, unscopedRows int
			var fairTime, unscopedTime time.Duration
			next := benchBacklog
			for b.Loop() {
				start := time.Now()
				rows, _, err := backpressure.Sweep(ctx, bp, timed)
				fairTime += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				fairRows += len(rows)
				next = benchRefill(b, fair, rows, next)

				start = time.Now()
				rows, err = unscoped.ClaimOutboxRowsUnscoped(ctx, shards, benchBatch)
				unscopedTime += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				unscopedRows += len(rows)
				next = benchRefill(b, unscoped, rows, next)
			}
			fairRate := float64(fairRows) / fairTime.Seconds()
			unscopedRate := float64(unscopedRows) / unscopedTime.Seconds()
			b.ReportMetric(fairRate, "fair-rows/s")
			b.ReportMetric(unscopedRate, "unscoped-rows/s")
			b.ReportMetric(fairRate/unscopedRate, "fair/unscoped")
			b.ReportMetric(float64(fairRows)/timed.d.Seconds()/unscopedRate, "claim-only/unscoped")
			b.ReportMetric(float64((fairTime-timed.d).Microseconds())/float64(b.N), "rest-µs/sweep")
		})
	}
}

// claimTimer times the scoped claims of the sweeps it runs, which run in
// the store's sweep transaction.
type claimTimer struct {
	*Store
	d time.Duration
}

func (c *claimTimer) InSweepTx(ctx context.Context, fn func(tx backpressure.OutboxStore[outbox.Row]) error) error {
	return c.Store.InSweepTx(ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
		return fn(&timedView{tx.(sweepStore), c})
	})
}

// sweepStore is what the sweep transaction's view implements.
type sweepStore interface {
	backpressure.OutboxStore[outbox.Row]
	backpressure.PendingWindowCounter
}

// timedView is a sweep transaction's view whose claims the claimTimer times.
type timedView struct {
	sweepStore
	c *claimTimer
}

func (v *timedView) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	start := time.Now()
	defer func() { v.c.d += time.Since(start) }()
	return v.sweepStore.ClaimOutboxRowsScoped(ctx, f, claims)
}

// benchStore opens a file store holding benchBacklog rows, one task queue
// per namespace, enqueued round-robin.
func benchStore(b *testing.B, namespaces int) *Store {
	b.Helper()
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), Options{SyncNormal: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	msgs := make([]outbox.Message, benchBacklog)
	for i := range msgs {
		ns := "ns" + strconv.Itoa(i%namespaces)
		msgs[i] = outbox.Message{DispatchKey: "k" + strconv.Itoa(i), Namespace: ns, TaskQueue: "q", Payload: []byte("payload")}
	}
	if _, err := s.Enqueue(b.Context(), msgs); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchRefill settles every claimed row and enqueues one new row on the
// route of each claimed one, so the backlog per route stays the same.
func benchRefill(b *testing.B, s *Store, claimed []outbox.Row, next int) int {
	b.Helper()
	if _, err := s.writer.ExecContext(b.Context(), `UPDATE outbox SET state = 2 WHERE state = 1`); err != nil {
		b.Fatal(err)
	}
	msgs := make([]outbox.Message, len(claimed))
	for i, r := range claimed {
		msgs[i] = outbox.Message{DispatchKey: "k" + strconv.Itoa(next), Namespace: r.Namespace, TaskQueue: r.TaskQueue, Payload: r.Payload}
		next++
	}
	if _, err := s.Enqueue(b.Context(), msgs); err != nil {
		b.Fatal(err)
	}
	return next
}
