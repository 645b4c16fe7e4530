package storetest

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// testNotifier checks the optional [outbox.Notifier]: a subscription
// receives a value after an Enqueue commits rows or a Requeue moves rows,
// holds at most one (coalesced), and is closed when its context is done.
// It waits only on the channel, with the test's context: no timing.
func testNotifier[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	subscribe := func(t *testing.T, ctx context.Context) (*ox, outbox.Notifier, <-chan struct{}) {
		t.Helper()
		o := setupStore(t, newHarness)
		n, ok := o.s.(outbox.Notifier)
		if !ok {
			t.Skipf("the store (%T) does not implement the optional outbox.Notifier", o.s)
		}
		ch, err := n.Subscribe(ctx)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		return o, n, ch
	}
	wait := func(o *ox, what string, ch <-chan struct{}) {
		o.t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				o.t.Fatalf("%s: the channel was closed, want a notification", what)
			}
		case <-o.ctx.Done():
			o.t.Fatalf("%s: no notification", what)
		}
	}

	t.Run("AfterEnqueue", func(t *testing.T) {
		o, _, ch := subscribe(t, t.Context())
		o.enqueue(msg("a", "q", "k"))
		wait(o, "after Enqueue", ch)
		o.enqueue(msgs("a", "q", "second", 3)...)
		wait(o, "after a second Enqueue", ch)
	})

	t.Run("AfterRequeue", func(t *testing.T) {
		o, _, ch := subscribe(t, t.Context())
		o.enqueue(msg("a", "q", "k"))
		wait(o, "after Enqueue", ch)
		rows := o.claimN("claim", 1, scope("a", "q", 1))
		o.complete("dead-letter", outbox.DeadLetterRow(rows[0], errors.New("x")))
		if n, err := o.s.Requeue(o.ctx, []string{"k"}); err != nil || n != 1 {
			t.Fatalf("Requeue = %d, %v; want 1", n, err)
		}
		wait(o, "after a Requeue that moved a row", ch)
	})

	t.Run("Coalesced", func(t *testing.T) {
		o, _, ch := subscribe(t, t.Context())
		for i := 0; i < 20; i++ {
			o.enqueue(msg("a", "q", "k-"+strconv.Itoa(i)))
			if n := len(ch); n > 1 {
				t.Fatalf("after %d enqueues the channel holds %d values, want at most 1", i+1, n)
			}
		}
		wait(o, "after 20 enqueues", ch)
	})

	t.Run("EverySubscriber", func(t *testing.T) {
		o, n, ch := subscribe(t, t.Context())
		other, err := n.Subscribe(o.ctx)
		if err != nil {
			t.Fatalf("second Subscribe: %v", err)
		}
		o.enqueue(msg("a", "q", "k"))
		wait(o, "first subscriber", ch)
		wait(o, "second subscriber", other)
	})

	t.Run("ClosedWhenContextDone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		o, n, ch := subscribe(t, ctx)
		keep, err := n.Subscribe(o.ctx)
		if err != nil {
			t.Fatalf("second Subscribe: %v", err)
		}
		cancel()
		o.waitClosed("a subscription whose context is done", ch)
		// The other subscription lives on.
		o.enqueue(msg("a", "q", "k"))
		wait(o, "the other subscription", keep)
		if _, err := n.Subscribe(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe with a cancelled context = %v, want context.Canceled", err)
		}
	})
}
