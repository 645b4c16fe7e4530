package storetest

import (
	"bytes"
	"errors"
	"github.com/outboxkit/backpressure/outbox"
	"testing"
	"time"
)

// testRetry checks that a retry puts a claimed row back to pending,
// invisible until its delay has passed, and needs the current token.
func testRetry[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("DelayHidesRow", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		row := e.need("claim", e.claim(e.all, scope("a", "q", 1)), 1)[0]
		claimed := e.inspect("k")
		const delay = 10 * time.Second
		e.retry(row, delay)
		s := e.inspect("k")
		if s.State != outbox.StatePending || !s.RunAt.Equal(e.h.Now().Add(delay)) {
			t.Errorf("retried row: State %q RunAt %v, want %q and now+%v = %v", s.State, s.RunAt, outbox.StatePending, delay, e.h.Now().Add(delay))
		}
		if s.DispatchKey != claimed.DispatchKey || s.Namespace != claimed.Namespace || s.TaskQueue != claimed.TaskQueue ||
			s.Shard != claimed.Shard || !bytes.Equal(s.Payload, claimed.Payload) || !s.EnqueuedAt.Equal(claimed.EnqueuedAt) || s.Attempts != claimed.Attempts {
			t.Errorf("retry changed the row's identity or attempts: %+v → %+v", claimed, s)
		}
		if c := e.countClaimed(e.all); len(c) != 0 {
			t.Errorf("CountClaimedOutboxRows after the retry = %v, want none", c)
		}
		for _, step := range []time.Duration{0, delay - time.Millisecond} {
			e.h.Advance(step) // to 0, then to 1ms short of the delay
			if got := e.countPending(e.all, 10); len(got) != 0 {
				t.Errorf("%v after the retry: CountPendingOutboxRows = %v, want none", step, got)
			}
			if got := e.claim(e.all, scope("a", "q", 1)); len(got) != 0 {
				t.Fatalf("%v after the retry: claim returned %v, want nothing", step, e.keys(got))
			}
		}
		e.h.Advance(2 * time.Millisecond)
		again := e.claim(e.all, scope("a", "q", 1))
		if len(again) != 1 {
			t.Fatalf("claim after the delay returned %d rows, want 1", len(again))
		}
		if s := e.inspect("k"); s.Attempts != 2 || s.State != outbox.StateClaimed {
			t.Errorf("re-claimed row: State %q Attempts %d, want %q 2", s.State, s.Attempts, outbox.StateClaimed)
		}
	})

	t.Run("ZeroDelay", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		e.retry(e.need("claim", e.claim(e.all, scope("a", "q", 1)), 1)[0], 0)
		if got := e.countPending(e.all, 10)[route("a", "q")]; got != 1 {
			t.Errorf("pending right after a retry without delay = %d, want 1", got)
		}
		if got := e.claim(e.all, scope("a", "q", 1)); len(got) != 1 {
			t.Errorf("claim right after a retry without delay returned %d rows, want 1", len(got))
		}
	})

	t.Run("RetryNeedsCurrentToken", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("a", "q", "k"))
		row := e.need("claim", e.claim(e.all, scope("a", "q", 1)), 1)[0]
		e.retry(row, 0)
		before := e.snapshot([]string{"k"})
		if err := e.h.Retry(e.ctx, row, 0); !errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("second Retry with the same token = %v, want %v", err, e.h.ErrLeaseLost)
		}
		if err := e.h.Settle(e.ctx, row); !errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("Settle after Retry with the same token = %v, want %v", err, e.h.ErrLeaseLost)
		}
		e.unchanged("retry and settle with a spent token", before, nil)
	})
}
