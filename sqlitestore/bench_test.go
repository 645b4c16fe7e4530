package sqlitestore

import (
	"context"
	"fmt"
	"os"
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
			timed := &claimTimer{claimer: claimerOf(fair)}
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
				rows, err = claimerOf(unscoped).ClaimOutboxRowsUnscoped(ctx, shards, benchBatch)
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
	*claimer
	d time.Duration
}

func (c *claimTimer) InSweepTx(ctx context.Context, fn func(tx backpressure.OutboxStore[outbox.Row]) error) error {
	return c.claimer.InSweepTx(ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
		return fn(&timedView{tx.(sweepStore), c})
	})
}

// sweepStore is what the sweep transaction's view implements.
type sweepStore interface {
	backpressure.OutboxStore[outbox.Row]
	backpressure.Counter
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

// drainRows is the backlog each drain empties.
const drainRows = 20_000

// BenchmarkDrain measures what a dispatcher's user feels: the end-to-end
// drain of a backlog of drainRows rows (claim, no-op work, complete) on a
// file store, three ways side by side in each iteration, each on its own
// fresh store with the same backlog spread round-robin over the
// namespaces:
//
//   - fair: backpressure.Sweep (batch benchBatch, its sweep transaction)
//     and one batched Complete of the sweep's rows;
//   - unscoped: ClaimOutboxRowsUnscoped of benchBatch rows and one batched
//     Complete;
//   - per-row: Sweep as in fair, then one Settle per row (the drain before
//     batched completion).
//
// It reports each drain's rows/s and commits/row (write transactions
// committed per row drained), and the ratios fair/unscoped and
// fair/per-row. Only the drains are timed, not the enqueueing.
func BenchmarkDrain(b *testing.B) {
	for _, namespaces := range []int{10, 1000} {
		b.Run(fmt.Sprintf("namespaces=%d", namespaces), func(b *testing.B) {
			b.ReportAllocs()
			type result struct {
				rows    int
				commits int64
				d       time.Duration
			}
			modes := []string{"fair", "unscoped", "per-row"}
			total := map[string]*result{}
			for _, m := range modes {
				total[m] = &result{}
			}
			template := drainTemplate(b, namespaces)
			for b.Loop() {
				for _, mode := range modes {
					s := drainStore(b, template)
					r := total[mode]
					start, commits := time.Now(), s.commits.Load()
					r.rows += drain(b, s, mode)
					r.d += time.Since(start)
					r.commits += s.commits.Load() - commits
					_ = s.Close()
				}
			}
			rate := func(m string) float64 { return float64(total[m].rows) / total[m].d.Seconds() }
			for _, m := range modes {
				b.ReportMetric(rate(m), m+"-rows/s")
				b.ReportMetric(float64(total[m].commits)/float64(total[m].rows), m+"-commits/row")
			}
			b.ReportMetric(rate("fair")/rate("unscoped"), "fair/unscoped")
			b.ReportMetric(rate("fair")/rate("per-row"), "fair/per-row")
		})
	}
}

// drainTemplate writes a closed file store holding drainRows rows, one
// task queue per namespace, enqueued round-robin, and returns its path.
func drainTemplate(b *testing.B, namespaces int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "template.db")
	s, err := Open(b.Context(), path, Options{SyncNormal: true})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]outbox.Message, drainRows)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: "k" + strconv.Itoa(i), Namespace: "ns" + strconv.Itoa(i%namespaces), TaskQueue: "q", Payload: []byte("payload")}
	}
	if _, err := s.Enqueue(b.Context(), msgs); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil { // checkpoints the WAL into the file
		b.Fatal(err)
	}
	return path
}

// drainStore opens a copy of the template store.
func drainStore(b *testing.B, template string) *Store {
	b.Helper()
	data, err := os.ReadFile(template)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "drain.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	s, err := Open(b.Context(), path, Options{SyncNormal: true})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// drain empties s the way mode says and returns how many rows it drained,
// drainRows.
func drain(b *testing.B, s *Store, mode string) int {
	done := drainAll(b, s, mode)
	if done != drainRows {
		b.Fatalf("%s drained %d rows, want %d", mode, done, drainRows)
	}
	return done
}

// drainAll empties s the way mode says and returns how many rows it
// drained.
func drainAll(b *testing.B, s *Store, mode string) int {
	ctx := b.Context()
	shards, err := backpressure.AllShards(s.ShardCount())
	if err != nil {
		b.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: benchBatch, DefaultQuota: backpressure.Unlimited}, shards)
	if err != nil {
		b.Fatal(err)
	}
	done := 0
	completions := make([]outbox.Completion, 0, benchBatch)
	for {
		var rows []outbox.Row
		if mode == "unscoped" {
			rows, err = claimerOf(s).ClaimOutboxRowsUnscoped(ctx, shards, benchBatch)
		} else {
			rows, _, err = backpressure.Sweep(ctx, bp, s.Claimer())
		}
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		if mode == "per-row" {
			for _, r := range rows {
				if err := s.Settle(ctx, r.Lease()); err != nil {
					b.Fatal(err)
				}
			}
		} else {
			completions = completions[:0]
			for _, r := range rows {
				completions = append(completions, outbox.SettleRow(r))
			}
			res, err := s.Complete(ctx, completions)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		}
		done += len(rows)
	}
	return done
}

// costRows is the backlog BenchmarkDrainCost drains over 10 namespaces;
// over 1,000 it drains ten times as many, 20 rows a namespace.
const costRows = 2_000

// BenchmarkDrainCost is the drain of BenchmarkDrain made for counting
// instructions, which, unlike times, repeat on a loaded machine: each
// iteration copies a file store holding costRows rows over 10 namespaces
// (or 10 × costRows over 1,000), opens it, drains it in one mode (fair:
// Sweep then one Complete per batch; unscoped: the unscoped claim then one
// Complete) and closes it; mode none only copies, opens and closes, the
// cost to subtract. Run each mode under callgrind for a fixed count:
//
//	go test -c -o /tmp/sqlitestore.test
//	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOGC=off GOMAXPROCS=1 valgrind --tool=callgrind \
//		--callgrind-out-file=/tmp/cg.fair /tmp/sqlitestore.test -test.run '^$' \
//		-test.bench 'DrainCost/^namespaces=10$/^mode=fair$' -test.benchtime 3x
//
// then (Ir of fair − Ir of none) / (3 × costRows) is the instructions per
// row drained. (asyncpreemptoff: callgrind aborts on Go's preemption
// signals; cpu.rdtscp=off: valgrind 3.19 cannot run RDTSCP, which the
// runtime's lock timing uses; GOMAXPROCS=1 keeps the scheduler's own work
// from varying between runs, to within 0.2%.)
func BenchmarkDrainCost(b *testing.B) {
	for _, namespaces := range []int{10, 1000} {
		rows := costRows
		if namespaces > 10 {
			rows *= 10
		}
		for _, mode := range []string{"fair", "unscoped", "none"} {
			b.Run(fmt.Sprintf("namespaces=%d/mode=%s", namespaces, mode), func(b *testing.B) {
				b.ReportAllocs()
				template := costTemplate(b, rows, namespaces)
				drained := 0
				start := time.Now()
				for b.Loop() {
					s := drainStore(b, template)
					if mode != "none" {
						n := drainAll(b, s, mode)
						if n != rows {
							b.Fatalf("%s drained %d rows, want %d", mode, n, rows)
						}
						drained += n
					}
					_ = s.Close()
				}
				if drained > 0 {
					b.ReportMetric(float64(drained)/time.Since(start).Seconds(), "rows/s")
				}
			})
		}
	}
}

// costTemplate writes a closed file store holding rows rows over
// namespaces namespaces, one task queue each, enqueued round-robin.
func costTemplate(b *testing.B, rows, namespaces int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "template.db")
	s, err := Open(b.Context(), path, Options{SyncNormal: true})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]outbox.Message, rows)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: "k" + strconv.Itoa(i), Namespace: "ns" + strconv.Itoa(i%namespaces), TaskQueue: "q", Payload: []byte("payload")}
	}
	if _, err := s.Enqueue(b.Context(), msgs); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}
