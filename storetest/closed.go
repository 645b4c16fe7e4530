package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// namedCall is one store method with arguments that would change the
// outbox (or read it) if the call went through.
type namedCall struct {
	name string
	call func(ctx context.Context) error
}

// seedEveryState enqueues rows in every state (pending, claimed, settled,
// dead) and returns their keys and the live claim's leases.
func (o *ox) seedEveryState() ([]string, []outbox.Lease) {
	o.t.Helper()
	ms := msgs("a", "q", "k", 6)
	o.enqueue(ms...)
	rows := o.claimN("claim", 4, scope("a", "q", 4))
	o.complete("settle k-0, dead-letter k-1", outbox.SettleRow(rows[0]), outbox.DeadLetterRow(rows[1], errors.New("x")))
	return messageKeys(ms), []outbox.Lease{rows[2].Lease(), rows[3].Lease()}
}

// everyCall lists every method of the store, the optional extensions it
// implements included, with arguments that would change the outbox.
func (o *ox) everyCall(live []outbox.Lease) []namedCall {
	all, s, cl := o.all, o.s, o.h.Store
	claims := []backpressure.ScopedClaim{scope("a", "q", 10)}
	calls := []namedCall{
		{"Enqueue", func(ctx context.Context) error { _, err := s.Enqueue(ctx, msgs("a", "q", "new", 2)); return err }},
		{"CountClaimedOutboxRows", func(ctx context.Context) error { _, err := cl.CountClaimedOutboxRows(ctx, all); return err }},
		{"CountPendingOutboxRows", func(ctx context.Context) error { _, err := cl.CountPendingOutboxRows(ctx, all, 10); return err }},
		{"ClaimOutboxRowsScoped", func(ctx context.Context) error { _, err := cl.ClaimOutboxRowsScoped(ctx, all, claims); return err }},
		// A Claimer taken at the time of the call, not before: after
		// Close too it must be usable, and refuse.
		{"Claimer().ClaimOutboxRowsScoped", func(ctx context.Context) error {
			_, err := s.Claimer().ClaimOutboxRowsScoped(ctx, all, claims)
			return err
		}},
		{"Complete", func(ctx context.Context) error {
			_, err := s.Complete(ctx, []outbox.Completion{{Lease: live[0], Outcome: outbox.Settle}})
			return err
		}},
		{"ExtendLeases", func(ctx context.Context) error { _, err := s.ExtendLeases(ctx, live); return err }},
		{"Settle", func(ctx context.Context) error { return s.Settle(ctx, live[0]) }},
		{"Retry", func(ctx context.Context) error { return s.Retry(ctx, live[1], 0, errors.New("x")) }},
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, "k-0"); return err }},
		{"Stats", func(ctx context.Context) error { _, err := s.Stats(ctx); return err }},
		{"ListDead", func(ctx context.Context) error { _, err := s.ListDead(ctx, outbox.ListDeadParams{}); return err }},
		{"Requeue", func(ctx context.Context) error { _, err := s.Requeue(ctx, []string{"k-1"}); return err }},
		{"PurgeSettled", func(ctx context.Context) error {
			_, err := s.PurgeSettled(ctx, o.h.Now().Add(time.Hour), 10)
			return err
		}},
		{"PurgeDead", func(ctx context.Context) error { _, err := s.PurgeDead(ctx, o.h.Now().Add(time.Hour), 10); return err }},
	}
	if p, ok := s.(outbox.Pinger); ok {
		calls = append(calls, namedCall{"Ping", p.Ping})
	}
	if n, ok := s.(outbox.Notifier); ok {
		calls = append(calls, namedCall{"Subscribe", func(ctx context.Context) error { _, err := n.Subscribe(ctx); return err }})
	}
	if c, ok := cl.(backpressure.Counter); ok {
		for _, sh := range servedShapes(cancelled(o.ctx), c, all) {
			p := sh.params(10, "", 1)
			calls = append(calls, namedCall{"CountOutboxRows (" + sh.String() + ")", func(ctx context.Context) error {
				_, _, err := c.CountOutboxRows(ctx, all, p)
				return err
			}})
		}
	}
	if ts, ok := cl.(backpressure.TxSweeper[outbox.Row]); ok {
		calls = append(calls, namedCall{"InSweepTx", func(ctx context.Context) error {
			return ts.InSweepTx(ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
				_, err := tx.ClaimOutboxRowsScoped(ctx, all, claims)
				return err
			})
		}})
	}
	return calls
}

// testClosed checks Close: every later call returns an error matching
// [outbox.ErrClosed], and a subscription's channel is closed.
func testClosed[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("EveryMethod", func(t *testing.T) {
		o := setupStore(t, newHarness)
		_, live := o.seedEveryState()
		var sub <-chan struct{}
		if n, ok := o.s.(outbox.Notifier); ok {
			var err error
			if sub, err = n.Subscribe(o.ctx); err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
		}
		if err := o.s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, c := range o.everyCall(live) {
			if err := c.call(o.ctx); !errors.Is(err, outbox.ErrClosed) {
				t.Errorf("%s after Close = %v, want an error matching outbox.ErrClosed", c.name, err)
			}
		}
		// A closed store says so before judging its arguments.
		if _, err := o.s.Enqueue(o.ctx, []outbox.Message{{Namespace: "a"}}); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("Enqueue of an invalid batch after Close = %v, want an error matching outbox.ErrClosed", err)
		}
		if err := o.s.Close(); err != nil {
			t.Errorf("a second Close = %v, want nil: Close is idempotent", err)
		}
		if sub != nil {
			o.waitClosed("a subscription when the store closed", sub)
		}
	})
}

// waitClosed waits, with the test's context, for ch to be closed; a value
// still buffered in it is drained first.
func (o *ox) waitClosed(what string, ch <-chan struct{}) {
	o.t.Helper()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-o.ctx.Done():
			o.t.Fatalf("%s: the channel was never closed", what)
		}
	}
}
