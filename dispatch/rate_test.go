package dispatch_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/stretchr/testify/require"
)

// TestRateHeldRowsHoldNoSlot: a namespace whose rate bucket is empty (a
// rate so low no token accrues during the test) has its rows held with the
// reason "rate" in the sweeps' Metrics, none of them runs, and the other
// namespace's rows all run through the same workers: rows waiting for
// tokens hold no worker and no concurrency slot.
func TestRateHeldRowsHoldNoSlot(t *testing.T) {
	clk := newClock()
	s := newStore(t, memstore.Options{Now: clk.Now})
	enqueue(t, s, "k", 40, 2) // ns-0 and ns-1, 20 rows each
	bp, err := backpressure.New(backpressure.Config{BatchSize: 4, DefaultQuota: 2,
		Rates: map[string]backpressure.Rate{"ns-0": {PerSecond: 1e-9, Burst: 5}}}, allShards(t, memstore.DefaultShardCount))
	require.NoError(t, err)
	var ran0 atomic.Int64
	handler := func(_ context.Context, r outbox.Row) error {
		if r.Namespace == "ns-0" {
			ran0.Add(1)
		}
		return nil
	}
	rec := newRecorder()
	d, err := dispatch.New(bp, s, handler, dispatch.Options{Workers: 2, Metrics: rec, Logger: quietLogger()})
	require.NoError(t, err)
	stop := start(t, d)
	rec.waitUntil(t, "ns-1's 20 rows settled", func(r *recorder) bool { return r.settled() == 20 })
	require.NoError(t, stop())
	require.Zero(t, ran0.Load(), "a row of the rate-held namespace ran")
	held := false
	for _, e := range rec.sweeps {
		if r, ok := e.Plan.Namespace("ns-0"); ok && r.Held > 0 {
			require.Equal(t, backpressure.HeldRate, r.Reason, "sweep report %+v", r)
			require.Zero(t, r.Tokens)
			held = true
		}
	}
	require.True(t, held, "no sweep reported ns-0 held")
}
