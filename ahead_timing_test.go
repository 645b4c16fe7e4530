package backpressure_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand: each read returns the
// current time, and the test advances it between and inside sweeps.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// A store whose every call takes tick of the fake clock, so that a sweep
// has a duration the test knows.
type tickingStore struct {
	*aheadStore
	clock *fakeClock
	tick  time.Duration
}

func (s *tickingStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]memRow, error) {
	s.clock.t = s.clock.t.Add(s.tick)
	return s.aheadStore.ClaimOutboxRowsScoped(ctx, f, claims)
}

// SweepAhead reads ahead only for a caller sweeping back to back: a sweep
// that begins later after the last one's end than the last one took, as a
// dispatcher whose workers are busy, or a ticker, sweeps, starts no
// read-ahead (it would expire unused); one that begins within it does, and
// the next back-to-back sweep plans from it.
func TestSweepAheadReadsAheadOnlyBackToBack(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := &tickingStore{aheadStore: deepStore(3, 2, 200), clock: clock, tick: time.Millisecond}
	b := newTestBP(t, backpressure.Config{BatchSize: 6, DefaultQuota: backpressure.Unlimited, Clock: clock.now}, 1)
	sweep := func() {
		t.Helper()
		rows, _, err := backpressure.SweepAhead(context.Background(), b, store, 6)
		require.NoError(t, err)
		require.Len(t, rows, 6)
		backpressure.WaitAhead(b)
	}
	reads := func() int { _, a := store.calls(); return a }

	sweep() // the first sweep: nothing before it, no read-ahead
	require.Zero(t, reads())
	require.False(t, backpressure.AheadPending(b))

	clock.t = clock.t.Add(5 * time.Millisecond) // a gap longer than the sweep (1ms): busy workers
	sweep()
	require.Zero(t, reads(), "a sweep after a long gap read ahead")

	clock.t = clock.t.Add(500 * time.Microsecond) // within the last sweep's duration
	sweep()
	require.Equal(t, 1, reads(), "a back-to-back sweep did not read ahead")
	require.True(t, backpressure.AheadPending(b))

	own, _ := store.calls()
	clock.t = clock.t.Add(500 * time.Microsecond)
	sweep() // plans from the read-ahead: no count of its own
	own2, _ := store.calls()
	require.Equal(t, own, own2, "the back-to-back sweep counted for itself")

	// A late sweep neither uses the counts read ahead nor reads ahead.
	clock.t = clock.t.Add(time.Second)
	sweep()
	own3, _ := store.calls()
	require.Equal(t, own2+1, own3, "a late sweep did not count afresh")
	require.False(t, backpressure.AheadPending(b))
}

// Counts read ahead that give a plan short of the budget are not trusted:
// a read that saw its own sweep's claim has the grants subtracted twice and
// may understate what is claimable, so the sweep counts afresh and claims
// the rows that wait, rather than coming back short (which a dispatcher
// takes for an empty outbox).
func TestSweepAheadShortPlanCountsAfresh(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	store := deepStore(1, 1, 150) // one route, 150 rows
	b := newTestBP(t, backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited}, 1)
	store.setOrder(orderClaimFirst) // the read-ahead sees the claim
	rows, _, err := backpressure.SweepAhead(context.Background(), b, store, 100)
	require.NoError(t, err)
	require.Len(t, rows, 100)
	backpressure.WaitAhead(b)
	require.True(t, backpressure.AheadPending(b))

	// Read after the claim: 50 left, corrected to 50 − 100 → none.
	own, _ := store.calls()
	store.setOrder(orderFree)
	rows, plan, err := backpressure.SweepAhead(context.Background(), b, store, 100)
	require.NoError(t, err)
	require.Len(t, rows, 50, "the sweep came back short while 50 rows waited: %+v", plan)
	own2, _ := store.calls()
	require.Equal(t, own+1, own2, "the sweep did not count afresh")
}
