package backpressure_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
)

// routedRow is a memRow that says its route, as outbox.Row does, so that
// Sweep can check the routes of the rows a claim returns.
type routedRow struct{ memRow }

func (r routedRow) Route() backpressure.Route {
	return backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}
}

// brokenStore is a memStore over routedRows whose answers a test may bend
// to break the store's contract: each hook, when set, rewrites what the
// honest store answered.
type brokenStore struct {
	*memStore
	claimed func(map[string]int) map[string]int
	pending func([]backpressure.RouteCount) []backpressure.RouteCount
	claim   func([]backpressure.ScopedClaim, []routedRow) []routedRow
}

func (s *brokenStore) CountClaimedOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction) (map[string]int, error) {
	m, err := s.memStore.CountClaimedOutboxRows(ctx, f)
	if err == nil && s.claimed != nil {
		m = s.claimed(m)
	}
	return m, err
}

func (s *brokenStore) CountPendingOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, c int) ([]backpressure.RouteCount, error) {
	p, err := s.memStore.CountPendingOutboxRows(ctx, f, c)
	if err == nil && s.pending != nil {
		p = s.pending(p)
	}
	return p, err
}

func (s *brokenStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, cs []backpressure.ScopedClaim) ([]routedRow, error) {
	rows, err := s.memStore.ClaimOutboxRowsScoped(ctx, f, cs)
	out := make([]routedRow, len(rows))
	for i, r := range rows {
		out[i] = routedRow{r}
	}
	if err == nil && s.claim != nil {
		out = s.claim(cs, out)
	}
	return out, err
}

// brokenCounter adds a Counter whose pending counts the pending hook bends.
type brokenCounter struct{ *brokenStore }

func (s brokenCounter) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	if p.Namespaces > 0 {
		return nil, nil, backpressure.ErrNotSupported
	}
	var claimed map[string]int
	if p.Claimed {
		var err error
		if claimed, err = s.memStore.CountClaimedOutboxRows(ctx, f); err != nil {
			return nil, nil, err
		}
	}
	pending, err := s.brokenStore.CountPendingOutboxRows(ctx, f, p.CapPerRoute)
	return claimed, pending, err
}

// brokenWindow adds a window claim that answers grants and rows of its
// own making (window gives them, from the claims an honest store would
// make and the skip list it was handed).
type brokenWindow struct {
	*brokenStore
	window func(skip []string) ([]backpressure.RouteCount, int)
}

func (s brokenWindow) ClaimOutboxWindow(ctx context.Context, f backpressure.OwnedShardFraction, w backpressure.CountParams, skip []string, _ map[string]string) ([]routedRow, []backpressure.RouteCount, error) {
	grants, n := s.window(skip)
	var claims []backpressure.ScopedClaim
	for _, g := range grants[:min(n, len(grants))] {
		claims = append(claims, backpressure.ScopedClaim{Route: g.Route, Limit: 1})
	}
	rows, err := s.memStore.ClaimOutboxRowsScoped(ctx, f, claims)
	out := make([]routedRow, 0, n)
	for _, r := range rows {
		out = append(out, routedRow{r})
	}
	for len(out) < n && len(out) > 0 {
		out = append(out, out[0])
	}
	return out, grants, err
}

// requireContract asserts that err is a store's contract violation
// reported for the call op: a *StoreError naming op that wraps a
// *SnapshotError, matching ErrStore and ErrInvalidSnapshot.
func requireContract(t *testing.T, err error, op string) {
	t.Helper()
	var se *backpressure.StoreError
	require.ErrorAs(t, err, &se, "want a *StoreError for %s", op)
	require.Equal(t, op, se.Op)
	var snap *backpressure.SnapshotError
	require.ErrorAs(t, err, &snap, "want the violation as a *SnapshotError")
	require.ErrorIs(t, err, backpressure.ErrStore)
	require.ErrorIs(t, err, backpressure.ErrInvalidSnapshot)
}

// Counts and claims that break the store's contract are a *StoreError
// naming the call that returned them and wrapping a *SnapshotError, and
// the sweep that met them changes nothing: the next honest sweep plans
// what a fresh Backpressure's first sweep would.
func TestSweepContractViolations(t *testing.T) {
	twice := func(p []backpressure.RouteCount) []backpressure.RouteCount { return append(p, p[0]) }
	negative := func(p []backpressure.RouteCount) []backpressure.RouteCount {
		p[0].Count = -1
		return p
	}
	cases := []struct {
		name  string
		op    string
		store func(*brokenStore) backpressure.OutboxStore[routedRow]
	}{
		{"negative claimed count", "CountClaimedOutboxRows", func(s *brokenStore) backpressure.OutboxStore[routedRow] {
			s.claimed = func(m map[string]int) map[string]int { return map[string]int{"a": -1} }
			return s
		}},
		{"route listed twice", "CountPendingOutboxRows", func(s *brokenStore) backpressure.OutboxStore[routedRow] {
			s.pending = twice
			return s
		}},
		{"negative pending count from a Counter", "CountOutboxRows", func(s *brokenStore) backpressure.OutboxStore[routedRow] {
			s.pending = negative
			return brokenCounter{s}
		}},
		{"more rows than the limits", "ClaimOutboxRowsScoped", func(s *brokenStore) backpressure.OutboxStore[routedRow] {
			s.claim = func(_ []backpressure.ScopedClaim, rows []routedRow) []routedRow { return append(rows, rows[0]) }
			return s
		}},
		{"a row of a route not asked for", "ClaimOutboxRowsScoped", func(s *brokenStore) backpressure.OutboxStore[routedRow] {
			s.claim = func(_ []backpressure.ScopedClaim, rows []routedRow) []routedRow {
				rows[len(rows)-1].TaskQueue = "elsewhere"
				return rows
			}
			return s
		}},
		{"more rows of a route than its limit", "ClaimOutboxRowsScoped", func(s *brokenStore) backpressure.OutboxStore[routedRow] {
			s.claim = func(cs []backpressure.ScopedClaim, rows []routedRow) []routedRow {
				// Within the total (claims a:2, b:2): a third row of a
				// stands in for the first of b.
				rows[2] = rows[0]
				return rows
			}
			return s
		}},
	}
	cfg := backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem, twin := newMemStore(4), newMemStore(4)
			for _, m := range []*memStore{mem, twin} {
				m.enqueue("a", "q", 3)
				m.enqueue("b", "q", 3)
			}
			bs := &brokenStore{memStore: mem}
			store := tc.store(bs)
			b, fresh := newTestBP(t, cfg, 4), newTestBP(t, cfg, 4)
			rows, plan, err := backpressure.Sweep(context.Background(), b, store)
			requireContract(t, err, tc.op)
			require.Nil(t, rows)
			require.Zero(t, plan.Claims)

			// The rotation is unchanged: an honest sweep now plans as a
			// fresh Backpressure's first sweep on the same outbox does.
			bs.claimed, bs.pending, bs.claim = nil, nil, nil
			release(mem) // rows a broken claim took, as if their leases expired
			_, got, err := backpressure.Sweep(context.Background(), b, bs)
			require.NoError(t, err)
			_, want, err := backpressure.Sweep(context.Background(), fresh, &brokenStore{memStore: twin})
			require.NoError(t, err)
			require.Equal(t, want.Claims, got.Claims)
		})
	}
}

// A claim that breaks the contract inside a TxSweeper's transaction fails
// the transaction: its rows are not claimed.
func TestSweepTxContractViolation(t *testing.T) {
	mem := newMemStore(4)
	mem.enqueue("a", "q", 3)
	bs := &brokenStore{memStore: mem}
	bs.claim = func(_ []backpressure.ScopedClaim, rows []routedRow) []routedRow { return append(rows, rows[0]) }
	b := newTestBP(t, backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}, 4)
	_, _, err := backpressure.Sweep(context.Background(), b, brokenTx{bs})
	requireContract(t, err, "ClaimOutboxRowsScoped")
	claimed, err := mem.CountClaimedOutboxRows(context.Background(), mustAllShards(t, 4))
	require.NoError(t, err)
	require.Empty(t, claimed, "the transaction's claim was undone")
}

// brokenTx is a TxSweeper over a brokenStore whose failed fn's claims are
// undone, as memTxStore's are.
type brokenTx struct{ *brokenStore }

func (s brokenTx) InSweepTx(ctx context.Context, fn func(tx backpressure.OutboxStore[routedRow]) error) error {
	saved := make([]memRow, len(s.rows))
	for i, r := range s.rows {
		saved[i] = *r
	}
	err := fn(s.brokenStore)
	if err != nil {
		for i := range saved {
			*s.rows[i] = saved[i]
		}
	}
	return err
}

// A window claim's answer that breaks its rules is a *StoreError for
// ClaimOutboxWindow wrapping a *SnapshotError.
func TestSweepWindowClaimContract(t *testing.T) {
	cases := map[string]func(skip []string) ([]backpressure.RouteCount, int){
		"fewer rows than grants": func([]string) ([]backpressure.RouteCount, int) {
			return []backpressure.RouteCount{{Route: route("n00"), Count: 1}, {Route: route("n01"), Count: 1}}, 1
		},
		"out of order": func([]string) ([]backpressure.RouteCount, int) {
			return []backpressure.RouteCount{{Route: route("n01"), Count: 1}, {Route: route("n00"), Count: 1}}, 2
		},
		"a count of 3": func([]string) ([]backpressure.RouteCount, int) {
			return []backpressure.RouteCount{{Route: route("n00"), Count: 3}}, 1
		},
		"a skipped namespace": func(skip []string) ([]backpressure.RouteCount, int) {
			return []backpressure.RouteCount{{Route: route(skip[0]), Count: 1}}, 1
		},
	}
	for name, window := range cases {
		t.Run(name, func(t *testing.T) {
			mem := newMemStore(4)
			for i := range 12 {
				mem.enqueue(fmt.Sprintf("n%02d", i), "q", 2)
			}
			// n00 reaches its ceiling of 1 in the first sweep: the window
			// claim skips it.
			cfg := backpressure.Config{BatchSize: 2, DefaultQuota: backpressure.Unlimited, Quotas: map[string]int{"n00": 1}}
			b := newTestBP(t, cfg, 4)
			bs := &brokenStore{memStore: mem}
			// The first sweep counts (it knows no namespaces yet), the
			// second claims the window.
			_, _, err := backpressure.Sweep(context.Background(), b, bs)
			require.NoError(t, err)
			_, _, err = backpressure.Sweep(context.Background(), b, brokenWindow{brokenStore: bs, window: window})
			requireContract(t, err, "ClaimOutboxWindow")
		})
	}
}

// release ends every lease of s, as if each expired.
func release(s *memStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		r.LeaseUntil = time.Time{}
	}
}

func route(ns string) backpressure.Route { return backpressure.Route{Namespace: ns, TaskQueue: "q"} }

func mustAllShards(t *testing.T, n int) backpressure.OwnedShardFraction {
	t.Helper()
	f, err := backpressure.AllShards(n)
	require.NoError(t, err)
	return f
}

// A store that fails is not a contract violation, and a malformed Snapshot
// passed to Plan is not a store's.
func TestContractKindDistinct(t *testing.T) {
	mem := newMemStore(4)
	mem.enqueue("a", "q", 1)
	mem.fail = errors.New("down")
	b := newTestBP(t, backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}, 4)
	_, _, err := backpressure.Sweep(context.Background(), b, mem)
	require.ErrorIs(t, err, backpressure.ErrStore)
	require.NotErrorIs(t, err, backpressure.ErrInvalidSnapshot)
	_, err = b.Plan(backpressure.Snapshot{Claimed: map[string]int{"a": -1}, Budget: 1})
	require.ErrorIs(t, err, backpressure.ErrInvalidSnapshot)
	require.NotErrorIs(t, err, backpressure.ErrStore)
}
