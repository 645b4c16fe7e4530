package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

func serviceOpts(workers int) dispatch.ServiceOptions {
	return dispatch.ServiceOptions{
		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 10},
		Options: dispatch.Options{Workers: workers, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
	}
}

// waitUntil polls cond; the 60s failsafe is never what a test asserts.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: failsafe passed", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A dispatch.Service on a SQLite file: Start fails fast on a closed store;
// on an open one it drains the outbox, is ready, and stops cleanly; Stop's
// deadline cancels a handler stuck past it, whose row is retried.
func TestService(t *testing.T) {
	t.Run("StartFailsOnAClosedStore", func(t *testing.T) {
		s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
		svc, err := dispatch.NewService(s, func(context.Context, outbox.Row) error { return nil }, serviceOpts(1))
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if err := svc.Start(t.Context()); !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("Start on a closed store = %v, want an error matching outbox.ErrClosed", err)
		}
	})
	t.Run("DrainsAndStops", func(t *testing.T) {
		s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
		enqueueN(t, s, "k", 200, time.Time{})
		var mux dispatch.Mux
		var handled atomic.Int64
		mux.Handle("q", func(context.Context, outbox.Row) error { handled.Add(1); return nil })
		svc, err := dispatch.NewService(s, mux.HandleRow, serviceOpts(8))
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "every row settled", func() bool {
			st, err := s.Stats(t.Context())
			return err == nil && st.Settled == 200
		})
		waitUntil(t, "ready", func() bool { return svc.Ready(t.Context()) == nil })
		if err := svc.Stop(t.Context()); err != nil {
			t.Fatalf("Stop = %v, want nil: a clean stop", err)
		}
		if handled.Load() != 200 {
			t.Errorf("handled %d rows, want 200", handled.Load())
		}
	})
	t.Run("StopCancelsAStuckHandler", func(t *testing.T) {
		s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
		enqueueN(t, s, "stuck", 1, time.Time{})
		started := make(chan struct{})
		svc, err := dispatch.NewService(s, func(ctx context.Context, _ outbox.Row) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, serviceOpts(2))
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-started
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := svc.Stop(ctx); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled 1 running handlers") {
			t.Fatalf("Stop past its deadline = %v, want one matching context.Canceled naming the cancelled handler", err)
		}
		row, err := s.Get(t.Context(), "stuck-0")
		if err != nil || row.State != outbox.StatePending || row.Attempts != 1 {
			t.Errorf("the cancelled row = %+v, %v; want pending after 1 attempt (retried)", row, err)
		}
	})
}

// enqueueN enqueues n rows on ns-0/q, in batches, claimable at runAt.
func enqueueN(t testing.TB, s *Store, prefix string, n int, runAt time.Time) {
	t.Helper()
	const batch = 5000
	for i := 0; i < n; i += batch {
		msgs := make([]outbox.Message, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("%s-%d", prefix, j), Namespace: fmt.Sprintf("ns-%d", j%10), TaskQueue: "q", RunAt: runAt})
		}
		if _, err := s.Enqueue(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkServiceHealth measures Ready (one store ping and the recorded
// state) and Live (no I/O) on a running service over a SQLite file of 0
// and 100,000 rows (scheduled a year out, so the service claims none and
// its sweeps stay idle): their cost does not depend on the rows.
// BENCH_HEALTH_ROWS=1000000 adds a size (the target: within 5 ms
// at 1,000,000 rows).
func BenchmarkServiceHealth(b *testing.B) {
	sizes := []int{0, 100_000}
	if n, err := strconv.Atoi(os.Getenv("BENCH_HEALTH_ROWS")); err == nil && n > 0 {
		sizes = append(sizes, n)
	}
	for _, rows := range sizes {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			s, err := Open(b.Context(), filepath.Join(b.TempDir(), "outbox.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			enqueueN(b, s, "r", rows, time.Now().AddDate(1, 0, 0))
			opts := serviceOpts(4)
			opts.PollInterval = time.Second
			svc, err := dispatch.NewService(s, func(context.Context, outbox.Row) error { return nil }, opts)
			if err != nil {
				b.Fatal(err)
			}
			if err := svc.Start(b.Context()); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = svc.Stop(context.Background()) }()
			waitUntil(b, "ready", func() bool { return svc.Ready(b.Context()) == nil })
			b.Run("Ready", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := svc.Ready(b.Context()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("Live", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := svc.Live(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
