package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testDedup checks that enqueue is insert-or-ignore by dispatch key and says
// how many rows it inserted.
func testDedup[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("NewRowIsPending", func(t *testing.T) {
		e := setup(t, newHarness)
		m := msg("acme", "emails", "k-1")
		if n := e.enqueue(m); n != 1 {
			t.Fatalf("Enqueue(new key) inserted %d, want 1", n)
		}
		s := e.inspect(m.DispatchKey)
		if s.DispatchKey != m.DispatchKey || s.Namespace != m.Namespace || s.TaskQueue != m.TaskQueue || !bytes.Equal(s.Payload, m.Payload) {
			t.Errorf("Inspect = %+v, want the enqueued message %+v", s, m)
		}
		if s.State != outbox.StatePending || s.Attempts != 0 {
			t.Errorf("new row: State %q Attempts %d, want %q 0", s.State, s.Attempts, outbox.StatePending)
		}
		if want := backpressure.ShardFor(m.DispatchKey, e.h.ShardCount); s.Shard != want {
			t.Errorf("new row: Shard %d, want ShardFor = %d", s.Shard, want)
		}
		if now := e.h.Now(); !s.EnqueuedAt.Equal(now) || s.RunAt.After(now) {
			t.Errorf("new row: EnqueuedAt %v RunAt %v, want EnqueuedAt = now = %v and RunAt ≤ now", s.EnqueuedAt, s.RunAt, now)
		}
	})

	t.Run("ReEnqueueIsNoOp", func(t *testing.T) {
		e := setup(t, newHarness)
		ms := msgs("acme", "emails", "k", 3)
		if n := e.enqueue(ms...); n != 3 {
			t.Fatalf("Enqueue(3 new keys) inserted %d, want 3", n)
		}
		before := e.snapshot(messageKeys(ms))
		e.h.Advance(time.Second)
		again := make([]outbox.Message, len(ms))
		for i, m := range ms {
			again[i] = outbox.Message{DispatchKey: m.DispatchKey, Namespace: "other", TaskQueue: "other", Payload: []byte("changed")}
		}
		if n := e.enqueue(again...); n != 0 {
			t.Errorf("Enqueue(3 existing keys) inserted %d, want 0", n)
		}
		e.unchanged("re-enqueue", before, nil)
	})

	t.Run("PartlyDuplicateBatch", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("acme", "emails", "a"), msg("acme", "emails", "b"))
		if n := e.enqueue(msg("acme", "emails", "b"), msg("acme", "emails", "c")); n != 1 {
			t.Errorf("Enqueue(b, c) after (a, b) inserted %d, want 1", n)
		}
		if s := e.inspect("c"); s.State != outbox.StatePending {
			t.Errorf("row c: State %q, want %q", s.State, outbox.StatePending)
		}
	})

	t.Run("DuplicateWithinBatch", func(t *testing.T) {
		e := setup(t, newHarness)
		if n := e.enqueue(msg("acme", "emails", "a"), msg("acme", "emails", "a")); n != 1 {
			t.Errorf("Enqueue(a, a) inserted %d, want 1", n)
		}
		if got := e.countPending(e.all, 100); got[route("acme", "emails")] != 1 {
			t.Errorf("after Enqueue(a, a): pending %v, want acme/emails: 1", got)
		}
	})

	t.Run("SettledKeyStaysDeduped", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msg("acme", "emails", "a"))
		rows := e.claim(e.all, scope("acme", "emails", 1))
		if len(rows) != 1 {
			t.Fatalf("claim returned %d rows, want 1", len(rows))
		}
		e.settle(rows[0])
		before := e.snapshot([]string{"a"})
		if n := e.enqueue(msg("acme", "emails", "a")); n != 0 {
			t.Errorf("Enqueue(settled key) inserted %d, want 0", n)
		}
		e.unchanged("re-enqueue of a settled key", before, nil)
		if got := e.claim(e.all, scope("acme", "emails", 10)); len(got) != 0 {
			t.Errorf("claim after re-enqueueing a settled key returned %v, want nothing", e.keys(got))
		}
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		e := setup(t, newHarness)
		if n := e.enqueue(); n != 0 {
			t.Errorf("Enqueue(no messages) inserted %d, want 0", n)
		}
	})
}
