package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
	Cleanup(func())
}

// failsafe bounds every wait of a test, so that a bug hangs no test run;
// it is never what a test asserts.
const failsafe = 60 * time.Second

// clock is a manual clock for memstore: leases, delays and schedules are
// judged on it, and move only when a test moves them.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newStore(t tb, opts memstore.Options) *memstore.Store {
	s, err := memstore.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// allShards returns the fraction of a node owning all n shards.
func allShards(t tb, n int) backpressure.OwnedShardFraction {
	owned := make([]int, n)
	for i := range owned {
		owned[i] = i
	}
	f, err := backpressure.NewOwnedShardFraction(owned, n)
	require.NoError(t, err)
	return f
}

func newBP(t tb, batch, quota int, quotas map[string]int) *backpressure.Backpressure {
	bp, err := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: quota, Quotas: quotas}, allShards(t, memstore.DefaultShardCount))
	require.NoError(t, err)
	return bp
}

// enqueue enqueues n rows spread round-robin over namespaces ns-0 …
// ns-(namespaces−1), keyed prefix-i, and returns their keys.
func enqueue(t tb, s *memstore.Store, prefix string, n, namespaces int) []string {
	keys := make([]string, n)
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = outbox.Message{DispatchKey: keys[i], Namespace: fmt.Sprintf("ns-%d", i%namespaces), TaskQueue: "q", Payload: []byte("p")}
	}
	got, err := s.Enqueue(context.Background(), msgs)
	require.NoError(t, err)
	require.Equal(t, n, got)
	return keys
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// recorder is a Metrics that keeps everything and lets a test wait for a
// condition on it.
type recorder struct {
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every event
	sweeps    []dispatch.SweepEvent
	adapted   []dispatch.AdaptEvent
	completed []dispatch.CompletionEvent
	lost      []dispatch.LeaseLostEvent
	extended  int   // ExtendLeases calls that extended at least one lease
	extends   []int // every call's count
	panics    int
	failures  map[string]int
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), failures: map[string]int{}}
}

func (r *recorder) event(f func()) {
	r.mu.Lock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *recorder) Swept(e dispatch.SweepEvent) { r.event(func() { r.sweeps = append(r.sweeps, e) }) }
func (r *recorder) Completed(e dispatch.CompletionEvent) {
	r.event(func() { r.completed = append(r.completed, e) })
}
func (r *recorder) LeaseLost(e dispatch.LeaseLostEvent) {
	r.event(func() { r.lost = append(r.lost, e) })
}
func (r *recorder) LeasesExtended(n int) {
	r.event(func() {
		r.extends = append(r.extends, n)
		if n > 0 {
			r.extended++
		}
	})
}
func (r *recorder) Panicked(outbox.Row)              { r.event(func() { r.panics++ }) }
func (r *recorder) StoreFailed(op string, err error) { r.event(func() { r.failures[op]++ }) }
func (r *recorder) Adapted(e dispatch.AdaptEvent) {
	r.event(func() { r.adapted = append(r.adapted, e) })
}

// waitUntil waits until cond, called with the recorder locked, holds.
func (r *recorder) waitUntil(t tb, what string, cond func(r *recorder) bool) {
	deadline := time.NewTimer(failsafe)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(r), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("waiting for %s: failsafe passed", what)
		}
	}
}

// settled counts the completion events that settled a row.
func (r *recorder) settled() int {
	n := 0
	for _, e := range r.completed {
		if e.State == outbox.StateSettled {
			n++
		}
	}
	return n
}

// start runs d until the returned stop is called; stop returns Run's error.
func start(t tb, d *dispatch.Dispatcher) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(failsafe):
				err = errors.New("Run did not return: failsafe passed")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// lockedWriter serialises writes to a builder shared with the test.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func slogTo(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{mu: mu, b: b}, nil))
}

// completedAt returns the i-th completion event, under the lock.
func (r *recorder) completedAt(i int) dispatch.CompletionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.completed[i]
}

// lostAt returns the i-th lost-lease event, under the lock.
func (r *recorder) lostAt(i int) dispatch.LeaseLostEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost[i]
}

// hookHandler is a slog.Handler that calls on, synchronously, for every
// record at any level: a test uses it to learn when the dispatcher has
// reached a logging call, or to hold it there.
type hookHandler struct{ on func(slog.Record) }

func (h hookHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h hookHandler) Handle(_ context.Context, r slog.Record) error {
	h.on(r)
	return nil
}
func (h hookHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h hookHandler) WithGroup(string) slog.Handler      { return h }

// retryLogged is the debug message the dispatcher logs for a failed
// handler, after the row's job is done and before its result is handed to
// the completer.
const retryLogged = "dispatch: handler failed; retrying"

// waitFor waits until cond holds, checking it at every event rec records.
func waitFor(t tb, what string, cond func() bool, rec *recorder) {
	rec.waitUntil(t, what, func(*recorder) bool { return cond() })
}
