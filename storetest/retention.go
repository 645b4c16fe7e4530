package storetest

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testRetention checks PurgeSettled and PurgeDead: bounded by limit, oldest
// first, only rows finished before the given time, each only its own state;
// a purged key may be enqueued again; a purged row's lease is lost.
func testRetention[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	// seed leaves five settled rows s-0…s-4 and five dead rows d-0…d-4,
	// finished one second apart in that order (s-i and d-i together), a
	// pending row and a claimed row, and returns when s-0 finished.
	seed := func(o *ox) time.Time {
		o.t.Helper()
		o.enqueue(msgs("a", "s", "s", 5)...)
		o.enqueue(msgs("a", "d", "d", 5)...)
		o.enqueue(msgs("a", "p", "p", 2)...)
		start := o.h.Now()
		for i := 0; i < 5; i++ {
			n := strconv.Itoa(i)
			rows := o.claimN("claim s-"+n+", d-"+n, 2, scope("a", "s", 1), scope("a", "d", 1))
			cs := make([]outbox.Completion, 2)
			for j, r := range rows {
				cs[j] = outbox.SettleRow(r)
				if r.TaskQueue == "d" {
					cs[j] = outbox.DeadLetterRow(r, errors.New("dead"))
				}
			}
			o.complete("finish s-"+n+", d-"+n, cs...)
			o.h.Advance(time.Second)
		}
		o.claimN("claim p-0", 1, scope("a", "p", 1))
		return start
	}
	all := func(prefix string) []string { return messageKeys(msgs("a", "", prefix, 5)) }

	for _, c := range []struct {
		name        string
		purge       func(o *ox, before time.Time, limit int) (int, error)
		prefix, not string
	}{
		{"PurgeSettled", func(o *ox, before time.Time, limit int) (int, error) { return o.s.PurgeSettled(o.ctx, before, limit) }, "s", "d"},
		{"PurgeDead", func(o *ox, before time.Time, limit int) (int, error) { return o.s.PurgeDead(o.ctx, before, limit) }, "d", "s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := setupStore(t, newHarness)
			start := seed(o)
			kept := append(all(c.not), "p-0", "p-1")
			before := o.snapshot(kept)
			// Only rows finished before before: s-0, s-1 (start, start+1s).
			if n, err := c.purge(o, start.Add(1500*time.Millisecond), 10); err != nil || n != 2 {
				t.Fatalf("%s(before the third finished, limit 10) = %d, %v; want 2", c.name, n, err)
			}
			// Bounded by limit, oldest first.
			if n, err := c.purge(o, o.h.Now(), 2); err != nil || n != 2 {
				t.Fatalf("%s(now, limit 2) = %d, %v; want 2", c.name, n, err)
			}
			keys := all(c.prefix)
			for i, k := range keys {
				if i < 4 {
					o.gone(c.name+" of the four oldest", k)
				} else if g := o.get(k); g.State == "" {
					t.Errorf("%s removed %q, the newest", c.name, k)
				}
			}
			if n, err := c.purge(o, o.h.Now(), 2); err != nil || n != 1 {
				t.Fatalf("%s(now, limit 2) with one row left = %d, %v; want 1", c.name, n, err)
			}
			if n, err := c.purge(o, o.h.Now(), 2); err != nil || n != 0 {
				t.Fatalf("%s with nothing left = %d, %v; want 0", c.name, n, err)
			}
			o.unchanged(c.name+" of other states", before, nil)
			if n, err := c.purge(o, o.h.Now(), 0); err != nil || n != 0 {
				t.Fatalf("%s(limit 0) = %d, %v; want 0, nil", c.name, n, err)
			}
			_, err := c.purge(o, o.h.Now(), -1)
			o.invalidArgument(c.name+"(limit -1)", err)
		})
	}

	t.Run("PurgedKeyEnqueuedAgain", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		old := o.claimN("claim", 1, scope("a", "q", 1))[0]
		o.complete("settle", outbox.SettleRow(old))
		o.h.Advance(time.Second)
		if n, err := o.s.PurgeSettled(o.ctx, o.h.Now(), 10); err != nil || n != 1 {
			t.Fatalf("PurgeSettled = %d, %v; want 1", n, err)
		}
		if n := o.enqueue(msg("a", "other", "k")); n != 1 {
			t.Fatalf("Enqueue of a purged key inserted %d, want 1", n)
		}
		g := o.get("k")
		if g.State != outbox.StatePending || g.Attempts != 0 || g.TaskQueue != "other" || !g.EnqueuedAt.Equal(o.h.Now()) {
			t.Errorf("re-enqueued row = %+v, want a new pending row on a/other, enqueued now", g)
		}
		before := o.snapshot([]string{"k"})
		o.lost("settle of the purged row's lease", o.complete("settle", outbox.SettleRow(old))[0], old.Lease())
		o.unchanged("settle of the purged row's lease", before, nil)
		if got := o.keys(o.claim(o.all, scope("a", "other", 1))); len(got) != 1 {
			t.Errorf("claim of the re-enqueued row = %v, want [k]", got)
		}
	})
}
