package dispatch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// testDispatcher returns a dispatcher over an empty memstore (owning
// every shard, batch size 4, no quota) with opts, logging nowhere.
func testDispatcher(t *testing.T, opts Options) *Dispatcher {
	t.Helper()
	store, err := memstore.New(memstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	owned := make([]int, memstore.DefaultShardCount)
	for i := range owned {
		owned[i] = i
	}
	shards, err := backpressure.NewOwnedShardFraction(owned, memstore.DefaultShardCount)
	require.NoError(t, err)
	bp, err := backpressure.New(backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}, shards)
	require.NoError(t, err)
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := New(bp, store, func(context.Context, outbox.Row) error { return nil }, opts)
	require.NoError(t, err)
	return d
}

// testSweeper returns the sweep loop's state for a dispatcher over an
// empty memstore, polling every hour, with its notifications on the
// channel it returns. Its steps are driven by the test, not by the loop:
// no sweep runs.
func testSweeper(t *testing.T, coalesce time.Duration) (*sweeper, chan struct{}) {
	t.Helper()
	d := testDispatcher(t, Options{Workers: 4, PollInterval: time.Hour, Coalesce: coalesce, ClaimsInFlight: 2})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := newRun(d, ctx)
	s, ok := r.newSweeper(ctx)
	require.True(t, ok)
	t.Cleanup(s.stop)
	notes := make(chan struct{})
	s.notes = notes
	return s, notes
}

// started records a sweep launched for n rows, as launch does, without
// running it.
func (s *sweeper) started(n int) {
	s.inflight++
	s.reserved += n
	s.launchedAt = s.flushes
}

// fullSweep returns a sweep's result that claimed all n rows it asked for.
func fullSweep(n int) swept {
	now := time.Now()
	rows := make([]outbox.Row, n)
	for i := range rows {
		rows[i] = outbox.Row{DispatchKey: fmt.Sprint("k", i), Token: int64(i + 1), ClaimedAt: now, LeaseExpiresAt: now.Add(time.Minute)}
	}
	return swept{asked: n, rows: rows}
}

// drain takes back the rows hand gave the workers, as workers that ran and
// wrote them would.
func (s *sweeper) drain() {
	for len(s.r.rows) > 0 {
		<-s.r.rows
	}
	s.r.mu.Lock()
	clear(s.r.jobs)
	s.r.outstanding = 0
	s.r.mu.Unlock()
}

// TestSweeperLeavingIdleEndsCoalescing: with two sweeps in flight, the
// first comes back short (idle), a notification starts a coalesced
// wake-up, and the second comes back full (sweeping again). The loop must
// not stay coalescing: when it is next idle, it must take notifications
// again, or a row enqueued then waits for the poll (an hour here).
func TestSweeperLeavingIdleEndsCoalescing(t *testing.T) {
	s, _ := testSweeper(t, 10*time.Millisecond)
	s.started(2)
	s.started(2)

	s.swept(swept{asked: 2}) // short: idle until the poll
	require.True(t, s.idle)
	require.Equal(t, wakePoll, s.w.reason)
	require.NotNil(t, s.listening(), "an idle loop takes notifications")

	s.notified(true) // coalesced: the waker fires Coalesce later
	require.True(t, s.coalescing)
	require.Equal(t, wakeCoalesce, s.w.reason)
	require.Nil(t, s.listening(), "while coalescing, the waker is armed already")

	s.swept(fullSweep(2)) // full: sweeping again
	s.drain()
	require.False(t, s.idle)
	require.False(t, s.coalescing, "left idle, still coalescing")

	s.started(2)
	s.swept(swept{asked: 2}) // short: idle again
	require.True(t, s.idle)
	require.NotNil(t, s.listening(), "idle again, but deaf to notifications until the poll")
	s.notified(true)
	require.True(t, s.coalescing)
	require.Equal(t, wakeCoalesce, s.w.reason)
}

// TestSweeperBackoffTakesNotifications: a sweep that fails while the loop
// is idle and coalescing sets the waker anew for its backoff; that wait,
// like any backoff, ends Coalesce after a notification.
func TestSweeperBackoffTakesNotifications(t *testing.T) {
	s, _ := testSweeper(t, 10*time.Millisecond)
	s.started(2)
	s.started(2)
	s.swept(swept{asked: 2})
	s.notified(true)
	require.True(t, s.coalescing)

	s.swept(swept{asked: 2, err: fmt.Errorf("store down")})
	require.True(t, s.idle)
	require.Equal(t, wakeBackoff, s.w.reason)
	require.False(t, s.coalescing)
	require.NotNil(t, s.listening())
}

// Against a naive reference: over any sequence of the loop's steps, the
// sweeper is idle exactly when the reference says (idle after a short or
// failed sweep; sweeping after a full one, a fired waker, or without
// Coalesce a wake-up: a notification, or a written result after a failed
// sweep); it is coalescing only while idle, with its waker armed no later
// than Coalesce after the wake-up; and idle and not coalescing, it takes
// notifications.
func TestSweeperStepsAgainstReference(t *testing.T) {
	for _, coalesce := range []time.Duration{-1, 10 * time.Millisecond} {
		t.Run(fmt.Sprint("coalesce ", coalesce), func(t *testing.T) {
			base, _ := testSweeper(t, coalesce)
			rapid.Check(t, func(rt *rapid.T) {
				s := &sweeper{r: base.r, ctx: base.ctx, sweep: base.sweep, depth: base.depth, notes: base.notes,
					w: newWaker(), refillTimer: base.refillTimer, results: base.results, lastFull: true}
				defer s.w.stop()
				var (
					idle, failed bool // the reference
					wokeAt       time.Time
				)
				for range rapid.IntRange(1, 40).Draw(rt, "steps") {
					step := rapid.SampledFrom([]string{"launch", "short", "full", "fail", "flushed", "notified", "polled"}).Draw(rt, "step")
					wasCoalescing := s.coalescing
					switch step {
					case "launch":
						if s.idle || s.inflight >= s.depth || s.inflight > 0 && !s.lastFull {
							continue // launch would not
						}
						s.started(1)
					case "short", "full", "fail":
						if s.inflight == 0 {
							continue
						}
						res := swept{asked: 1}
						switch step {
						case "full":
							res = fullSweep(1)
						case "fail":
							res.err = fmt.Errorf("store down")
						}
						s.swept(res)
						s.drain()
						idle, failed = step != "full", step == "fail"
					case "flushed":
						s.flushed()
						if failed && coalesce < 0 {
							idle = false
						}
					case "notified":
						s.notified(true)
						if coalesce < 0 {
							idle = false
						}
					case "polled":
						if !s.idle {
							continue // the loop reads the waker only while idle
						}
						s.polled()
						idle = false
					}
					if s.coalescing && !wasCoalescing {
						wokeAt = time.Now()
					}
					require.Equal(rt, idle, s.idle, "idle, after %s", step)
					require.False(rt, s.coalescing && !s.idle, "coalescing while sweeping, after %s", step)
					if s.coalescing {
						require.False(rt, s.w.at.After(wokeAt.Add(coalesce)), "coalescing with the waker armed past Coalesce, after %s", step)
					}
					if s.idle && !s.coalescing {
						require.NotNil(rt, s.listening(), "idle and deaf to notifications, after %s", step)
					}
				}
			})
		})
	}
}
