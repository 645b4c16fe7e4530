package storetest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
)

// testClaim checks ClaimOutboxRowsScoped: at most Limit per scope, oldest
// first within a route, only named routes, only claimable rows, a fresh
// lease and token, every unreturned row unchanged, and all or nothing.
func testClaim[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("LimitPerScope", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "x", "ax", 5)...)
		e.enqueue(msgs("a", "y", "ay", 3)...)
		e.enqueue(msgs("b", "x", "bx", 4)...)
		rows := e.claim(e.all, scope("a", "x", 2), scope("a", "y", 10), scope("b", "x", 1))
		per := map[backpressure.Route]int{}
		for k := range e.keySet("claim", rows) {
			s := e.inspect(k)
			per[route(s.Namespace, s.TaskQueue)]++
		}
		want := map[backpressure.Route]int{route("a", "x"): 2, route("a", "y"): 3, route("b", "x"): 1}
		if !equalCounts(per, want) {
			t.Errorf("claim(a/x ≤ 2, a/y ≤ 10, b/x ≤ 1) took %v, want %v", per, want)
		}
	})

	t.Run("OldestFirstWithinRoute", func(t *testing.T) {
		e := setup(t, newHarness)
		var order []string
		for i := 0; i < 4; i++ { // several batches, several rows per batch
			ms := msgs("a", "q", "batch"+strconv.Itoa(i), 3)
			e.enqueue(ms...)
			order = append(order, messageKeys(ms)...)
			e.h.Advance(time.Millisecond)
		}
		e.enqueue(msgs("a", "other", "o", 3)...) // newer rows on another route
		for step, n := range []int{1, 2, 4, 5} {
			got := e.keys(e.claim(e.all, scope("a", "q", n)))
			want := slices.Clone(order[:n])
			order = order[n:]
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("step %d: claim(a/q ≤ %d) = %v, want the oldest %v", step, n, got, want)
			}
		}
	})

	t.Run("FreshLeaseAndToken", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "q", "k", 4)...)
		e.h.Advance(time.Second)
		first := e.claim(e.all, scope("a", "q", 2))
		e.h.Advance(time.Second)
		second := e.claim(e.all, scope("a", "q", 2))
		tokens := []map[int64]bool{{}, {}}
		for i, rows := range [][]R{first, second} {
			if len(rows) != 2 {
				t.Fatalf("claim %d returned %d rows, want 2", i, len(rows))
			}
			claimedAt := e.h.Now().Add(time.Duration(i-1) * time.Second)
			for _, r := range rows {
				k := e.h.Key(r)
				s := e.inspect(k)
				if s.State != StateClaimed || s.Attempts != 1 || !s.ClaimedAt.Equal(claimedAt) || !s.LeaseExpiresAt.Equal(claimedAt.Add(e.h.Lease)) {
					t.Errorf("claim %d: row %q is %+v, want State %q, Attempts 1, ClaimedAt %v, LeaseExpiresAt %v", i, k, s, StateClaimed, claimedAt, claimedAt.Add(e.h.Lease))
				}
				tokens[i][s.Token] = true
			}
		}
		for tok := range tokens[0] {
			if tokens[1][tok] {
				t.Errorf("two claims share token %d; a token must be unique per claim", tok)
			}
		}
	})

	t.Run("OnlyClaimableRows", func(t *testing.T) {
		e := setup(t, newHarness)
		ms := msgs("a", "q", "k", 6)
		e.enqueue(ms...)
		rows := e.claim(e.all, scope("a", "q", 3))
		e.settle(rows[0])           // settled: never again
		e.retry(rows[1], time.Hour) // invisible for an hour
		// rows[2] holds a live lease.
		if got := e.keys(e.claim(e.all, scope("a", "q", 100))); len(got) != 3 {
			t.Errorf("second claim = %v, want the 3 never-claimed rows", got)
		}
		if got := e.claim(e.all, scope("a", "q", 100)); len(got) != 0 {
			t.Errorf("third claim = %v, want nothing: settled, invisible and leased rows only", e.keys(got))
		}
	})

	t.Run("UnreturnedRowsUnchanged", func(t *testing.T) {
		e := setup(t, newHarness)
		var all []string
		for _, r := range []backpressure.Route{route("a", "x"), route("a", "y"), route("b", "x"), route("c", "z")} {
			ms := msgs(r.Namespace, r.TaskQueue, r.String(), 6)
			e.enqueue(ms...)
			all = append(all, messageKeys(ms)...)
		}
		// Give rows every state: settled, retried (invisible and visible),
		// live lease, expired lease, never claimed.
		rows := e.claim(e.all, scope("a", "x", 4), scope("b", "x", 2))
		e.settle(rows[0])
		e.retry(rows[1], time.Hour)
		e.retry(rows[4], 0)
		e.h.Advance(e.h.Lease + time.Millisecond)
		e.claim(e.all, scope("a", "y", 1))
		before := e.snapshot(all)
		got := e.claim(e.all, scope("a", "x", 2), scope("a", "y", 1), scope("b", "x", 1), scope("nobody", "x", 5))
		e.unchanged("partial claim", before, e.keySet("partial claim", got))
		if len(got) != 4 {
			t.Errorf("partial claim returned %d rows, want 4", len(got))
		}
	})

	t.Run("SettledNeverClaimed", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		e.settle(e.claim(e.all, scope("a", "q", 1))[0])
		for i := 0; i < 3; i++ {
			e.h.Advance(e.h.Lease)
			if got := e.claim(e.all, scope("a", "q", 10)); len(got) != 0 {
				t.Fatalf("step %d: claim returned settled row(s) %v", i, e.keys(got))
			}
		}
		if s := e.inspect("k"); s.State != StateSettled {
			t.Errorf("settled row: State %q, want %q", s.State, StateSettled)
		}
	})

	t.Run("NoClaims", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "q", "k", 3)...)
		if got := e.claim(e.all); len(got) != 0 {
			t.Errorf("claim with no scopes returned %v", e.keys(got))
		}
	})

	t.Run("AtomicOnCancel", func(t *testing.T) {
		e := setup(t, newHarness)
		ms := msgs("a", "q", "k", 10)
		e.enqueue(ms...)
		e.enqueue(msgs("b", "q", "b", 10)...)
		before := e.snapshot(messageKeys(ms))
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		rows, err := e.h.Store.ClaimOutboxRowsScoped(ctx, e.all, []backpressure.ScopedClaim{scope("a", "q", 5), scope("b", "q", 5)})
		if err == nil || len(rows) != 0 {
			t.Errorf("claim with a cancelled context = %d rows, %v; want an error and no rows", len(rows), err)
		}
		e.unchanged("claim with a cancelled context", before, nil)
		if c := e.countClaimed(e.all); len(c) != 0 {
			t.Errorf("after a cancelled claim: CountClaimedOutboxRows = %v, want none", c)
		}
		for name, call := range map[string]func() error{
			"CountClaimedOutboxRows": func() error { _, err := e.h.Store.CountClaimedOutboxRows(ctx, e.all); return err },
			"CountPendingOutboxRows": func() error { _, err := e.h.Store.CountPendingOutboxRows(ctx, e.all, 10); return err },
		} {
			if err := call(); err == nil {
				t.Errorf("%s with a cancelled context returned no error", name)
			}
		}
	})

	t.Run("AtomicOnFault", func(t *testing.T) {
		e := setup(t, newHarness)
		if e.h.FailNth == nil {
			t.Skip("Harness.FailNth is nil")
		}
		var all []string
		var claims []backpressure.ScopedClaim
		for i := 0; i < 5; i++ {
			ms := msgs("ns"+strconv.Itoa(i), "q", "r"+strconv.Itoa(i), 4)
			e.enqueue(ms...)
			all = append(all, messageKeys(ms)...)
			claims = append(claims, scope("ns"+strconv.Itoa(i), "q", 2))
		}
		before := e.snapshot(all)
		// Fail the claim at its first statement, then its second, and so
		// on until it succeeds: each failure must leave nothing claimed.
		for n := 1; ; n++ {
			if n > 1000 {
				t.Fatal("claim still failing after 1000 armed faults; FailNth does not disarm")
			}
			e.h.FailNth(n)
			rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, e.all, claims)
			e.h.FailNth(0)
			if err == nil {
				if n == 1 {
					t.Errorf("claim succeeded with its first statement armed to fail; FailNth had no effect")
				}
				if len(rows) != 10 {
					t.Errorf("claim after %d faults returned %d rows, want 10", n-1, len(rows))
				}
				break
			}
			if len(rows) != 0 {
				t.Errorf("claim failing at statement %d returned %d rows with error %v", n, len(rows), err)
			}
			e.unchanged("claim failing at statement "+strconv.Itoa(n), before, nil)
		}
	})
}
