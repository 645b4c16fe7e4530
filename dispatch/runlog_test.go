package dispatch_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// linesWith returns the lines of log that contain msg.
func linesWith(log, msg string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

func requireFields(t *testing.T, line string, fields ...string) {
	t.Helper()
	for _, f := range fields {
		require.Containsf(t, line, " "+f, "log line %q lacks %q", line, f)
	}
}

// Run says at Info what it starts with and, when it stops, what it did
// and why it stopped.
func TestRunLogsStartAndStop(t *testing.T) {
	store := newStore(t, memstore.Options{MaxAttempts: 1})
	ctx := context.Background()
	_, err := store.Enqueue(ctx, []outbox.Message{
		{DispatchKey: "ok-1", Namespace: "a"}, {DispatchKey: "ok-2", Namespace: "b"},
		{DispatchKey: "bad", Namespace: "a"}, {DispatchKey: "retry", Namespace: "b", MaxAttempts: 5},
	})
	require.NoError(t, err)
	var mu sync.Mutex
	var log strings.Builder
	rec := newRecorder()
	d, err := dispatch.New(newBP(t, 10, 10, nil), store, func(_ context.Context, row outbox.Row) error {
		switch row.DispatchKey {
		case "bad":
			return dispatch.Permanent(errors.New("no"))
		case "retry":
			return errors.New("later")
		}
		return nil
	}, dispatch.Options{Workers: 3, Logger: slogTo(&log, &mu), Metrics: rec, Backoff: dispatch.Backoff{Base: time.Hour}})
	require.NoError(t, err)

	runCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	rec.waitUntil(t, "4 completions", func(r *recorder) bool { return len(r.completed) == 4 })
	cancel(errors.New("SIGTERM"))
	select {
	case err = <-done:
	case <-time.After(failsafe):
		t.Fatal("Run did not return: failsafe passed")
	}
	require.NoError(t, err)

	mu.Lock()
	out := log.String()
	mu.Unlock()
	started := linesWith(out, "dispatch: run started")
	require.Len(t, started, 1, out)
	requireFields(t, started[0], "level=INFO", "workers=3", "store=*memstore.Store", "shards_owned=64", "shard_count=64",
		"batch_size=10", "handoff=credit", "gate=enforced", "mode=backpressure-protective", "counts=read-ahead", "notify=true")
	stopped := linesWith(out, "dispatch: run stopped")
	require.Len(t, stopped, 1, out)
	requireFields(t, stopped[0], "level=INFO", "settled=2", "retried=1", "dead_lettered=1", "lease_lost=0", "reason=SIGTERM", "clean=true")
	require.Less(t, strings.Index(out, "run started"), strings.Index(out, "run stopped"))
}

// With a queue, the start line names the advisory hand-off New verified.
func TestRunLogsQueueHandoff(t *testing.T) {
	store := newStore(t, memstore.Options{})
	var mu sync.Mutex
	var log strings.Builder
	d, err := dispatch.New(newBP(t, 10, 10, nil), store, func(context.Context, outbox.Row) error { return nil },
		dispatch.Options{Workers: 2, Queue: 30, QueueHighWatermark: 20, FreshCounts: true, Logger: slogTo(&log, &mu)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, d.Run(ctx))
	mu.Lock()
	defer mu.Unlock()
	started := linesWith(log.String(), "dispatch: run started")
	require.Len(t, started, 1, log.String())
	requireFields(t, started[0], "handoff=queue", "queue=30", "queue_high_watermark=20", "gate=advisory",
		"mode=backpressure-protective", "counts=fresh")
	stopped := linesWith(log.String(), "dispatch: run stopped")
	require.Len(t, stopped, 1, log.String())
	requireFields(t, stopped[0], "settled=0", `reason="context canceled"`, "clean=true")
}

// At Debug, a namespace held at its ceiling and a paused one get a line
// naming them and why; a namespace that is served gets none, and none
// gets a second line within 10s, however many sweeps plan it held.
func TestRunLogsHeldNamespacesAtDebug(t *testing.T) {
	store := newStore(t, memstore.Options{})
	ctx := context.Background()
	_, err := store.Enqueue(ctx, []outbox.Message{
		{DispatchKey: "capped-1", Namespace: "capped"}, {DispatchKey: "capped-2", Namespace: "capped"},
		{DispatchKey: "paused-1", Namespace: "paused"},
		{DispatchKey: "free-1", Namespace: "free"},
	})
	require.NoError(t, err)
	var mu sync.Mutex
	var log strings.Builder
	logger := slog.New(slog.NewTextHandler(lockedWriter{mu: &mu, b: &log}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	release := make(chan struct{})
	rec := newRecorder()
	began := time.Now()
	d, err := dispatch.New(newBP(t, 10, 10, map[string]int{"capped": 1, "paused": 0}), store,
		func(ctx context.Context, row outbox.Row) error {
			if row.Namespace == "capped" {
				select { // hold the ceiling's one row while sweeps go on
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}, dispatch.Options{Workers: 4, Logger: logger, Metrics: rec, PollInterval: time.Millisecond, PollJitter: -1})
	require.NoError(t, err)
	stop := start(t, d)
	rec.waitUntil(t, "20 sweeps", func(r *recorder) bool { return len(r.sweeps) >= 20 })
	close(release)
	require.NoError(t, stop())
	elapsed := time.Since(began)

	mu.Lock()
	out := log.String()
	mu.Unlock()
	held := linesWith(out, "dispatch: namespace held")
	byNS := map[string][]string{}
	for _, l := range held {
		for _, ns := range []string{"capped", "paused", "free"} {
			if strings.Contains(l, " namespace="+ns+" ") {
				byNS[ns] = append(byNS[ns], l)
			}
		}
	}
	require.NotEmpty(t, byNS["capped"], out)
	requireFields(t, byNS["capped"][0], "level=DEBUG", "reason=at-ceiling", "held=1", "ceiling=1", "quota=1") // claimed is 0 on the first sweep, which grants the ceiling
	require.NotEmpty(t, byNS["paused"], out)
	requireFields(t, byNS["paused"][0], "reason=paused", "held=1", "claimed=0", "ceiling=0", "quota=0")
	require.Empty(t, byNS["free"])
	if elapsed < 10*time.Second { // the rate limit itself is TestHeldLimiterAgainstReference's, on pinned times
		require.Len(t, byNS["capped"], 1, "20 sweeps within 10s, one line")
		require.Len(t, byNS["paused"], 1, "20 sweeps within 10s, one line")
	}
}
