package dispatchtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// Results checks, on a store, what a handler's result does to its row,
// end to end through a [dispatch.Dispatcher]. Each check is a subtest:
//
//   - Snooze: a row with MaxAttempts 1 whose handler snoozes it three
//     times is then settled: Attempts 1, Snoozes 3 (a snooze spends no
//     attempt), and the metrics saw three Snooze outcomes.
//   - SnoozeBound: with Options.MaxSnoozes 2 and MaxAttempts 2, a handler
//     that always snoozes gets two snoozes, then two failures: the row is
//     dead with Attempts 2, Snoozes 2, and LastError saying why.
//   - Overloaded: a row whose handler reports the downstream overloaded
//     ([dispatch.Overloaded], 1ms) once is snoozed (Attempts 1, Snoozes
//     1 when it settles), and the metrics saw the signal.
//   - Cancel: a [dispatch.Permanent] error dead-letters a row at its first
//     of five attempts, with the reason as LastError.
//   - RetryAt: a handler's [dispatch.RetryAt] an hour ahead makes the row
//     claimable then, not after the backoff.
//   - RetryPolicy: a failing row of a task queue with an
//     Options.RetryPolicies entry (Base 1h, no jitter) is claimable an hour
//     later; one of another task queue after Options.Backoff.
//   - Adaptive: with Options.Adaptive, a handler answering Overloaded
//     above a concurrency of 4 cuts its namespace's ceiling below its
//     static 20 and its claims stay within it; another namespace keeps
//     its static ceiling; no attempt spent, no row lost, each settled
//     exactly once.
//   - AdaptiveHold: with HoldClaims, a Retry-After holds the namespace
//     (no grant while a sweep reports the hold), not the other; every row
//     then settles once.
//
// A store's own tests call [Results.Run].
type Results struct {
	// Open returns a fresh, empty store on the real clock, closed by t's
	// cleanup. Required.
	Open func(t *testing.T) outbox.Store
	// Timeout bounds each check, a failsafe far above the time a check
	// takes; default 60s.
	Timeout time.Duration
}

// Run runs every check as a subtest of t.
func (c Results) Run(t *testing.T) {
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	t.Run("Snooze", c.snooze)
	t.Run("SnoozeBound", c.snoozeBound)
	t.Run("Overloaded", c.overloaded)
	t.Run("Cancel", c.cancel)
	t.Run("RetryAt", c.retryAt)
	t.Run("RetryPolicy", c.retryPolicy)
	t.Run("Adaptive", c.adaptive)
	t.Run("AdaptiveHold", c.adaptiveHold)
}

// outcomes counts the outcomes the dispatcher's metrics saw.
type outcomes struct {
	dispatch.NopMetrics
	mu         sync.Mutex
	n          map[outbox.Outcome]int
	overloaded int
}

func (o *outcomes) Completed(e dispatch.CompletionEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[e.Outcome]++
	if oe := (*dispatch.OverloadedError)(nil); errors.As(e.Err, &oe) {
		o.overloaded++
	}
}

func (o *outcomes) signals() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.overloaded
}

func (o *outcomes) count(x outbox.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[x]
}

// runUntil runs a dispatcher on s with opts (a 10ms poll, a quiet logger,
// m as Metrics) until done(row) holds for every key, and returns the rows
// as they are then. It fails t past c.Timeout.
func (c Results) runUntil(t *testing.T, s outbox.Store, opts dispatch.Options, h dispatch.Handler, m dispatch.Metrics, keys []string, done func(outbox.Row) bool) []outbox.Row {
	t.Helper()
	opts.PollInterval, opts.Metrics = 10*time.Millisecond, m
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	defer startDispatcher(t, s, backpressure.Config{BatchSize: 10, DefaultQuota: backpressure.Unlimited}, opts, h)()
	rows := awaitRows(t, s, keys, done, time.Now().Add(c.Timeout))
	if len(rows) != len(keys) {
		t.Fatalf("rows %q not done in %v", keys, c.Timeout)
	}
	return rows
}

func (c Results) snooze(t *testing.T) {
	s := c.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "k", Namespace: "a", MaxAttempts: 1}})
	m := &outcomes{n: map[outbox.Outcome]int{}}
	h := func(_ context.Context, r outbox.Row) error {
		if r.Snoozes < 3 {
			return dispatch.Snooze(time.Millisecond, errors.New("busy"))
		}
		return nil
	}
	r := c.runUntil(t, s, dispatch.Options{}, h, m, []string{"k"}, finished)[0]
	if r.State != outbox.StateSettled || r.Attempts != 1 || r.Snoozes != 3 || r.LastError != "busy" {
		t.Errorf("row after three snoozes and a success: State %q Attempts %d Snoozes %d LastError %q; want settled, 1, 3, \"busy\"",
			r.State, r.Attempts, r.Snoozes, r.LastError)
	}
	if n := m.count(outbox.Snooze); n != 3 {
		t.Errorf("metrics saw %d snoozes, want 3", n)
	}
}

func (c Results) snoozeBound(t *testing.T) {
	s := c.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "k", Namespace: "a", MaxAttempts: 2}})
	h := func(context.Context, outbox.Row) error { return dispatch.Snooze(0, nil) }
	opts := dispatch.Options{MaxSnoozes: 2, Backoff: dispatch.Backoff{Base: time.Millisecond, Jitter: -1}}
	r := c.runUntil(t, s, opts, h, &outcomes{n: map[outbox.Outcome]int{}}, []string{"k"}, finished)[0]
	if r.State != outbox.StateDead || r.Attempts != 2 || r.Snoozes != 2 || !strings.Contains(r.LastError, "Options.MaxSnoozes") {
		t.Errorf("row snoozed past the bound: State %q Attempts %d Snoozes %d LastError %q; want dead, 2, 2, naming Options.MaxSnoozes",
			r.State, r.Attempts, r.Snoozes, r.LastError)
	}
}

func (c Results) overloaded(t *testing.T) {
	s := c.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "k", Namespace: "a", MaxAttempts: 1}})
	m := &outcomes{n: map[outbox.Outcome]int{}}
	h := func(_ context.Context, r outbox.Row) error {
		if r.Snoozes == 0 {
			return dispatch.Overloaded(time.Millisecond, errors.New("429 from the mail API"))
		}
		return nil
	}
	r := c.runUntil(t, s, dispatch.Options{}, h, m, []string{"k"}, finished)[0]
	if r.State != outbox.StateSettled || r.Attempts != 1 || r.Snoozes != 1 || !strings.Contains(r.LastError, "429 from the mail API") {
		t.Errorf("row after an overloaded signal and a success: State %q Attempts %d Snoozes %d LastError %q; want settled, 1, 1, the signal",
			r.State, r.Attempts, r.Snoozes, r.LastError)
	}
	if n := m.signals(); n != 1 {
		t.Errorf("metrics saw %d overloaded signals, want 1", n)
	}
}

func (c Results) cancel(t *testing.T) {
	s := c.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "k", Namespace: "a", MaxAttempts: 5}})
	h := func(context.Context, outbox.Row) error { return dispatch.Permanent(errors.New("order deleted")) }
	r := c.runUntil(t, s, dispatch.Options{}, h, &outcomes{n: map[outbox.Outcome]int{}}, []string{"k"}, finished)[0]
	if r.State != outbox.StateDead || r.Attempts != 1 || !strings.Contains(r.LastError, "order deleted") {
		t.Errorf("cancelled row: State %q Attempts %d LastError %q; want dead at attempt 1 with the reason", r.State, r.Attempts, r.LastError)
	}
}

// failedOnce is a row pending again after a first failed attempt.
func failedOnce(r outbox.Row) bool { return r.State == outbox.StatePending && r.Attempts == 1 }

func (c Results) retryAt(t *testing.T) {
	s := c.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "k", Namespace: "a"}})
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	h := func(context.Context, outbox.Row) error {
		return dispatch.RetryAt(at, errors.New("come back in an hour"))
	}
	r := c.runUntil(t, s, dispatch.Options{}, h, &outcomes{n: map[outbox.Outcome]int{}}, []string{"k"}, failedOnce)[0]
	// The handler's delay is measured from when it returned: the row is
	// due at `at`, give or take the time to write the result.
	if d := r.RunAt.Sub(at).Abs(); d > time.Minute || r.LastError != "come back in an hour" {
		t.Errorf("RetryAt(%v): row RunAt %v (%v off), LastError %q; want about %v and the error", at, r.RunAt, d, r.LastError, at)
	}
}

func (c Results) retryPolicy(t *testing.T) {
	s := c.Open(t)
	enqueueRows(t, s, []outbox.Message{{DispatchKey: "slow", Namespace: "a", TaskQueue: "slow"}, {DispatchKey: "fast", Namespace: "a"}})
	h := func(context.Context, outbox.Row) error { return errors.New("failed") }
	opts := dispatch.Options{
		Backoff:       dispatch.Backoff{Base: 2 * time.Second, Jitter: -1},
		RetryPolicies: map[string]dispatch.Backoff{"slow": {Base: time.Hour, Jitter: -1}},
	}
	began := time.Now()
	rows := c.runUntil(t, s, opts, h, &outcomes{n: map[outbox.Outcome]int{}}, []string{"slow", "fast"}, failedOnce)
	ended := time.Now()
	for i, want := range []time.Duration{time.Hour, 2 * time.Second} {
		r := rows[i]
		if r.RunAt.Before(began.Add(want)) || r.RunAt.After(ended.Add(want+time.Second)) {
			t.Errorf("row %q (task queue %q) failed once: RunAt %v, want %v after its failure, between %v and %v",
				r.DispatchKey, r.TaskQueue, r.RunAt, want, began.Add(want), ended.Add(want))
		}
	}
}
