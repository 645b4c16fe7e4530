package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure"
)

// TestWakerFiresForTheEarliestReason: the waker fires at the earliest of
// the instants armed since its last set, with that instant's reason; a
// later or already passed instant changes nothing.
func TestWakerFiresForTheEarliestReason(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name   string
		arm    func(w *waker)
		reason wakeReason
	}{
		{"poll alone", func(*waker) {}, wakePoll},
		{"a due row", func(w *waker) { require.True(t, w.sooner(now, time.Minute, wakeDue)) }, wakeDue},
		{"rate tokens", func(w *waker) { require.True(t, w.sooner(now, time.Minute, wakeRate)) }, wakeRate},
		{"coalesce", func(w *waker) { require.True(t, w.sooner(now, time.Minute, wakeCoalesce)) }, wakeCoalesce},
		{"the earliest of two", func(w *waker) {
			require.True(t, w.sooner(now, 2*time.Minute, wakeDue))
			require.True(t, w.sooner(now, time.Minute, wakeRate))
			require.False(t, w.sooner(now, 3*time.Minute, wakeCoalesce), "a later instant armed")
		}, wakeRate},
		{"passed instants ignored", func(w *waker) {
			require.False(t, w.sooner(now, 0, wakeDue))
			require.False(t, w.sooner(now, -time.Second, wakeRate))
		}, wakePoll},
		{"set replaces", func(w *waker) {
			require.True(t, w.sooner(now, time.Minute, wakeDue))
			w.set(now, 2*time.Hour, wakeBackoff)
		}, wakeBackoff},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWaker()
			defer w.stop()
			w.set(now, time.Hour, wakePoll)
			c.arm(w)
			require.Equal(t, c.reason, w.reason, "armed for %v", w.reason)
		})
	}
	// And it fires: a short wait for a due row.
	w := newWaker()
	defer w.stop()
	w.set(time.Now(), time.Hour, wakePoll)
	w.sooner(time.Now(), time.Millisecond, wakeDue)
	select {
	case <-w.C():
	case <-time.After(time.Minute):
		t.Fatal("the waker did not fire")
	}
	require.Equal(t, "due", w.reason.String())
}

// TestRateHeldAndNextToken: a plan's namespace held by its rate names its
// next token's wait; a namespace without a rate, or not held, names none.
func TestRateHeldAndNextToken(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	all, err := backpressure.AllShards(4)
	require.NoError(t, err)
	bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: backpressure.Unlimited, Clock: clock,
		Rates: map[string]backpressure.Rate{"rated": {PerSecond: 40, Burst: 10}}}, all)
	require.NoError(t, err)
	plan, err := bp.Plan(backpressure.Snapshot{Pending: []backpressure.RouteCount{
		{Route: backpressure.Route{Namespace: "rated", TaskQueue: "q"}, Count: 100},
		{Route: backpressure.Route{Namespace: "free", TaskQueue: "q"}, Count: 5},
	}})
	require.NoError(t, err)
	rated, _ := plan.Namespace("rated")
	free, _ := plan.Namespace("free")
	require.True(t, rateHeld(rated), "%+v", rated)
	require.False(t, rateHeld(free), "%+v", free)
	wait, ok := nextToken(bp, plan, clock)
	require.True(t, ok)
	require.InDelta(t, float64(25*time.Millisecond), float64(wait), float64(time.Microsecond))
	_, ok = nextToken(bp, backpressure.Plan{Namespaces: []backpressure.NamespaceReport{free}}, clock)
	require.False(t, ok)
}

// fakeProber answers NextDue with wait and counts its calls.
type fakeProber struct {
	wait  time.Duration
	ok    bool
	calls int
}

func (p *fakeProber) NextDue(context.Context, backpressure.OwnedShardFraction) (time.Duration, bool, error) {
	p.calls++
	return p.wait, p.ok, nil
}

// TestDueRowsProbesOnlyWhenStale: what the loop knows of the next due row
// comes from a probe when rows may have been enqueued since the last, from
// the retries written otherwise; a retry due already asks for a sweep at
// once; probes are at least every apart, and one skipped for that reason
// asks for a sweep when it is allowed.
func TestDueRowsProbesOnlyWhenStale(t *testing.T) {
	p := &fakeProber{wait: time.Minute, ok: true}
	d := &dueRows{prober: p, every: 20 * time.Millisecond, stale: true}
	r := &run{m: NopMetrics{}}
	ctx, shards := context.Background(), backpressure.OwnedShardFraction{}
	now := time.Now()
	wait, ok := d.next(ctx, r, shards, now)
	require.True(t, ok)
	require.InDelta(t, float64(time.Minute), float64(wait), float64(time.Second))
	require.Equal(t, 1, p.calls)

	// Not stale: no probe; a retry written is taken without one.
	d.retried(now, 10*time.Second)
	wait, ok = d.next(ctx, r, shards, now)
	require.True(t, ok)
	require.Equal(t, 10*time.Second, wait)
	require.Equal(t, 1, p.calls, "probed though nothing was enqueued")

	// A retry due already: sweep now.
	d.retried(now, 0)
	wait, ok = d.next(ctx, r, shards, now)
	require.True(t, ok)
	require.Equal(t, sweepNow, wait)

	// Stale within every of the last probe: sweep when a probe is allowed.
	d.stale = true
	wait, ok = d.next(ctx, r, shards, now.Add(5*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, 15*time.Millisecond, wait)
	require.Equal(t, 1, p.calls)

	// The row known due has passed: probe again (allowed now).
	p.ok = false
	_, ok = d.next(ctx, r, shards, now.Add(11*time.Second))
	require.False(t, ok)
	require.Equal(t, 2, p.calls)
}
