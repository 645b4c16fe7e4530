package dispatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
