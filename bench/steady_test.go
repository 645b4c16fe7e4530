package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// steadyFor is how long each arm of BenchmarkSteady runs its producer
// (100 ms under -benchtime=1x, to prove it runs).
func steadyFor() time.Duration {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return 100 * time.Millisecond
	}
	return 3 * time.Second
}

// steadyArgs is River's job for the steady state: its sequence number.
type steadyArgs struct {
	Seq int `json:"seq"`
}

func (steadyArgs) Kind() string { return "steady" }

type steadyWorker struct {
	river.WorkerDefaults[steadyArgs]
	started func(seq int)
}

func (w *steadyWorker) Work(_ context.Context, j *river.Job[steadyArgs]) error {
	w.started(j.Args.Seq)
	return nil
}

// latencies records, per row, the time from its enqueue's commit (the
// producer's clock, when Enqueue or Insert returned) to its handler's
// start.
type latencies struct {
	mu        sync.Mutex
	committed map[int]time.Time
	early     map[int]time.Time // started before the producer recorded the commit
	all       []time.Duration
}

func newLatencies() *latencies {
	return &latencies{committed: map[int]time.Time{}, early: map[int]time.Time{}}
}

func (l *latencies) commit(seq int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.early[seq]; ok {
		l.all = append(l.all, max(0, s.Sub(at)))
		delete(l.early, seq)
		return
	}
	l.committed[seq] = at
}

func (l *latencies) start(seq int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.committed[seq]; ok {
		l.all = append(l.all, now.Sub(c))
		delete(l.committed, seq)
		return
	}
	l.early[seq] = now
}

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// produce enqueues one row every 1/rate for d, by insert(seq), and returns
// how many it enqueued.
func produce(tb testing.TB, rate int, d time.Duration, l *latencies, insert func(seq int) error) int {
	tb.Helper()
	every := time.Second / time.Duration(rate)
	begin := time.Now()
	n := 0
	for ; time.Since(begin) < d; n++ {
		if wait := time.Until(begin.Add(time.Duration(n) * every)); wait > 0 {
			time.Sleep(wait)
		}
		if err := insert(n); err != nil {
			tb.Fatalf("enqueue %d: %v", n, err)
		}
		l.commit(n, time.Now())
	}
	return n
}

// BenchmarkSteady is the steady state: a producer enqueues no-op rows one
// at a time at a steady rate (500 and 2,000 rows/s) for 3 s, on a pool of
// its own, while a consumer runs: the dispatcher on pgstore (Workers 100,
// BatchSize 100, its LISTEN/NOTIFY wake-ups) at Options.Coalesce none, 2 ms
// (the default), 10 ms and 50 ms, and River v0.51.2 (one queue of 100 workers)
// with its default fetch cooldown and with 1 ms. It reports, per arm, the
// p50 and p99 from the enqueue's commit to the handler's start, and the
// CPU of the consumer's PostgreSQL backends per row (see backendCPU; the
// producer's backends are not in it).
//
//	cd bench && go test -run '^$' -bench 'Steady$' -benchtime 1x -count 3 -timeout 30m
func BenchmarkSteady(b *testing.B) {
	cpuAdmin = openPool(b, 2)
	for _, rate := range []int{500, 2000} {
		arms := []struct {
			name string
			run  func(b *testing.B, l *latencies) (rows int, cpu time.Duration)
		}{
			{"dispatch-coalesce-none", func(b *testing.B, l *latencies) (int, time.Duration) { return steadyDispatch(b, rate, -1, l) }},
			{"dispatch-coalesce-2ms", func(b *testing.B, l *latencies) (int, time.Duration) { return steadyDispatch(b, rate, 0, l) }},
			{"dispatch-coalesce-10ms", func(b *testing.B, l *latencies) (int, time.Duration) {
				return steadyDispatch(b, rate, 10*time.Millisecond, l)
			}},
			{"dispatch-coalesce-50ms", func(b *testing.B, l *latencies) (int, time.Duration) {
				return steadyDispatch(b, rate, 50*time.Millisecond, l)
			}},
			{"river-default", func(b *testing.B, l *latencies) (int, time.Duration) { return steadyRiver(b, rate, 0, l) }},
			{"river-1ms", func(b *testing.B, l *latencies) (int, time.Duration) {
				return steadyRiver(b, rate, time.Millisecond, l)
			}},
		}
		for _, a := range arms {
			b.Run(fmt.Sprintf("%s-%d", a.name, rate), func(b *testing.B) {
				b.ReportAllocs()
				var all []time.Duration
				var cpu time.Duration
				rows := 0
				for b.Loop() {
					l := newLatencies()
					n, c := a.run(b, l)
					rows += n
					cpu += c
					all = append(all, l.all...)
				}
				slices.Sort(all)
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
				if cpu >= 0 {
					b.ReportMetric(float64(cpu.Microseconds())/float64(rows), "pg-µs/row")
				}
			})
		}
	}
}

func steadyDispatch(b *testing.B, rate int, coalesce time.Duration, l *latencies) (int, time.Duration) {
	pool := openPool(b, 0)
	ctx := context.Background()
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: freshSchema(b, pool, "steady")})
	if err != nil {
		b.Fatalf("pgstore.New: %v", err)
	}
	defer s.Close()
	producer, err := pgstore.New(ctx, openPool(b, 4), pgstore.Options{Schema: s.Schema()})
	if err != nil {
		b.Fatalf("pgstore.New: %v", err)
	}
	defer producer.Close()
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: dispatchBatch, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		b.Fatal(err)
	}
	handler := func(_ context.Context, row outbox.Row) error {
		var seq int
		_, _ = fmt.Sscanf(row.DispatchKey, "s%d", &seq)
		l.start(seq)
		return nil
	}
	disp, err := dispatch.New(bp, s, handler, dispatch.Options{Workers: dispatchWorkers, Coalesce: coalesce, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- disp.Run(runCtx) }()
	time.Sleep(time.Second) // subscribed and idle
	cpu := startCPU(cpuAdmin, pool)
	n := produce(b, rate, steadyFor(), l, func(seq int) error {
		_, err := producer.Enqueue(ctx, []outbox.Message{{DispatchKey: fmt.Sprintf("s%d", seq), Namespace: fmt.Sprintf("ns%d", seq%10), TaskQueue: "q"}})
		return err
	})
	for deadline := time.Now().Add(time.Minute); l.count() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("dispatch: %d of %d rows started after a minute", l.count(), n)
		}
	}
	time.Sleep(20 * time.Millisecond) // the last results written
	c := cpu.stop()
	stop()
	if err := <-ran; err != nil {
		b.Fatalf("dispatch Run: %v", err)
	}
	return n, c
}

func steadyRiver(b *testing.B, rate int, cooldown time.Duration, l *latencies) (int, time.Duration) {
	ctx := context.Background()
	pool := openPool(b, 40)
	r := newRiver(b, pool)
	insertPool := openPool(b, 4)
	inserter, err := river.NewClient(riverpgxv5.New(insertPool), &river.Config{Schema: r.schema, Logger: quietLogger()})
	if err != nil {
		b.Fatalf("river insert client: %v", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &steadyWorker{started: l.start})
	cfg := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}, Workers: workers, Schema: r.schema, Logger: quietLogger()}
	if cooldown > 0 {
		cfg.FetchCooldown = cooldown
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		b.Fatalf("river.NewClient: %v", err)
	}
	if err := client.Start(ctx); err != nil {
		b.Fatalf("river Start: %v", err)
	}
	time.Sleep(time.Second) // started, listening, idle
	cpu := startCPU(cpuAdmin, pool)
	n := produce(b, rate, steadyFor(), l, func(seq int) error {
		_, err := inserter.Insert(ctx, steadyArgs{Seq: seq}, nil)
		return err
	})
	for deadline := time.Now().Add(time.Minute); l.count() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("river: %d of %d jobs started after a minute", l.count(), n)
		}
	}
	time.Sleep(20 * time.Millisecond)
	c := cpu.stop()
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		b.Fatalf("river Stop: %v", err)
	}
	return n, c
}
