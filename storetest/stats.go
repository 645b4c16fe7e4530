package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testStats checks Stats: every state counted, judged on the store's
// clock, and Total the sum of the six.
func testStats[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("EveryState", func(t *testing.T) {
		o := setupStore(t, newHarness)
		check := func(step string, want outbox.Stats) {
			t.Helper()
			want.Total = want.Pending + want.Scheduled + want.Claimed + want.Expired + want.Settled + want.Dead
			if got := o.stats(); got != want {
				t.Errorf("%s: Stats = %+v, want %+v", step, got, want)
			}
		}
		check("empty", outbox.Stats{})
		half := (o.h.Lease / 2).Truncate(time.Millisecond)
		later := msg("a", "s", "scheduled")
		later.RunAt = o.h.Now().Add(o.h.Lease + half)
		o.enqueue(msgs("a", "q", "k", 7)...)
		o.enqueue(later)
		check("enqueued", outbox.Stats{Pending: 7, Scheduled: 1})
		rows := o.claimN("claim", 5, scope("a", "q", 5)) // k-0 … k-4
		o.complete("settle, dead-letter, retry",
			outbox.SettleRow(rows[0]), outbox.DeadLetterRow(rows[1], errors.New("x")), outbox.RetryRow(rows[2], half, nil))
		check("claimed and completed", outbox.Stats{Pending: 2, Scheduled: 2, Claimed: 2, Settled: 1, Dead: 1})
		o.h.Advance(half)
		o.claimN("claim one more (the retried row, oldest)", 1, scope("a", "q", 1))
		check("the retry delay passed", outbox.Stats{Pending: 2, Scheduled: 1, Claimed: 3, Settled: 1, Dead: 1})
		o.h.Advance(o.h.Lease - half + time.Millisecond)
		check("the first leases expired", outbox.Stats{Pending: 2, Scheduled: 1, Claimed: 1, Expired: 2, Settled: 1, Dead: 1})
		o.h.Advance(o.h.Lease)
		check("every lease and schedule passed", outbox.Stats{Pending: 3, Expired: 3, Settled: 1, Dead: 1})
	})
}
