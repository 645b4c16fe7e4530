package sqlitestore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// TestErrorMessages: every argument error, the constructors' included,
// is typed (errors.Is and errors.As) and reads "sqlitestore: Op: field:
// what is wrong", naming the call that received the bad input.
func TestErrorMessages(t *testing.T) {
	ctx := t.Context()
	s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
	enqueueT(t, s, msg("k"))
	all := allShards(t, s)
	db := s.writer
	for _, c := range []struct {
		want string // the whole message, or its start when it ends in "…"
		call func() error
	}{
		{`sqlitestore: Open: path: is empty…`, func() error { _, err := Open(ctx, "", Options{}); return err }},
		{"sqlitestore: Open: Options.Lease: 1ns is below the floor…", func() error {
			_, err := Open(ctx, ":memory:", Options{Lease: 1})
			return err
		}},
		{"sqlitestore: New: Options.Lease: 1ns is below the floor…", func() error {
			_, err := New(ctx, db, Options{Lease: 1})
			return err
		}},
		{"sqlitestore: Enqueue: msgs[0].Namespace: is empty", func() error {
			_, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k2", TaskQueue: "q"}})
			return err
		}},
		{"sqlitestore: Enqueue: msgs[1].TaskQueue: holds a NUL byte", func() error {
			_, err := s.Enqueue(ctx, []outbox.Message{msg("k2"), {DispatchKey: "k3", Namespace: "n", TaskQueue: "q\x00"}})
			return err
		}},
		{"sqlitestore: ClaimOutboxRowsScoped: claims[0].Limit: 0 is below 1", func() error {
			_, err := s.Claimer().ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "n"}, Limit: 0}})
			return err
		}},
		{"sqlitestore: ClaimOutboxRowsScoped: claims[0].Route.Namespace: is empty", func() error {
			_, err := s.Claimer().ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Limit: 1}})
			return err
		}},
		{"sqlitestore: CountPendingOutboxRows: capPerRoute: 0 is below 1", func() error {
			_, err := s.Claimer().CountPendingOutboxRows(ctx, all, 0)
			return err
		}},
		{"sqlitestore: CountOutboxRows: p.After: is not valid UTF-8", func() error {
			_, _, err := claimerOf(s).CountOutboxRows(ctx, all, backpressure.CountParams{CapPerRoute: 1, Namespaces: 1, After: "\xff"})
			return err
		}},
		{"sqlitestore: Get: dispatchKey: is empty", func() error { _, err := s.Get(ctx, ""); return err }},
		{"sqlitestore: Requeue: dispatchKeys[1]: holds a NUL byte", func() error {
			_, err := s.Requeue(ctx, []string{"k", "a\x00"})
			return err
		}},
		{`sqlitestore: Complete: completions[1].DispatchKey: "k" is also completions[0]`, func() error {
			l := outbox.Lease{DispatchKey: "k", Token: 1}
			_, err := s.Complete(ctx, []outbox.Completion{{Lease: l, Outcome: outbox.Settle}, {Lease: l, Outcome: outbox.Settle}})
			return err
		}},
		{"sqlitestore: ListDead: p.Limit: -1 is not within 1 to 10000", func() error {
			_, err := s.ListDead(ctx, outbox.ListDeadParams{Limit: -1})
			return err
		}},
		{"sqlitestore: PurgeDead: limit: -1 is negative", func() error { _, err := s.PurgeDead(ctx, s.now(), -1); return err }},
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
