package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// drainCounter signals each time another chunk of rows is settled.
type drainCounter struct {
	dispatch.NopMetrics
	mu      sync.Mutex
	chunk   int
	settled int
	drained chan struct{} // receives when settled reaches a multiple of chunk
}

func (c *drainCounter) Completed(e dispatch.CompletionEvent) {
	if e.State != outbox.StateSettled {
		return
	}
	c.mu.Lock()
	c.settled++
	full := c.settled%c.chunk == 0
	c.mu.Unlock()
	if full {
		c.drained <- struct{}{}
	}
}

// BenchmarkDispatch drains 20,000 rows end to end (sweep, no-op handler,
// batched completion, Workers 100, BatchSize 100, no quota) on memstore,
// and reports rows/s. memstore is naive: every call scans and copies every
// row it holds, so a 20,000-row backlog would measure memstore alone. The
// rows therefore arrive in chunks of 1,000, each enqueued once the last is
// drained (its settled rows purged), which also exercises the wake-up: the
// running dispatcher learns of each chunk from the store's notification.
// The capped arm drains one namespace at quota 50 with the same 100
// workers: each sweep fills the quota, and the written results wake the
// next (a loop that waited for its poll would drain 50 rows a second).
func BenchmarkDispatch(b *testing.B) {
	const rows, chunk = 20_000, 1_000
	for _, c := range []struct {
		name              string
		namespaces, quota int
	}{
		{"namespaces=10", 10, backpressure.Unlimited},
		{"namespaces=1000", 1000, backpressure.Unlimited},
		{"capped/namespaces=1/quota=50", 1, 50},
	} {
		namespaces := c.namespaces
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				s := newStore(b, memstore.Options{})
				bp := newBP(b, 100, c.quota, nil)
				c := &drainCounter{chunk: chunk, drained: make(chan struct{}, 1)}
				d, err := dispatch.New(bp, s, noop, dispatch.Options{Workers: 100, Metrics: c, Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				go func() { ran <- d.Run(ctx) }()
				b.StartTimer()
				t0 := time.Now()
				for i := range rows / chunk {
					enqueue(b, s, fmt.Sprintf("c%d", i), chunk, namespaces)
					<-c.drained
					if _, err := s.PurgeSettled(context.Background(), time.Now().Add(time.Hour), chunk); err != nil {
						b.Fatal(err)
					}
				}
				total += time.Since(t0)
				b.StopTimer()
				cancel()
				if err := <-ran; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(rows)*float64(b.N)/total.Seconds(), "rows/s")
		})
	}
}

// pollOnly hides a store's Subscribe: the dispatcher can only poll.
type pollOnly struct{ dispatch.Store }

// BenchmarkLatency measures the time from a row's enqueue to its handler's
// start at a steady rate of one row every 2ms, with the store's wake-ups
// and with polling alone (PollInterval 50ms), and reports its p50 and p99.
// A wake-up should beat the poll interval by far.
func BenchmarkLatency(b *testing.B) {
	const poll = 50 * time.Millisecond
	for _, wake := range []bool{true, false} {
		name := "wakeup"
		if !wake {
			name = "poll-only"
		}
		b.Run(name, func(b *testing.B) {
			s := newStore(b, memstore.Options{})
			var store dispatch.Store = s
			if !wake {
				store = pollOnly{s}
			}
			lat := make(chan time.Duration, b.N)
			handler := func(ctx context.Context, row outbox.Row) error {
				lat <- time.Since(row.EnqueuedAt)
				return nil
			}
			d, err := dispatch.New(newBP(b, 100, backpressure.Unlimited, nil), store, handler, dispatch.Options{
				Workers: 8, PollInterval: poll, Logger: quietLogger(),
			})
			if err != nil {
				b.Fatal(err)
			}
			stop := start(b, d)
			b.ResetTimer()
			for i := range b.N {
				_, err := s.Enqueue(context.Background(), []outbox.Message{{DispatchKey: fmt.Sprintf("l-%d", i), Namespace: "ns", TaskQueue: "q"}})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			all := make([]time.Duration, b.N)
			for i := range all {
				all[i] = <-lat
			}
			b.StopTimer()
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[(len(all)*99)/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkRatedDrain drains 60 rows of one namespace alone at r = 40/s,
// burst 10, with default options (a 1s poll) on memstore, and reports the
// rate its rows started at over r (starts/s ÷ r, from the first start to
// the last): at least 0.95 when the dispatcher sweeps as each token comes
// due, about 0.25 when it waited for the poll after a sweep held by the
// rate. Each iteration takes about 1.5s.
func BenchmarkRatedDrain(b *testing.B) {
	const rows, perSecond, burst = 60, 40.0, 10
	b.ReportAllocs()
	var ratio float64
	for b.Loop() {
		b.StopTimer()
		s := newStore(b, memstore.Options{})
		enqueue(b, s, "r", rows, 1)
		bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited,
			Rates: map[string]backpressure.Rate{"ns-0": {PerSecond: perSecond, Burst: burst}}}, allShards(b, memstore.DefaultShardCount))
		if err != nil {
			b.Fatal(err)
		}
		starts := make(chan time.Time, rows)
		handler := func(context.Context, outbox.Row) error { starts <- time.Now(); return nil }
		d, err := dispatch.New(bp, s, handler, dispatch.Options{Workers: 16, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		stop := start(b, d)
		b.StartTimer()
		first := <-starts
		last := first
		for range rows - 1 {
			last = <-starts
		}
		b.StopTimer()
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		ratio += float64(rows-1) / last.Sub(first).Seconds() / perSecond
		b.StartTimer()
	}
	b.ReportMetric(ratio/float64(b.N), "starts/s÷r")
}
