package storetest

import (
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testScheduled checks Message.RunAt: a row scheduled in the future is
// invisible to counts and claims (and counted Scheduled) until the clock
// reaches it; one scheduled in the past is claimable at once.
func testScheduled[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("FutureRunAt", func(t *testing.T) {
		o := setupStore(t, newHarness)
		const wait = 10 * time.Second
		runAt := o.h.Now().Add(wait)
		m := msg("a", "q", "later")
		m.RunAt = runAt
		o.enqueue(m)
		if g := o.get("later"); g.State != outbox.StatePending || !g.RunAt.Equal(runAt) {
			t.Fatalf("scheduled row: State %q RunAt %v, want pending, %v", g.State, g.RunAt, runAt)
		}
		for _, step := range []time.Duration{0, wait - time.Millisecond} {
			o.h.Advance(step) // to 0, then to 1ms before RunAt
			if got := o.countPending(o.all, 10); len(got) != 0 {
				t.Errorf("%v before RunAt: CountPendingOutboxRows = %v, want none", runAt.Sub(o.h.Now()), got)
			}
			if got := o.claim(o.all, scope("a", "q", 10)); len(got) != 0 {
				t.Fatalf("%v before RunAt: claim returned %v, want nothing", runAt.Sub(o.h.Now()), o.keys(got))
			}
			if st := o.stats(); st.Scheduled != 1 || st.Pending != 0 {
				t.Errorf("%v before RunAt: Stats = %+v, want Scheduled 1, Pending 0", runAt.Sub(o.h.Now()), st)
			}
		}
		o.h.Advance(2 * time.Millisecond)
		if st := o.stats(); st.Scheduled != 0 || st.Pending != 1 {
			t.Errorf("after RunAt: Stats = %+v, want Scheduled 0, Pending 1", st)
		}
		if got := o.countPending(o.all, 10)[route("a", "q")]; got != 1 {
			t.Errorf("after RunAt: pending a/q = %d, want 1", got)
		}
		if got := o.keys(o.claim(o.all, scope("a", "q", 10))); len(got) != 1 || got[0] != "later" {
			t.Errorf("after RunAt: claim = %v, want [later]", got)
		}
	})

	t.Run("PastRunAt", func(t *testing.T) {
		o := setupStore(t, newHarness)
		m := msg("a", "q", "overdue")
		m.RunAt = o.h.Now().Add(-time.Hour)
		o.enqueue(m, msg("a", "q", "now"))
		if got := o.countPending(o.all, 10)[route("a", "q")]; got != 2 {
			t.Errorf("pending with a RunAt in the past = %d, want 2", got)
		}
		if got := o.keys(o.claim(o.all, scope("a", "q", 10))); len(got) != 2 {
			t.Errorf("claim with a RunAt in the past = %v, want both rows", got)
		}
	})

	t.Run("ScheduledAmongOthers", func(t *testing.T) {
		// A scheduled row holds back neither the rows behind it nor
		// another route.
		o := setupStore(t, newHarness)
		later := msg("a", "q", "later")
		later.RunAt = o.h.Now().Add(time.Hour)
		o.enqueue(later, msg("a", "q", "k"), msg("b", "q", "b"))
		if got := o.keys(o.claim(o.all, scope("a", "q", 10), scope("b", "q", 10))); len(got) != 2 || got[0] != "b" || got[1] != "k" {
			t.Errorf("claim with an older scheduled row = %v, want [b k]", got)
		}
	})
}
