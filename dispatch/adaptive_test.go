package dispatch_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// overloadRun is a dispatcher with Options.Adaptive over rows of ns-0
// (quota 16, 16 workers), whose handler answers Overloaded above a
// concurrency of 2, with its recorder and its log.
type overloadRun struct {
	s     *memstore.Store
	d     *dispatch.Dispatcher
	bp    *backpressure.Backpressure
	m     *recorder
	log   *strings.Builder
	logMu *sync.Mutex
	keys  []string
}

func newOverloadRun(t *testing.T, rows int) *overloadRun {
	s := newStore(t, memstore.Options{})
	o := &overloadRun{s: s, m: newRecorder(), log: &strings.Builder{}, logMu: &sync.Mutex{}}
	o.keys = enqueue(t, s, "k", rows, 1)
	o.bp = newBP(t, 16, 16, nil)
	var running atomic.Int64
	h := func(ctx context.Context, r outbox.Row) error {
		defer running.Add(-1)
		if running.Add(1) > 2 {
			return dispatch.Overloaded(0, errors.New("HTTP 429"))
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	var err error
	o.d, err = dispatch.New(o.bp, s, h, dispatch.Options{
		Workers: 16, PollInterval: 5 * time.Millisecond, Metrics: o.m, Logger: slogTo(o.log, o.logMu),
		MaxSnoozes: dispatch.MaxSnoozesLimit, OverloadSnooze: time.Millisecond,
		Adaptive: &dispatch.AdaptiveCeilings{Window: 10 * time.Millisecond},
	})
	require.NoError(t, err)
	return o
}

func (o *overloadRun) breaches() int {
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	n := 0
	for _, e := range o.m.adapted {
		if e.Breach {
			n++
		}
	}
	return n
}

// TestAdaptiveSelfCheck: the gate's self-check finds no breach while the
// controller steers (the planner claims within the learned ceiling), and
// finds breaches, with one alert line per episode, once an operator pins
// the ceiling above the learned one: the dispatcher then claims more than
// the downstream asked for.
func TestAdaptiveSelfCheck(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		o := newOverloadRun(t, 300)
		stop := start(t, o.d)
		o.m.waitUntil(t, "every row settled", func(r *recorder) bool { return r.settled() == len(o.keys) })
		require.NoError(t, stop())
		require.Zero(t, o.breaches(), "breaches without a pin")
		o.logMu.Lock()
		defer o.logMu.Unlock()
		require.NotContains(t, o.log.String(), "adaptive ceiling breached")
	})
	t.Run("pinned", func(t *testing.T) {
		o := newOverloadRun(t, 600)
		stop := start(t, o.d)
		o.m.waitUntil(t, "a cut", func(r *recorder) bool {
			for _, e := range r.adapted {
				if e.Cut && e.Learned < 16 {
					return true
				}
			}
			return false
		})
		require.NoError(t, o.d.PinAdaptiveCeiling("ns-0", 16))
		o.m.waitUntil(t, "every row settled", func(r *recorder) bool { return r.settled() == len(o.keys) })
		require.NoError(t, stop())
		n := o.breaches()
		require.Positive(t, n, "no breach with a pin above the learned ceiling")
		o.logMu.Lock()
		defer o.logMu.Unlock()
		alerts := strings.Count(o.log.String(), "adaptive ceiling breached")
		require.Positive(t, alerts)
		require.LessOrEqual(t, alerts, n, "at most one alert per breach")
		c := o.d.AdaptiveCeilings()["ns-0"]
		require.Equal(t, 16, c.Pinned)
		require.Equal(t, 16, c.Ceiling)
		require.Equal(t, n, c.Breaches)
		require.Less(t, c.Learned, 16)
	})
}

// TestAdaptiveSteering: PinAdaptiveCeiling and ResetAdaptiveCeiling
// refuse what they must with an *OptionError, and otherwise steer the
// planner: a pin is the plan's adaptive ceiling, a reset leaves the static
// one alone.
func TestAdaptiveSteering(t *testing.T) {
	s := newStore(t, memstore.Options{})
	bp := newBP(t, 10, 10, nil)
	off, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil }, dispatch.Options{Workers: 1, Logger: quietLogger()})
	require.NoError(t, err)
	var oe *dispatch.OptionError
	require.ErrorAs(t, off.PinAdaptiveCeiling("a", 1), &oe)
	require.ErrorIs(t, off.ResetAdaptiveCeiling("a"), dispatch.ErrInvalidOptions)
	require.Nil(t, off.AdaptiveCeilings())

	d, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil },
		dispatch.Options{Workers: 4, Logger: quietLogger(), Adaptive: &dispatch.AdaptiveCeilings{}})
	require.NoError(t, err)
	require.ErrorAs(t, d.PinAdaptiveCeiling("a", 0), &oe)
	require.Equal(t, "PinAdaptiveCeiling.n", oe.Field)
	require.ErrorAs(t, d.PinAdaptiveCeiling("a\x00", 1), &oe)
	require.ErrorIs(t, d.PinAdaptiveCeiling("a", dispatch.MaxAdaptiveStep+1), dispatch.ErrInvalidOptions)
	require.Empty(t, d.AdaptiveCeilings())

	require.NoError(t, d.PinAdaptiveCeiling("a", 3))
	got := d.AdaptiveCeilings()["a"]
	// The static ceiling is 10, counted as the node's Workers (4) it is above.
	require.Equal(t, dispatch.AdaptiveCeiling{Ceiling: 3, Learned: 4, Static: 4, Pinned: 3}, got)
	p, err := bp.Plan(backpressure.Snapshot{Pending: []backpressure.RouteCount{{Route: backpressure.Route{Namespace: "a"}, Count: 9}}})
	require.NoError(t, err)
	r, _ := p.Namespace("a")
	require.Equal(t, 3, r.Adaptive)
	require.Equal(t, 3, r.Granted)
	require.Equal(t, backpressure.HeldAdaptive, r.Reason)

	require.NoError(t, d.ResetAdaptiveCeiling("a"))
	require.Empty(t, d.AdaptiveCeilings())
	p, err = bp.Plan(backpressure.Snapshot{Pending: []backpressure.RouteCount{{Route: backpressure.Route{Namespace: "a"}, Count: 9}}})
	require.NoError(t, err)
	r, _ = p.Namespace("a")
	require.Equal(t, 0, r.Adaptive)
	require.Equal(t, 9, r.Granted)
}

// TestAdaptiveTimeouts: with Timeouts, a handler's deadline is a signal
// (a cut, with no hold) and the row still fails as a failure does;
// without it, a deadline teaches the controller nothing.
func TestAdaptiveTimeouts(t *testing.T) {
	for _, timeouts := range []bool{false, true} {
		s := newStore(t, memstore.Options{})
		keys := enqueue(t, s, "k", 4, 1)
		m := newRecorder()
		h := func(ctx context.Context, r outbox.Row) error {
			return context.DeadlineExceeded
		}
		d, err := dispatch.New(newBP(t, 4, 4, nil), s, h, dispatch.Options{
			Workers: 4, Logger: quietLogger(), Metrics: m, PollInterval: 5 * time.Millisecond,
			Backoff:  dispatch.Backoff{Base: time.Hour},
			Adaptive: &dispatch.AdaptiveCeilings{Timeouts: timeouts},
		})
		require.NoError(t, err)
		stop := start(t, d)
		m.waitUntil(t, "every row failed once", func(r *recorder) bool { return len(r.completed) == len(keys) })
		require.NoError(t, stop())
		m.mu.Lock()
		signals := 0
		for _, e := range m.adapted {
			if e.Signal {
				signals++
				require.True(t, e.HoldUntil.IsZero(), "a timeout holds nothing")
			}
		}
		for _, e := range m.completed {
			require.Equal(t, outbox.Retry, e.Outcome, "a timeout is still a failure")
		}
		m.mu.Unlock()
		if timeouts {
			require.Equal(t, len(keys), signals)
		} else {
			require.Zero(t, signals)
		}
	}
}
