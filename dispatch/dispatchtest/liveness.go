package dispatchtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// Liveness checks that a [dispatch.Dispatcher] on a store sweeps again
// when it should without waiting for its poll: every check runs with
// Options.PollInterval 1h, so a dispatcher that waited for the poll would
// not finish before the deadline. Each check is a subtest:
//
//   - CappedDrain: a namespace held at its quota (50) with more workers
//     (100) drains 1,000 rows: a written result frees headroom and wakes
//     the loop.
//   - RetryBackoff: a row whose first attempt fails, with a Backoff of
//     50ms, runs again and is settled: the loop sweeps when the retry is
//     due.
//   - RunAt: a row enqueued with RunAt 100ms ahead, before Run and to an
//     idle dispatcher, runs: the loop sweeps when the store says it is due
//     ([outbox.DueProber]; a store without it fails this check).
//   - RatedDrain: 200 rows of a namespace at 200/s, burst 10, drain: after
//     a sweep held by the rate, the loop sweeps when the next token is due.
//
// A store's own tests call [Liveness.Run].
type Liveness struct {
	// Open returns a fresh, empty store on the real clock, closed by t's
	// cleanup. Required.
	Open func(t *testing.T) outbox.Store
	// Timeout bounds each check, a failsafe far above the time a check
	// takes; default 60s.
	Timeout time.Duration
}

// Run runs every check as a subtest of t.
func (l Liveness) Run(t *testing.T) {
	if l.Timeout <= 0 {
		l.Timeout = 60 * time.Second
	}
	t.Run("CappedDrain", l.cappedDrain)
	t.Run("RetryBackoff", l.retryBackoff)
	t.Run("RunAt", l.runAt)
	t.Run("RatedDrain", l.ratedDrain)
}

// settleCounter counts settled rows and closes done at want.
type settleCounter struct {
	dispatch.NopMetrics
	mu      sync.Mutex
	want    int
	settled int
	done    chan struct{}
	swept   chan struct{} // closed after the first sweep
	once    sync.Once
}

func newSettleCounter(want int) *settleCounter {
	return &settleCounter{want: want, done: make(chan struct{}), swept: make(chan struct{})}
}

func (c *settleCounter) Swept(dispatch.SweepEvent) { c.once.Do(func() { close(c.swept) }) }

func (c *settleCounter) Completed(e dispatch.CompletionEvent) {
	if e.State != outbox.StateSettled {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled++; c.settled == c.want {
		close(c.done)
	}
}

func (c *settleCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settled
}

// drain runs a dispatcher on s with cfg and opts (PollInterval 1h, a quiet
// logger and m as Metrics) until m reports every row settled, and fails t
// if that takes longer than l.Timeout.
// After the first sweep, it enqueues later (if any).
func (l Liveness) drain(t *testing.T, s outbox.Store, cfg backpressure.Config, opts dispatch.Options, h dispatch.Handler, m *settleCounter, later ...outbox.Message) {
	t.Helper()
	opts.PollInterval, opts.Metrics = time.Hour, m
	defer startDispatcher(t, s, cfg, opts, h)()
	deadline := time.NewTimer(l.Timeout)
	defer deadline.Stop()
	if len(later) > 0 {
		select {
		case <-m.swept:
			enqueueRows(t, s, later)
		case <-deadline.C:
			t.Fatal("no sweep before the deadline")
		}
	}
	select {
	case <-m.done:
	case <-deadline.C:
		t.Errorf("%d of %d rows settled in %v with a 1h poll: the dispatcher waited for the poll", m.count(), m.want, l.Timeout)
	}
}

// startDispatcher runs a dispatcher on s, every shard owned, with cfg and
// opts (a quiet logger), and returns its stop: it cancels Run, waits for
// it, and fails t if Run returned an error.
func startDispatcher(t *testing.T, s outbox.Store, cfg backpressure.Config, opts dispatch.Options, h dispatch.Handler) (stop func()) {
	t.Helper()
	bp, err := backpressure.New(cfg, everyShard(t, s.ShardCount()))
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := dispatch.New(bp, s, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	return func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func enqueueRows(t *testing.T, s outbox.Store, msgs []outbox.Message) {
	t.Helper()
	n, err := s.Enqueue(context.Background(), msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("Enqueue: %d of %d, %v", n, len(msgs), err)
	}
}

func noop(context.Context, outbox.Row) error { return nil }

func (l Liveness) cappedDrain(t *testing.T) {
	const rows = 1000
	s := l.Open(t)
	msgs := make([]outbox.Message, rows)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: fmt.Sprint("capped-", i), Namespace: "capped", TaskQueue: "q"}
	}
	enqueueRows(t, s, msgs)
	m := newSettleCounter(rows)
	l.drain(t, s, backpressure.Config{BatchSize: 100, DefaultQuota: 50}, dispatch.Options{Workers: 100}, noop, m)
}

func (l Liveness) retryBackoff(t *testing.T) {
	s := l.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "retried", Namespace: "ns", TaskQueue: "q"}})
	var mu sync.Mutex
	attempts := 0
	h := func(context.Context, outbox.Row) error {
		mu.Lock()
		defer mu.Unlock()
		if attempts++; attempts == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	m := newSettleCounter(1)
	l.drain(t, s, backpressure.Config{BatchSize: 10, DefaultQuota: backpressure.Unlimited},
		dispatch.Options{Workers: 2, Backoff: dispatch.Backoff{Base: 50 * time.Millisecond, Jitter: -1}}, h, m)
}

func (l Liveness) runAt(t *testing.T) {
	s := l.Open(t)
	first := outbox.Message{DispatchKey: "before-run", Namespace: "ns", TaskQueue: "q", RunAt: time.Now().Add(100 * time.Millisecond)}
	enqueueRows(t, s, []outbox.Message{first})
	m := newSettleCounter(2)
	// The second is enqueued after the first sweep, to a dispatcher that
	// has nothing to claim: its RunAt is after the first's.
	second := outbox.Message{DispatchKey: "while-idle", Namespace: "ns", TaskQueue: "q", RunAt: time.Now().Add(300 * time.Millisecond)}
	l.drain(t, s, backpressure.Config{BatchSize: 10, DefaultQuota: backpressure.Unlimited}, dispatch.Options{Workers: 2}, noop, m, second)
}

func (l Liveness) ratedDrain(t *testing.T) {
	const rows = 200
	s := l.Open(t)
	msgs := make([]outbox.Message, rows)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: fmt.Sprint("rated-", i), Namespace: "rated", TaskQueue: "q"}
	}
	enqueueRows(t, s, msgs)
	m := newSettleCounter(rows)
	cfg := backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited,
		Rates: map[string]backpressure.Rate{"rated": {PerSecond: 200, Burst: 10}}}
	l.drain(t, s, cfg, dispatch.Options{Workers: 16}, noop, m)
}
