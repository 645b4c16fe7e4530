package pgstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestErrorMessages: every argument error, the constructors' included,
// is typed (errors.Is and errors.As) and reads "pgstore: Op: field: what
// is wrong", naming the call that received the bad input.
func TestErrorMessages(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("acme", "q", "k"))
	for _, c := range []struct {
		want string // the whole message, or its start when it ends in "…"
		call func() error
	}{
		{`pgstore: Open: Options.Schema: "Bad" is not a lower-case identifier…`, func() error {
			_, err := pgstore.Open(f.ctx, databaseURL(), pgstore.Options{Schema: "Bad"})
			return err
		}},
		{`pgstore: New: Options.Schema: "Bad" is not a lower-case identifier…`, func() error {
			_, err := pgstore.New(f.ctx, f.pool, pgstore.Options{Schema: "Bad"})
			return err
		}},
		{"pgstore: Open: Options.Lease: 1ns is below the floor of 100ms", func() error {
			_, err := pgstore.Open(f.ctx, databaseURL(), pgstore.Options{Lease: 1})
			return err
		}},
		{"pgstore: Enqueue: msgs[0].Namespace: is empty", func() error {
			_, err := f.s.Enqueue(f.ctx, []outbox.Message{message("", "q", "k2")})
			return err
		}},
		{"pgstore: Enqueue: msgs[1].TaskQueue: holds a NUL byte", func() error {
			_, err := f.s.Enqueue(f.ctx, []outbox.Message{message("acme", "q", "k2"), message("acme", "q\x00", "k3")})
			return err
		}},
		{"pgstore: ClaimOutboxRowsScoped: claims[0].Limit: 0 is below 1", func() error {
			_, err := f.s.Claimer().ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 0)})
			return err
		}},
		{"pgstore: ClaimOutboxRowsScoped: claims[0].Route.Namespace: is empty", func() error {
			_, err := f.s.Claimer().ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("", "q", 1)})
			return err
		}},
		{`pgstore: ClaimOutboxRowsScoped: claims[1].Route: "acme/q" is also claims[0]`, func() error {
			_, err := f.s.Claimer().ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1), claim("acme", "q", 1)})
			return err
		}},
		{"pgstore: CountPendingOutboxRows: capPerRoute: 0 is below 1", func() error {
			_, err := f.s.Claimer().CountPendingOutboxRows(f.ctx, f.all, 0)
			return err
		}},
		{"pgstore: CountOutboxRows: p.After: is not valid UTF-8", func() error {
			_, _, err := claimerOf(f.s).CountOutboxRows(f.ctx, f.all, backpressure.CountParams{CapPerRoute: 1, Namespaces: 1, After: "\xff"})
			return err
		}},
		{"pgstore: Get: dispatchKey: is empty", func() error { _, err := f.s.Get(f.ctx, ""); return err }},
		{"pgstore: Requeue: dispatchKeys[1]: holds a NUL byte", func() error {
			_, err := f.s.Requeue(f.ctx, []string{"k", "a\x00"})
			return err
		}},
		{`pgstore: Complete: completions[1].DispatchKey: "k" is also completions[0]`, func() error {
			l := outbox.Lease{DispatchKey: "k", Token: 1}
			_, err := f.s.Complete(f.ctx, []outbox.Completion{{Lease: l, Outcome: outbox.Settle}, {Lease: l, Outcome: outbox.Settle}})
			return err
		}},
		{"pgstore: ListDead: p.Limit: -1 is not within 1 to 10000", func() error {
			_, err := f.s.ListDead(f.ctx, outbox.ListDeadParams{Limit: -1})
			return err
		}},
		{"pgstore: PurgeDead: limit: -1 is negative", func() error { _, err := f.s.PurgeDead(f.ctx, f.now, -1); return err }},
	} {
		err := c.call()
		var (
			ae *outbox.ArgumentError
			me *outbox.MessageError
		)
		if !errors.Is(err, outbox.ErrInvalidArgument) || !(errors.As(err, &ae) || errors.As(err, &me)) {
			t.Errorf("%s: error %v (%T), want an *outbox.ArgumentError or *outbox.MessageError", c.want, err, err)
			continue
		}
		if prefix, ok := strings.CutSuffix(c.want, "…"); ok {
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("message %q, want it to start %q", err, prefix)
			}
		} else if err.Error() != c.want {
			t.Errorf("message %q, want %q", err, c.want)
		}
	}
}
