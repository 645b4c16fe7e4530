package dispatchtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// adaptiveMetrics records what the adaptive checks assert on: every
// sweep's reports of the two namespaces, the settles per row, the
// controller's events.
type adaptiveMetrics struct {
	dispatch.NopMetrics
	mu      sync.Mutex
	hot     []backpressure.NamespaceReport
	cold    []backpressure.NamespaceReport
	settled map[string]int
	events  []dispatch.AdaptEvent
}

func (m *adaptiveMetrics) Swept(e dispatch.SweepEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := e.Plan.Namespace("hot"); ok {
		m.hot = append(m.hot, r)
	}
	if r, ok := e.Plan.Namespace("cold"); ok {
		m.cold = append(m.cold, r)
	}
}

func (m *adaptiveMetrics) Completed(e dispatch.CompletionEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.State == outbox.StateSettled {
		m.settled[e.Row.DispatchKey]++
	}
}

func (m *adaptiveMetrics) Adapted(e dispatch.AdaptEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}

// concurrency tracks a namespace's handlers running at once.
type concurrency struct {
	now, peak atomic.Int64
}

func (c *concurrency) enter() int64 {
	n := c.now.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	return n
}

func (c *concurrency) leave() { c.now.Add(-1) }

// adaptiveRun runs a dispatcher with Options.Adaptive over rows of "hot"
// and "cold" (quota 20 each, 40 workers), hot's handler answering
// Overloaded(retryAfter) above a concurrency of capacity (with hold, the
// controller's HoldClaims), until every row is settled, and returns the
// metrics and the dispatcher's final adaptive ceilings.
func (c Results) adaptiveRun(t *testing.T, capacity int64, retryAfter time.Duration, hold bool, rows int) (*adaptiveMetrics, *concurrency, map[string]dispatch.AdaptiveCeiling, []outbox.Row) {
	t.Helper()
	s := c.Open(t)
	var msgs []outbox.Message
	var keys []string
	for i := range rows {
		for _, ns := range []string{"hot", "cold"} {
			k := fmt.Sprintf("%s-%d", ns, i)
			msgs = append(msgs, outbox.Message{DispatchKey: k, Namespace: ns, MaxAttempts: 1})
			keys = append(keys, k)
		}
	}
	enqueueRows(t, s, msgs)
	m := &adaptiveMetrics{settled: map[string]int{}}
	var hot, cold concurrency
	h := func(ctx context.Context, r outbox.Row) error {
		c := &cold
		if r.Namespace == "hot" {
			c = &hot
		}
		n := c.enter()
		defer c.leave()
		if r.Namespace == "hot" && n > capacity {
			return dispatch.Overloaded(retryAfter, errors.New("HTTP 429 Too Many Requests"))
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	opts := dispatch.Options{
		Workers: 40, PollInterval: 10 * time.Millisecond, Metrics: m,
		MaxSnoozes: dispatch.MaxSnoozesLimit, OverloadSnooze: 5 * time.Millisecond,
		Adaptive: &dispatch.AdaptiveCeilings{Window: 20 * time.Millisecond, HoldClaims: hold},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 40, DefaultQuota: 20}, everyShard(t, s.ShardCount()))
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(bp, s, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	out := awaitRows(t, s, keys, finished, time.Now().Add(c.Timeout))
	ceilings := d.AdaptiveCeilings()
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	if len(out) != len(keys) {
		t.Fatalf("%d of %d rows finished in %v", len(out), len(keys), c.Timeout)
	}
	return m, &cold, ceilings, out
}

// adaptive: a handler that answers Overloaded above a concurrency of 4
// makes the hot namespace's ceiling on the node fall from its static 20
// to 4 or below (the downstream's capacity) and its claims stay within it
// at every sweep, while the cold namespace keeps its
// static ceiling (never adaptive, reaching 20 at once); no snooze spends
// an attempt (every row settles at Attempts 1 with MaxAttempts 1), no row
// is lost, and each is settled exactly once.
func (c Results) adaptive(t *testing.T) {
	m, cold, _, rows := c.adaptiveRun(t, 4, 0, false, 150)
	checkSettledOnce(t, m, rows)
	m.mu.Lock()
	defer m.mu.Unlock()
	cut, lowest := false, 20
	for _, e := range m.events {
		if e.Namespace != "hot" {
			t.Fatalf("adaptive event for %q: %+v; only hot's downstream signals", e.Namespace, e)
		}
		cut = cut || e.Cut
		if e.Signal {
			lowest = min(lowest, e.Learned)
		}
	}
	if !cut || lowest > 4 {
		t.Fatalf("hot's learned ceiling fell only to %d (cut %v), not to its downstream's capacity 4, in %d events", lowest, cut, len(m.events))
	}
	for i, r := range m.hot {
		if r.Adaptive > 0 && (r.Adaptive > r.Ceiling || r.Claimed > r.Adaptive && r.Granted > 0 || r.Granted > max(0, r.Adaptive-r.Claimed)) {
			t.Fatalf("sweep %d: hot %+v claims past its adaptive ceiling", i, r)
		}
	}
	for i, r := range m.cold {
		if r.Adaptive != 0 || r.Reason == backpressure.HeldAdaptive || r.Ceiling != 20 {
			t.Fatalf("sweep %d: cold's report %+v shows an adaptive ceiling", i, r)
		}
	}
	if p := cold.peak.Load(); p != 20 {
		t.Fatalf("cold's handlers peaked at %d at once, want its static ceiling 20", p)
	}
}

// adaptiveHold: with HoldClaims, a Retry-After holds the hot namespace: every sweep that
// reports a hold grants hot nothing (reason HeldAdaptive for its pending
// rows), cold is never held, and once the holds end every row settles,
// once, at Attempts 1.
func (c Results) adaptiveHold(t *testing.T) {
	m, _, _, rows := c.adaptiveRun(t, 2, 30*time.Millisecond, true, 40)
	checkSettledOnce(t, m, rows)
	m.mu.Lock()
	defer m.mu.Unlock()
	held := 0
	for i, r := range m.hot {
		if r.Hold > 0 {
			held++
			if r.Granted != 0 || r.Demand != 0 || r.Held != r.Pending || r.Pending > 0 && r.Reason != backpressure.HeldAdaptive {
				t.Fatalf("sweep %d: hot held for %v but %+v", i, r.Hold, r)
			}
		}
	}
	if held == 0 {
		t.Fatalf("no sweep saw hot held, in %d sweeps", len(m.hot))
	}
	for i, r := range m.cold {
		if r.Hold > 0 || r.Reason == backpressure.HeldAdaptive {
			t.Fatalf("sweep %d: cold held %+v", i, r)
		}
	}
}

// checkSettledOnce checks that every row is settled at Attempts 1 (no
// snooze spent an attempt) and that the metrics saw each settled once.
func checkSettledOnce(t *testing.T, m *adaptiveMetrics, rows []outbox.Row) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		if r.State != outbox.StateSettled || r.Attempts != 1 {
			t.Fatalf("row %q: State %q Attempts %d Snoozes %d LastError %q; want settled at its first attempt", r.DispatchKey, r.State, r.Attempts, r.Snoozes, r.LastError)
		}
		if n := m.settled[r.DispatchKey]; n != 1 {
			t.Fatalf("row %q settled %d times", r.DispatchKey, n)
		}
	}
	if len(m.settled) != len(rows) {
		t.Fatalf("%d rows settled, want %d", len(m.settled), len(rows))
	}
}
