package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/stretchr/testify/require"
)

// Rows enqueued one by one, each with its own notification, while an idle
// dispatcher coalesces wake-ups (Coalesce far longer than the enqueues
// take) are claimed by one sweep; with Coalesce negative, the first
// notification sweeps at once and the rows enqueued after it need further
// sweeps (the enqueues wait for each row's start, so each is its own).
func TestCoalesceClaimsTricklingRowsInOneSweep(t *testing.T) {
	for _, c := range []struct {
		name     string
		coalesce time.Duration
		oneSweep bool
	}{
		{"coalesced", 500 * time.Millisecond, true},
		{"at once", -1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, memstore.Options{})
			rec := newRecorder()
			started := make(chan struct{}, 16)
			handler := func(context.Context, outbox.Row) error { started <- struct{}{}; return nil }
			d, err := dispatch.New(newBP(t, 100, backpressure.Unlimited, nil), s, handler, dispatch.Options{
				Workers: 8, PollInterval: time.Hour, Coalesce: c.coalesce, Metrics: rec, Logger: quietLogger(),
			})
			require.NoError(t, err)
			start(t, d)
			// The first sweep finds nothing: the dispatcher is idle.
			rec.waitUntil(t, "the first sweep", func(r *recorder) bool { return len(r.sweeps) >= 1 })
			const rows = 5
			for i := range rows {
				_, err := s.Enqueue(context.Background(), []outbox.Message{{DispatchKey: fmt.Sprint("k", i), Namespace: "ns", TaskQueue: "q"}})
				require.NoError(t, err)
				if !c.oneSweep {
					<-started
				}
			}
			rec.waitUntil(t, "every row settled", func(r *recorder) bool { return r.settled() == rows })
			rec.mu.Lock()
			defer rec.mu.Unlock()
			claiming := 0
			for _, e := range rec.sweeps {
				if e.Claimed > 0 {
					claiming++
				}
			}
			if c.oneSweep {
				require.Equal(t, 1, claiming, "sweeps that claimed rows: %+v", rec.sweeps)
			} else {
				require.Equal(t, rows, claiming, "sweeps that claimed rows")
			}
		})
	}
}

func TestCoalesceAbovePollInterval(t *testing.T) {
	s := newStore(t, memstore.Options{})
	_, err := dispatch.New(newBP(t, 10, backpressure.Unlimited, nil), s, func(context.Context, outbox.Row) error { return nil },
		dispatch.Options{Workers: 1, PollInterval: time.Millisecond, Coalesce: 2 * time.Millisecond})
	var oe *dispatch.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Coalesce", oe.Field)
	require.ErrorIs(t, err, dispatch.ErrInvalidOptions)
}

// TestCoalesceAboveDefaultPollInterval: with PollInterval left 0, the poll
// in force is 1s, and a Coalesce above it is refused as one above an
// explicit PollInterval is; one at it is accepted.
func TestCoalesceAboveDefaultPollInterval(t *testing.T) {
	s := newStore(t, memstore.Options{})
	bp := newBP(t, 10, backpressure.Unlimited, nil)
	for _, c := range []time.Duration{3 * time.Second, time.Hour} {
		_, err := dispatch.New(bp, s, noop, dispatch.Options{Workers: 1, Coalesce: c})
		var oe *dispatch.OptionError
		require.ErrorAs(t, err, &oe, "Coalesce %v", c)
		require.Equal(t, "Coalesce", oe.Field)
		require.ErrorIs(t, err, dispatch.ErrInvalidOptions)
	}
	_, err := dispatch.New(bp, s, noop, dispatch.Options{Workers: 1, Coalesce: time.Second})
	require.NoError(t, err)
}
