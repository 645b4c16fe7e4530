package storetest

import (
	"errors"
	"github.com/outboxkit/backpressure/outbox"
	"testing"
	"time"
)

// testLease checks that a lease expires and makes its row claimable again,
// and that only the current live claim's token settles or retries a row.
func testLease[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("ExpiryMakesClaimable", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		first := e.claim(e.all, scope("a", "q", 1))
		if len(first) != 1 {
			t.Fatalf("first claim returned %d rows, want 1", len(first))
		}
		old := e.inspect("k")
		e.h.Advance(e.h.Lease - time.Millisecond)
		if got := e.claim(e.all, scope("a", "q", 1)); len(got) != 0 {
			t.Fatalf("claim 1ms before the lease ends returned %v, want nothing", e.keys(got))
		}
		e.h.Advance(2 * time.Millisecond)
		again := e.claim(e.all, scope("a", "q", 1))
		if len(again) != 1 || e.h.Key(again[0]) != "k" {
			t.Fatalf("claim 1ms after the lease ended returned %v, want [k]", e.keys(again))
		}
		s := e.inspect("k")
		if s.State != outbox.StateClaimed || s.Attempts != 2 || s.Token == old.Token || !s.LeaseExpiresAt.Equal(e.h.Now().Add(e.h.Lease)) {
			t.Errorf("re-claimed row = %+v, want State %q, Attempts 2, a token other than %d, LeaseExpiresAt %v", s, outbox.StateClaimed, old.Token, e.h.Now().Add(e.h.Lease))
		}
	})

	t.Run("CrashedClaimerRowsReturn", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "q", "k", 5)...)
		crashed := e.keys(e.claim(e.all, scope("a", "q", 5)))
		e.h.Advance(e.h.Lease + time.Millisecond)
		if got := e.countPending(e.all, 100)[route("a", "q")]; got != 5 {
			t.Errorf("pending after the claimer's leases expired = %d, want 5", got)
		}
		got := e.keys(e.claim(e.all, scope("a", "q", 5)))
		if len(got) != len(crashed) {
			t.Fatalf("claim after the leases expired = %v, want %v", got, crashed)
		}
		for _, k := range got {
			if s := e.inspect(k); s.Attempts != 2 {
				t.Errorf("row %q: Attempts %d after two claims, want 2", k, s.Attempts)
			}
		}
	})

	t.Run("StaleTokenRejected", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		stale := e.need("first claim", e.claim(e.all, scope("a", "q", 1)), 1)[0]
		e.h.Advance(e.h.Lease + time.Millisecond)
		current := e.claim(e.all, scope("a", "q", 1))
		if len(current) != 1 {
			t.Fatalf("re-claim after expiry returned %d rows, want 1", len(current))
		}
		before := e.snapshot([]string{"k"})
		if err := e.h.Settle(e.ctx, stale); !errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("Settle with the expired claim's token = %v, want %v", err, e.h.ErrLeaseLost)
		}
		if err := e.h.Retry(e.ctx, stale, 0); !errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("Retry with the expired claim's token = %v, want %v", err, e.h.ErrLeaseLost)
		}
		e.unchanged("settle and retry with a stale token", before, nil)
		e.settle(current[0])
		if s := e.inspect("k"); s.State != outbox.StateSettled {
			t.Errorf("after Settle with the current token: State %q, want %q", s.State, outbox.StateSettled)
		}
		before = e.snapshot([]string{"k"})
		if err := e.h.Settle(e.ctx, current[0]); !errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("second Settle of a settled row = %v, want %v", err, e.h.ErrLeaseLost)
		}
		if err := e.h.Retry(e.ctx, current[0], 0); !errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("Retry of a settled row = %v, want %v", err, e.h.ErrLeaseLost)
		}
		e.unchanged("settle and retry of a settled row", before, nil)
	})

	t.Run("SettleKeepsRow", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		row := e.need("claim", e.claim(e.all, scope("a", "q", 1)), 1)[0]
		claimed := e.inspect("k")
		e.h.Advance(time.Second)
		e.settle(row)
		s := e.inspect("k")
		if s.State != outbox.StateSettled || s.Attempts != claimed.Attempts || s.Token != claimed.Token {
			t.Errorf("settled row = %+v, want State %q with the claim's Attempts %d and Token %d kept", s, outbox.StateSettled, claimed.Attempts, claimed.Token)
		}
		if c := e.countClaimed(e.all); len(c) != 0 {
			t.Errorf("CountClaimedOutboxRows after settling the only claim = %v, want none", c)
		}
	})
}
