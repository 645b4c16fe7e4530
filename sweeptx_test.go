package backpressure_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
)

// memTxStore adds a naive TxSweeper to memStore: fn runs on the store
// itself, and a failed fn's changes are undone from a copy of the rows.
type memTxStore struct {
	*memStore
	txs      int   // InSweepTx calls
	beginErr error // when set, InSweepTx fails with it before calling fn
}

func (s *memTxStore) InSweepTx(ctx context.Context, fn func(tx backpressure.OutboxStore[memRow]) error) error {
	s.txs++
	if s.beginErr != nil {
		return s.beginErr
	}
	s.mu.Lock()
	saved := make([]memRow, len(s.rows))
	for i, r := range s.rows {
		saved[i] = *r
	}
	s.mu.Unlock()
	if err := fn(s.memStore); err != nil {
		s.mu.Lock()
		for i := range saved {
			*s.rows[i] = saved[i]
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// Sweep runs through InSweepTx when the store offers it, claims what it
// claims without it, and keeps the rotation only when the transaction
// succeeds.
func TestSweepInSweepTx(t *testing.T) {
	cfg := backpressure.Config{BatchSize: 3, DefaultQuota: 2}
	tx, plain := &memTxStore{memStore: newMemStore(4)}, newMemStore(4)
	for _, s := range []*memStore{tx.memStore, plain} {
		for _, ns := range []string{"a", "b", "c", "d"} {
			s.enqueue(ns, "q1", 3)
			s.enqueue(ns, "q2", 2)
		}
	}
	bt, bp := newTestBP(t, cfg, 4), newTestBP(t, cfg, 4)
	for sweep := 0; sweep < 8; sweep++ {
		r1, p1, err1 := backpressure.Sweep(context.Background(), bt, tx)
		r2, p2, err2 := backpressure.Sweep(context.Background(), bp, plain)
		require.NoError(t, err1)
		require.NoError(t, err2)
		require.Equal(t, p2.Claims, p1.Claims, "sweep %d", sweep)
		require.Equal(t, len(r2), len(r1), "sweep %d", sweep)
		for _, s := range []*memStore{tx.memStore, plain} {
			s.settleNamespace([]string{"a", "b", "c", "d"}[sweep%4])
		}
	}
	require.Equal(t, 8, tx.txs)

	// The store's own failure is a *StoreError for InSweepTx; a failure
	// inside fn keeps the Op of the call that failed. Neither moves the
	// rotation nor leaves a row claimed.
	boom := errors.New("database gone")
	tx.beginErr = boom
	_, _, err := backpressure.Sweep(context.Background(), bt, tx)
	var se *backpressure.StoreError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "InSweepTx", se.Op)
	require.ErrorIs(t, err, boom)
	tx.beginErr = nil

	failing := &failingTxStore{memTxStore: tx, failOn: 3, err: boom}
	before := claimedKeys(tx.memStore)
	_, _, err = backpressure.Sweep(context.Background(), bt, failing)
	require.ErrorAs(t, err, &se)
	require.Equal(t, "ClaimOutboxRowsScoped", se.Op)
	require.ErrorIs(t, err, boom)
	require.Equal(t, before, claimedKeys(tx.memStore), "a failed sweep transaction left rows claimed")

	_, p1, err1 := backpressure.Sweep(context.Background(), bt, tx)
	_, p2, err2 := backpressure.Sweep(context.Background(), bp, plain)
	require.NoError(t, err1)
	require.NoError(t, err2)
	require.Equal(t, p2.Claims, p1.Claims, "the sweep after the failures")
}

// failingTxStore runs InSweepTx on a view whose failOn-th call fails.
type failingTxStore struct {
	*memTxStore
	failOn int
	err    error
}

func (s *failingTxStore) InSweepTx(ctx context.Context, fn func(tx backpressure.OutboxStore[memRow]) error) error {
	return s.memTxStore.InSweepTx(ctx, func(backpressure.OutboxStore[memRow]) error {
		return fn(&failingStore{memStore: s.memStore, failOn: s.failOn, err: s.err})
	})
}

// claimedKeys lists the keys of the rows under a lease, sorted.
func claimedKeys(s *memStore) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.rows {
		if !r.Settled && !r.LeaseUntil.IsZero() {
			out = append(out, r.Key)
		}
	}
	slices.Sort(out)
	return out
}
