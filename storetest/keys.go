package storetest

import (
	"errors"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// badKeys are dispatch keys no row can have: Enqueue refuses each (see
// [outbox.Message.Validate]).
var badKeys = map[string]string{
	"empty":              "",
	"invalid UTF-8":      "k\xff",
	"holding a NUL byte": "k\x00",
}

// testInvalidKeys checks that every call naming rows by dispatch key
// refuses a key no row can have with an [*outbox.ArgumentError], before it
// touches anything, rather than answering as for an unknown row (a lost
// lease, ErrNotFound, nothing moved): a caller passing such a key has a
// bug, and every backend says so alike.
func testInvalidKeys[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o := setupStore(t, newHarness)
	o.enqueue(msgs("a", "q", "k", 3)...)
	rows := o.claimN("claim", 2, scope("a", "q", 2))
	o.complete("dead-letter k-1", outbox.DeadLetterRow(rows[1], errors.New("x")))
	keys := []string{"k-0", "k-1", "k-2"}
	before := o.snapshot(keys)
	live := rows[0].Lease()
	for name, key := range badKeys {
		bad := outbox.Lease{DispatchKey: key, Token: live.Token}
		res, err := o.s.Complete(o.ctx, []outbox.Completion{{Lease: live, Outcome: outbox.Settle}, {Lease: bad, Outcome: outbox.Settle}})
		o.invalidArgument("Complete with a key "+name, err)
		if res != nil {
			t.Errorf("Complete with a key %s returned results %v with its error", name, res)
		}
		res, err = o.s.ExtendLeases(o.ctx, []outbox.Lease{live, bad})
		o.invalidArgument("ExtendLeases with a key "+name, err)
		if res != nil {
			t.Errorf("ExtendLeases with a key %s returned results %v with its error", name, res)
		}
		n, err := o.s.Requeue(o.ctx, []string{"k-1", key})
		o.invalidArgument("Requeue with a key "+name, err)
		if n != 0 {
			t.Errorf("Requeue with a key %s = %d with its error, want 0", name, n)
		}
		_, err = o.s.Get(o.ctx, key)
		o.invalidArgument("Get of a key "+name, err)
		o.unchanged("calls with a key "+name, before, nil)
	}
}
