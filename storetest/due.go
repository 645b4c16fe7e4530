package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testNextDue checks the optional [outbox.DueProber]: NextDue says how long
// until the earliest scheduled or delayed row of the owned shards becomes
// claimable (a RunAt, a retry delay), not counting rows claimable now, rows
// of shards not owned, or settled rows; none is ok false; once the clock
// passes it, the row no longer counts; it is one round trip and honours
// ctx. The checks hold no claimed row when they read NextDue (a store may
// count a lease's expiry: early, never late).
func testNextDue[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	setupDue := func(t *testing.T) (*ox, outbox.DueProber) {
		o := setupStore(t, newHarness)
		p, ok := o.s.(outbox.DueProber)
		if !ok {
			t.Skipf("the store (%T) does not implement the optional outbox.DueProber", o.s)
		}
		return o, p
	}
	nextDue := func(o *ox, p outbox.DueProber, step string, want time.Duration, wantOK bool) {
		o.t.Helper()
		var (
			got time.Duration
			ok  bool
			err error
		)
		call := func() { got, ok, err = p.NextDue(o.ctx, o.all) }
		if o.h.RoundTrips != nil {
			o.oneRoundTrip("NextDue", call)
		} else {
			call()
		}
		if err != nil || ok != wantOK || got != want {
			o.t.Fatalf("%s: NextDue = %v, %v, %v; want %v, %v, nil", step, got, ok, err, want, wantOK)
		}
	}

	t.Run("ScheduledAndRetried", func(t *testing.T) {
		o, p := setupDue(t)
		nextDue(o, p, "empty store", 0, false)
		o.enqueue(msg("a", "q", "now"), msg("b", "q", "now-too"))
		nextDue(o, p, "rows claimable now only", 0, false)
		later, sooner := msg("a", "q", "later"), msg("b", "r", "sooner")
		later.RunAt, sooner.RunAt = o.h.Now().Add(10*time.Second), o.h.Now().Add(4*time.Second)
		o.enqueue(later, sooner)
		nextDue(o, p, "RunAt 10s and 4s ahead", 4*time.Second, true)
		rows := o.claimN("claim the rows due now", 2, scope("a", "q", 10), scope("b", "q", 10))
		o.retry(rows[0], 2*time.Second)
		o.settle(rows[1])
		nextDue(o, p, "a retry 2s ahead", 2*time.Second, true)
		o.h.Advance(2 * time.Second)
		nextDue(o, p, "the retry due now", 2*time.Second, true)
		o.h.Advance(2 * time.Second)
		nextDue(o, p, "the 4s row due now", 6*time.Second, true)
		o.h.Advance(6 * time.Second)
		nextDue(o, p, "every row due", 0, false)
	})

	t.Run("OwnedShardsOnly", func(t *testing.T) {
		o, p := setupDue(t)
		m := msg("a", "q", "scheduled")
		m.RunAt = o.h.Now().Add(time.Minute)
		o.enqueue(m)
		shard := o.inspect("scheduled").Shard
		others := o.fraction(func(s int) bool { return s != shard })
		if got, ok, err := p.NextDue(o.ctx, others); err != nil || ok {
			t.Errorf("NextDue on the shards without the row = %v, %v, %v; want 0, false, nil", got, ok, err)
		}
		nextDue(o, p, "on every shard", time.Minute, true)
	})

	t.Run("Context", func(t *testing.T) {
		o, p := setupDue(t)
		ctx, cancel := context.WithCancel(o.ctx)
		cancel()
		if _, _, err := p.NextDue(ctx, o.all); !errors.Is(err, context.Canceled) {
			t.Errorf("NextDue with a cancelled ctx: %v, want context.Canceled", err)
		}
	})
}
