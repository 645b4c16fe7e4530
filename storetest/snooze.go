package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testSnooze checks the Snooze outcome: the row is pending again,
// invisible for the delay, with the claim's attempt given back (so a row
// at its MaxAttempts is never dead-lettered by a snooze), one more
// Snoozes, its place in its route kept, and its reason recorded only when
// it has one; fenced by its lease like every completion.
func testSnooze[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("GivesTheAttemptBack", func(t *testing.T) {
		o := setupStore(t, newHarness)
		m := msg("a", "q", "k")
		m.MaxAttempts = 1
		o.enqueue(m)
		const delay = 5 * time.Second
		for n := 1; n <= 3; n++ {
			row := o.claimN("claim", 1, scope("a", "q", 1))[0]
			if row.Attempts != 1 || row.Snoozes != n-1 {
				t.Fatalf("claim %d: Attempts %d Snoozes %d, want 1 and %d", n, row.Attempts, row.Snoozes, n-1)
			}
			o.applied("snooze", o.complete("snooze", outbox.SnoozeRow(row, delay, errors.New("downstream busy")))[0], outbox.StatePending)
			r := o.get("k")
			if r.State != outbox.StatePending || r.Attempts != 0 || r.Snoozes != n || r.LastError != "downstream busy" ||
				!r.RunAt.Equal(o.h.Now().Add(delay)) || !r.FinishedAt.IsZero() {
				t.Fatalf("after snooze %d: State %q Attempts %d Snoozes %d LastError %q RunAt %v FinishedAt %v; want pending, 0, %d, the reason, now+%v, none",
					n, r.State, r.Attempts, r.Snoozes, r.LastError, r.RunAt, r.FinishedAt, n, delay)
			}
			if got := o.claim(o.all, scope("a", "q", 1)); len(got) != 0 {
				t.Fatalf("a snoozed row was claimed before its delay passed")
			}
			o.h.Advance(delay)
		}
		// Its one attempt is still there: a retry now dead-letters it.
		row := o.claimN("claim after three snoozes", 1, scope("a", "q", 1))[0]
		o.applied("retry", o.complete("retry", outbox.RetryRow(row, 0, errors.New("failed")))[0], outbox.StateDead)
		if r := o.get("k"); r.Attempts != 1 || r.Snoozes != 3 {
			t.Errorf("dead row: Attempts %d Snoozes %d, want 1 and 3", r.Attempts, r.Snoozes)
		}
	})

	t.Run("KeepsItsPlaceAndLastError", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 3)...)
		rows := o.claimN("claim", 1, scope("a", "q", 1)) // the oldest
		first := rows[0]
		o.complete("retry", outbox.RetryRow(first, 0, errors.New("earlier failure")))
		first = o.claimN("claim again", 1, scope("a", "q", 1))[0]
		o.applied("snooze", o.complete("snooze", outbox.SnoozeRow(first, 0, nil))[0], outbox.StatePending)
		if r := o.get(first.DispatchKey); r.LastError != "earlier failure" {
			t.Errorf("a snooze without a reason changed LastError to %q, want the earlier %q", r.LastError, "earlier failure")
		}
		if got := o.keys(o.claim(o.all, scope("a", "q", 1))); len(got) != 1 || got[0] != first.DispatchKey {
			t.Errorf("claim after the snooze = %v, want the snoozed oldest row %q first", got, first.DispatchKey)
		}
	})

	t.Run("NeedsTheLiveLease", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		row := o.claimN("claim", 1, scope("a", "q", 1))[0]
		o.h.Advance(o.h.Lease + time.Millisecond) // the lease lapses
		before := o.get("k")
		o.lost("snooze on an expired lease", o.complete("snooze", outbox.SnoozeRow(row, 0, nil))[0], row.Lease())
		if after := o.get("k"); after.Attempts != before.Attempts || after.Snoozes != 0 || after.State != before.State {
			t.Errorf("a lost snooze changed the row: %+v → %+v", before, after)
		}
	})

	t.Run("DelayBounds", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		row := o.claimN("claim", 1, scope("a", "q", 1))[0]
		for _, d := range []time.Duration{-time.Nanosecond, outbox.MaxDelay + time.Microsecond} {
			_, err := o.s.Complete(o.ctx, []outbox.Completion{outbox.SnoozeRow(row, d, nil)})
			o.invalidArgument("snooze with delay "+d.String(), err)
		}
		if r := o.get("k"); r.State != outbox.StateClaimed || r.Snoozes != 0 {
			t.Errorf("refused snoozes changed the row: State %q Snoozes %d", r.State, r.Snoozes)
		}
	})
}
