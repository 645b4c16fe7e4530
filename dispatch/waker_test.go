package dispatch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// TestCappedDrainWithIdleWorkers: a namespace held at its quota, with more
// workers than the quota, drains without the poll: each settled row frees
// headroom, and the dispatcher sweeps again (at most one Coalesce later)
// rather than waiting for the poll. With PollInterval 1h, a loop that
// waited for the poll would claim one quota's worth of rows and stop.
func TestCappedDrainWithIdleWorkers(t *testing.T) {
	for _, o := range []dispatch.Options{
		{Workers: 100},
		{Workers: 100, FreshCounts: true},
		{Workers: 100, ClaimsInFlight: 1},
		{Workers: 100, Coalesce: -1},
	} {
		s := newStore(t, memstore.Options{})
		const rows = 1000
		enqueue(t, s, "k", rows, 1)
		rec := newRecorder()
		o.PollInterval, o.Metrics, o.Logger = time.Hour, rec, quietLogger()
		d, err := dispatch.New(newBP(t, 100, 50, nil), s, noop, o)
		require.NoError(t, err)
		stop := start(t, d)
		rec.waitUntil(t, "every row settled", func(r *recorder) bool { return r.settled() == rows })
		require.NoError(t, stop())
		capped := false
		for _, e := range rec.sweeps {
			if r, ok := e.Plan.Namespace("ns-0"); ok && r.Headroom < e.Asked {
				capped = true
			}
		}
		require.True(t, capped, "no sweep found ns-0's headroom below its credit: the test does not test the cap")
	}
}

// TestLiveness runs dispatchtest's liveness checks on memstore: with a 1h
// poll, a capped drain, a retry's backoff, RunAt rows and a rated drain
// each finish, the loop sweeping for each reason.
func TestLiveness(t *testing.T) {
	dispatchtest.Liveness{Open: func(t *testing.T) outbox.Store { return newStore(t, memstore.Options{}) }}.Run(t)
}

// hookedClaimer runs hook (once armed, once) after a claimed count has
// been read and before it is returned: a test's way to write results
// while a sweep is in flight, after its counts were read.
type hookedClaimer struct {
	backpressure.OutboxStore[outbox.Row]
	hook *atomic.Pointer[func()]
}

func (c hookedClaimer) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	m, err := c.OutboxStore.CountClaimedOutboxRows(ctx, shards)
	if f := c.hook.Swap(nil); f != nil {
		(*f)()
	}
	return m, err
}

// hookedStore is a memstore whose claimer is hooked.
type hookedStore struct {
	*memstore.Store
	claimer hookedClaimer
}

func (s hookedStore) Claimer() backpressure.OutboxStore[outbox.Row] { return s.claimer }

// TestResultsWrittenDuringASweepWakeTheLoop: a namespace at its quota (2)
// with its two rows running; a notification starts a sweep whose counts
// see both claimed (headroom 0), and both results are written while that
// sweep is in flight, before it comes back held at the ceiling. Their
// signals reached the loop before it was idle: the loop must still sweep
// again for the headroom they freed (with a 1h poll, the rows left would
// otherwise wait an hour).
func TestResultsWrittenDuringASweepWakeTheLoop(t *testing.T) {
	mem := newStore(t, memstore.Options{})
	var hook atomic.Pointer[func()]
	s := hookedStore{Store: mem, claimer: hookedClaimer{OutboxStore: mem.Claimer(), hook: &hook}}
	enqueue(t, mem, "k", 10, 1)
	release := make(chan struct{})
	handler := func(ctx context.Context, row outbox.Row) error {
		if row.DispatchKey == "k-0" || row.DispatchKey == "k-1" {
			<-release
		}
		return nil
	}
	rec := newRecorder()
	d, err := dispatch.New(newBP(t, 4, 2, nil), s, handler, dispatch.Options{Workers: 4, FreshCounts: true,
		PollInterval: time.Hour, Metrics: rec, Logger: quietLogger()})
	require.NoError(t, err)
	start(t, d)
	rec.waitUntil(t, "the first sweep", func(r *recorder) bool { return len(r.sweeps) >= 1 })
	written := func() {
		close(release)
		rec.waitUntil(t, "both results written", func(r *recorder) bool { return r.settled() == 2 })
		// The completer signals the loop right after; let the loop take
		// the signal while this sweep is still in flight.
		time.Sleep(50 * time.Millisecond)
	}
	hook.Store(&written)
	enqueue(t, mem, "late", 1, 1) // a notification: the sweep that runs the hook
	rec.waitUntil(t, "every row settled", func(r *recorder) bool { return r.settled() == 11 })
}
