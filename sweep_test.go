package backpressure_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// failingStore fails its failOn-th call (1-based) with err.
type failingStore struct {
	*memStore
	failOn int
	calls  int
	err    error
}

func (s *failingStore) step() error {
	s.calls++
	if s.calls == s.failOn {
		return s.err
	}
	return nil
}

func (s *failingStore) CountClaimedOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction) (map[string]int, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	return s.memStore.CountClaimedOutboxRows(ctx, f)
}

func (s *failingStore) CountPendingOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, c int) ([]backpressure.RouteCount, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	return s.memStore.CountPendingOutboxRows(ctx, f, c)
}

func (s *failingStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, cs []backpressure.ScopedClaim) ([]memRow, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	return s.memStore.ClaimOutboxRowsScoped(ctx, f, cs)
}

func newTestBP(t *testing.T, cfg backpressure.Config, shards int) *backpressure.Backpressure {
	t.Helper()
	f, err := backpressure.AllShards(shards)
	require.NoError(t, err)
	b, err := backpressure.New(cfg, f)
	require.NoError(t, err)
	return b
}

// A store error at any of the three calls comes back as a *StoreError
// naming the call, unwrapping to the store's error, and the failed sweep
// leaves the rotation where it was: the next sweep plans what the failed
// one would have.
func TestSweepStoreErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	for failOn, op := range []string{"", "CountClaimedOutboxRows", "CountPendingOutboxRows", "ClaimOutboxRowsScoped"} {
		if failOn == 0 {
			continue
		}
		cfg := backpressure.Config{BatchSize: 5, DefaultQuota: backpressure.Unlimited}
		failing, twin := newMemStore(4), newMemStore(4)
		for _, s := range []*memStore{failing, twin} {
			s.enqueue("a", "q", 10)
			s.enqueue("b", "q", 10)
		}
		bf, bt := newTestBP(t, cfg, 4), newTestBP(t, cfg, 4)
		fs := &failingStore{memStore: failing, failOn: failOn, err: boom}

		rows, plan, err := backpressure.Sweep(context.Background(), bf, fs)
		var se *backpressure.StoreError
		if !errors.As(err, &se) || se.Op != op || !errors.Is(err, boom) || !errors.Is(err, backpressure.ErrStore) {
			t.Fatalf("fail on call %d: Sweep error = %v, want a *StoreError for %s wrapping %v", failOn, err, op, boom)
		}
		if rows != nil || plan.Claims != nil {
			t.Fatalf("fail on call %d: Sweep returned rows %v, plan %v with an error", failOn, rows, plan)
		}
		for s := 0; s < 3; s++ {
			_, p1, err1 := backpressure.Sweep(context.Background(), bf, fs)
			_, p2, err2 := backpressure.Sweep(context.Background(), bt, twin)
			require.NoError(t, err1)
			require.NoError(t, err2)
			require.Equal(t, p2.Claims, p1.Claims, "sweep %d after a failure on %s", s, op)
		}
	}
}

// A nil store is a typed error, not a panic, whatever the budget.
func TestSweepNilStore(t *testing.T) {
	b := newTestBP(t, backpressure.Config{BatchSize: 5, DefaultQuota: backpressure.Unlimited}, 4)
	for _, n := range []int{5, 0} {
		if _, _, err := backpressure.SweepN[memRow](context.Background(), b, nil, n); !errors.Is(err, backpressure.ErrInvalidConfig) {
			t.Errorf("SweepN(nil store, %d) = %v, want ErrInvalidConfig", n, err)
		}
	}
}

func TestSweepContext(t *testing.T) {
	store := newMemStore(4)
	store.enqueue("a", "q", 3)
	b := newTestBP(t, backpressure.Config{BatchSize: 5, DefaultQuota: backpressure.Unlimited}, 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := backpressure.Sweep(ctx, b, store)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, store.calls, "a cancelled sweep must not call the store")

	// Round trips: three per sweep that claims, two when nothing can be.
	rows, _, err := backpressure.Sweep(context.Background(), b, store)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, 3, store.calls)
	rows, _, err = backpressure.Sweep(context.Background(), b, store)
	require.NoError(t, err)
	require.Empty(t, rows)
	require.Equal(t, 5, store.calls)
}

// Concurrent sweeps on one Backpressure are serialised, so together they
// never take a namespace past its ceiling.
func TestSweepConcurrent(t *testing.T) {
	store := newMemStore(8)
	for i := 0; i < 10; i++ {
		store.enqueue(fmt.Sprint("ns", i), "q", 50)
	}
	b := newTestBP(t, backpressure.Config{BatchSize: 7, DefaultQuota: 4}, 8)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, _, err := backpressure.Sweep(context.Background(), b, store); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	claimed, err := store.CountClaimedOutboxRows(context.Background(), b.OwnedShards())
	require.NoError(t, err)
	for ns, n := range claimed {
		require.LessOrEqual(t, n, 4, "namespace %s", ns)
	}
	require.Len(t, claimed, 10)
}

// A stateful property: random enqueues, settles, lease expiries and sweeps
// with random budgets over an in-memory outbox. After every sweep each
// namespace's live claimed rows are within its ceiling, no sweep claims
// more than min(n, B), a budget n ≤ 0 makes no store call, every claimed
// row was claimable, and every row the sweep did not claim is unchanged.
func TestSweepStateful(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nShards := rapid.IntRange(1, 16).Draw(t, "shards")
		store := newMemStore(nShards)
		var owned []int
		for s := 0; s < nShards; s++ {
			if rapid.Bool().Draw(t, "own") {
				owned = append(owned, s)
			}
		}
		f, err := backpressure.NewOwnedShardFraction(owned, nShards)
		if err != nil {
			t.Fatal(err)
		}
		quotas := map[string]int{"n0": rapid.IntRange(0, 6).Draw(t, "q0"), "n1": rapid.IntRange(1, 6).Draw(t, "q1")}
		b, err := backpressure.New(backpressure.Config{BatchSize: rapid.IntRange(1, 8).Draw(t, "batch"), DefaultQuota: 3, Quotas: quotas}, f)
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 30; step++ {
			switch rapid.IntRange(0, 3).Draw(t, "action") {
			case 0:
				store.enqueue(fmt.Sprint("n", rapid.IntRange(0, 3).Draw(t, "ns")), fmt.Sprint("q", rapid.IntRange(0, 2).Draw(t, "tq")), rapid.IntRange(1, 6).Draw(t, "n"))
			case 1:
				store.settleNamespace(fmt.Sprint("n", rapid.IntRange(0, 3).Draw(t, "settleNS")))
			case 2:
				store.now = store.now.Add(time.Duration(rapid.IntRange(0, 90).Draw(t, "secs")) * time.Second)
			case 3:
				before := make([]memRow, len(store.rows))
				for i, r := range store.rows {
					before[i] = *r
				}
				n := rapid.IntRange(-1, b.BatchSize()+2).Draw(t, "budget")
				calls := store.calls
				rows, plan, err := backpressure.SweepN(context.Background(), b, store, n)
				if err != nil {
					t.Fatalf("step %d: SweepN(%d): %v", step, n, err)
				}
				if n <= 0 && (rows != nil || plan.Claims != nil || plan.Namespaces != nil || store.calls != calls) {
					t.Fatalf("step %d: SweepN(%d) = %v, %+v after %d store calls, want nothing and no call", step, n, rows, plan, store.calls-calls)
				}
				if len(rows) > max(0, min(n, b.BatchSize())) || len(rows) != plan.Granted() {
					t.Fatalf("step %d: SweepN(%d) claimed %d rows, plan granted %d, batch %d", step, n, len(rows), plan.Granted(), b.BatchSize())
				}
				claimedKeys := map[string]bool{}
				perRoute := map[backpressure.Route]int{}
				for _, r := range rows {
					claimedKeys[r.Key] = true
					perRoute[backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}]++
				}
				limits := map[backpressure.Route]int{}
				for _, c := range plan.Claims {
					limits[c.Route] = c.Limit
				}
				for rt, n := range perRoute {
					if n > limits[rt] {
						t.Fatalf("step %d: claimed %d rows of %v, plan's limit %d", step, n, rt, limits[rt])
					}
				}
				for i, r := range store.rows {
					old := before[i]
					if claimedKeys[r.Key] {
						if old.Settled || !f.Owns(old.Shard) || store.now.Before(old.LeaseUntil) {
							t.Fatalf("step %d: claimed a row that was not claimable: %+v", step, old)
						}
					} else if *r != old {
						t.Fatalf("step %d: unclaimed row changed: %+v -> %+v", step, old, *r)
					}
				}
				live, _ := store.CountClaimedOutboxRows(context.Background(), f)
				for ns, n := range live {
					if c := b.Ceiling(ns); c != backpressure.Unlimited && n > c {
						t.Fatalf("step %d: namespace %s has %d claimed > ceiling %d", step, ns, n, c)
					}
				}
				if !slices.IsSortedFunc(plan.Namespaces, func(a, b backpressure.NamespaceReport) int {
					return strings.Compare(a.Namespace, b.Namespace)
				}) {
					t.Fatalf("step %d: reports unsorted", step)
				}
			}
		}
	})
}

// Issue 13 §1: 100 rows of 10 tenants (half on the default task queue "")
// and rows on routes Route.Validate rejects, written by other means. Every
// sweep succeeds, the 100 rows are claimed, the invalid ones never are, and
// each sweep's plan reports them held as invalid-route.
func TestSweepInvalidRouteDoesNotStopTheNode(t *testing.T) {
	store := newMemStore(4)
	for n := 0; n < 10; n++ {
		store.enqueue(fmt.Sprintf("tenant-%d", n), "", 5)
		store.enqueue(fmt.Sprintf("tenant-%d", n), "emails", 5)
	}
	store.enqueue("", "q", 1)
	store.enqueue("tenant-3", "bad\x00queue", 2)
	b := newTestBP(t, backpressure.Config{BatchSize: 25, DefaultQuota: backpressure.Unlimited}, 4)
	claimed := 0
	for sweep := 0; sweep < 5; sweep++ {
		rows, plan, err := backpressure.Sweep(context.Background(), b, store)
		if err != nil {
			t.Fatalf("sweep %d: %v", sweep, err)
		}
		for _, r := range rows {
			if err := (backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}).Validate(); err != nil {
				t.Fatalf("sweep %d claimed a row on an invalid route: %v", sweep, err)
			}
		}
		claimed += len(rows)
		for _, ns := range []string{"", "tenant-3"} {
			r, ok := plan.Namespace(ns)
			if !ok || r.Reason != backpressure.HeldInvalidRoute || r.Invalid == 0 {
				t.Fatalf("sweep %d: report of %q = %+v (found %v), want rows held invalid-route", sweep, ns, r, ok)
			}
		}
	}
	if claimed != 100 {
		t.Fatalf("claimed %d rows in 5 sweeps, want 100", claimed)
	}
}
