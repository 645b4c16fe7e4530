package storetest

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testDeadLetters checks dead letters: a retry past a row's MaxAttempts (the
// store's, or its message's) dead-letters it with its last error; a dead
// row is never claimed nor counted pending; dead-lettering a row not
// claimed is a lost lease; ListDead pages in key order and filters by
// namespace; Requeue makes a dead row pending with no attempts.
func testDeadLetters[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	// retryUntilDead claims and retries key until it is dead, checking
	// each step, and returns how many claims it took.
	retryUntilDead := func(o *ox, key string, limit int) int {
		o.t.Helper()
		for n := 1; ; n++ {
			r := o.claimN("claim "+strconv.Itoa(n), 1, scope("a", "q", 1))[0]
			if r.DispatchKey != key || r.Attempts != n {
				o.t.Fatalf("claim %d took %q with Attempts %d, want %q with %d", n, r.DispatchKey, r.Attempts, key, n)
			}
			res := o.complete("retry "+strconv.Itoa(n), outbox.RetryRow(r, 0, errors.New("failure "+strconv.Itoa(n))))[0]
			if n < limit {
				o.applied("retry "+strconv.Itoa(n)+" of "+strconv.Itoa(limit), res, outbox.StatePending)
				continue
			}
			o.applied("retry "+strconv.Itoa(n)+", the last attempt", res, outbox.StateDead)
			g := o.get(key)
			if g.State != outbox.StateDead || g.LastError != "failure "+strconv.Itoa(n) || g.Attempts != n || !g.FinishedAt.Equal(o.h.Now()) {
				o.t.Errorf("row %q after its last retry: State %q LastError %q Attempts %d FinishedAt %v; want dead, \"failure %d\", %d, %v",
					key, g.State, g.LastError, g.Attempts, g.FinishedAt, n, n, o.h.Now())
			}
			return n
		}
	}

	t.Run("StoreMaxAttempts", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		if got := o.get("k").MaxAttempts; got != o.h.MaxAttempts {
			t.Fatalf("a row whose message sets no MaxAttempts has MaxAttempts %d, want the store's %d (Harness.MaxAttempts)", got, o.h.MaxAttempts)
		}
		retryUntilDead(o, "k", o.h.MaxAttempts)
		o.neverClaimed("k")
	})

	t.Run("MessageMaxAttempts", func(t *testing.T) {
		for _, limit := range []int{1, 2, 3} {
			o := setupStore(t, newHarness)
			m := msg("a", "q", "k")
			m.MaxAttempts = limit
			o.enqueue(m)
			if got := o.get("k").MaxAttempts; got != limit {
				t.Fatalf("a row whose message sets MaxAttempts %d has MaxAttempts %d", limit, got)
			}
			retryUntilDead(o, "k", limit)
			o.neverClaimed("k")
		}
	})

	t.Run("ExplicitDeadLetter", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		r := o.claimN("claim", 1, scope("a", "q", 1))[0]
		o.applied("dead-letter", o.complete("dead-letter", outbox.DeadLetterRow(r, errors.New("poison")))[0], outbox.StateDead)
		if g := o.get(r.DispatchKey); g.State != outbox.StateDead || g.LastError != "poison" || g.Attempts != 1 {
			t.Errorf("dead-lettered row: State %q LastError %q Attempts %d, want dead, \"poison\", 1", g.State, g.LastError, g.Attempts)
		}
		o.neverClaimed(r.DispatchKey)
	})

	t.Run("DeadLetterOfUnclaimedRowIsLost", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 2)...)
		claimed := o.claimN("claim", 1, scope("a", "q", 1))[0] // k-0
		before := o.snapshot([]string{"k-0", "k-1"})
		for _, l := range []outbox.Lease{{DispatchKey: "k-1"}, {DispatchKey: "k-1", Token: claimed.Token}} {
			res := o.complete("dead-letter of a pending row", outbox.Completion{Lease: l, Outcome: outbox.DeadLetter, Error: "x"})
			o.lost("dead-letter of a pending row", res[0], l)
		}
		o.unchanged("dead-letter of a pending row", before, nil)
	})

	t.Run("ListDead", func(t *testing.T) {
		o := setupStore(t, newHarness)
		// Keys out of enqueue order, over two namespaces, among rows of
		// every other state.
		var want, wantA []string
		var ms []outbox.Message
		for i, k := range []string{"m", "c", "x", "a", "q", "b", "z", "e", "n"} {
			ns := "a"
			if i%3 == 0 {
				ns = "b"
			}
			ms = append(ms, msg(ns, "q", "dead-"+k))
			want = append(want, "dead-"+k)
			if ns == "a" {
				wantA = append(wantA, "dead-"+k)
			}
		}
		o.enqueue(ms...)
		var cs []outbox.Completion
		for _, r := range o.claim(o.all, scope("a", "q", 100), scope("b", "q", 100)) {
			cs = append(cs, outbox.DeadLetterRow(r, errors.New("dead "+r.DispatchKey)))
		}
		o.complete("dead-letter all", cs...)
		o.enqueue(msg("a", "q", "settled"), msg("a", "q", "claimed"))
		for _, r := range o.claimN("claim", 2, scope("a", "q", 2)) {
			if r.DispatchKey == "settled" {
				o.complete("settle", outbox.SettleRow(r))
			}
		}
		o.enqueue(msg("a", "q", "pending"))
		slices.Sort(want)
		slices.Sort(wantA)
		for _, c := range []struct {
			namespace string
			limit     int
			want      []string
		}{
			{"", 0, want}, {"", 1, want}, {"", 4, want}, {"", len(want), want}, {"", 10_000, want},
			{"a", 2, wantA}, {"a", 0, wantA}, {"b", 1, []string{"dead-a", "dead-m", "dead-z"}}, {"nobody", 5, nil},
		} {
			var got []string
			after := ""
			for page := 0; ; page++ {
				if page > len(want)+1 {
					t.Fatalf("ListDead(%q, limit %d) never ends", c.namespace, c.limit)
				}
				rows, err := o.s.ListDead(o.ctx, outbox.ListDeadParams{Namespace: c.namespace, After: after, Limit: c.limit})
				if err != nil {
					t.Fatalf("ListDead(%q, after %q, limit %d): %v", c.namespace, after, c.limit, err)
				}
				if c.limit > 0 && len(rows) > c.limit {
					t.Errorf("ListDead(limit %d) returned %d rows", c.limit, len(rows))
				}
				for _, r := range rows {
					if r.State != outbox.StateDead || r.LastError != "dead "+r.DispatchKey || (c.namespace != "" && r.Namespace != c.namespace) {
						t.Errorf("ListDead(%q) returned row %q: State %q LastError %q Namespace %q", c.namespace, r.DispatchKey, r.State, r.LastError, r.Namespace)
					}
				}
				got = append(got, rowKeys(rows)...)
				if len(rows) == 0 {
					break
				}
				after = rows[len(rows)-1].DispatchKey
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("ListDead(namespace %q, limit %d), page by page = %v, want %v", c.namespace, c.limit, got, c.want)
			}
		}
		for _, limit := range []int{-1, 10_001} {
			_, err := o.s.ListDead(o.ctx, outbox.ListDeadParams{Limit: limit})
			o.invalidArgument("ListDead(limit "+strconv.Itoa(limit)+")", err)
		}
	})

	t.Run("Requeue", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 4)...)
		rows := o.claimN("claim", 3, scope("a", "q", 3))
		o.complete("dead-letter k-0, k-1; settle k-2",
			outbox.DeadLetterRow(rows[0], errors.New("x")), outbox.DeadLetterRow(rows[1], errors.New("y")), outbox.SettleRow(rows[2]))
		o.h.Advance(time.Second)
		dead := rows[0].DispatchKey
		others := []string{rows[1].DispatchKey, rows[2].DispatchKey, "k-3"}
		before := o.snapshot(others)
		n, err := o.s.Requeue(o.ctx, []string{dead, rows[2].DispatchKey, "k-3", "no-such-row", dead})
		if err != nil || n != 1 {
			t.Fatalf("Requeue(one dead key twice, a settled, a pending and a missing key) = %d, %v; want 1", n, err)
		}
		o.unchanged("Requeue of rows that are not dead", before, nil)
		if g := o.get(dead); g.State != outbox.StatePending || g.Attempts != 0 || g.RunAt.After(o.h.Now()) {
			t.Errorf("requeued row: State %q Attempts %d RunAt %v, want pending, 0, claimable now (%v)", g.State, g.Attempts, g.RunAt, o.h.Now())
		}
		if got := o.countPending(o.all, 10)[route("a", "q")]; got != 2 {
			t.Errorf("pending after Requeue = %d, want 2 (the requeued row and k-3)", got)
		}
		if st := o.stats(); st.Dead != 1 || st.Pending != 2 {
			t.Errorf("Stats after Requeue = %+v, want Dead 1, Pending 2", st)
		}
		var again outbox.Row
		for _, r := range o.claimN("claim after Requeue", 2, scope("a", "q", 2)) {
			if r.DispatchKey == dead {
				again = r
			}
		}
		if again.Attempts != 1 || again.Token == rows[0].Token {
			t.Errorf("requeued row claimed again: %+v, want Attempts 1 and a fresh token", again)
		}
		if n, err := o.s.Requeue(o.ctx, nil); err != nil || n != 0 {
			t.Errorf("Requeue(none) = %d, %v; want 0", n, err)
		}
	})
}

// neverClaimed checks that the dead row key stays out of every count and
// claim however far the clock moves, and is counted dead.
func (o *ox) neverClaimed(key string) {
	o.t.Helper()
	g := o.get(key)
	for i := 0; i < 3; i++ {
		if got := o.countPending(o.all, 100); len(got) != 0 {
			o.t.Errorf("step %d: CountPendingOutboxRows = %v with only dead row %q", i, got, key)
		}
		if got := o.claim(o.all, scope(g.Namespace, g.TaskQueue, 100)); len(got) != 0 {
			o.t.Fatalf("step %d: claim returned %v; a dead row is never claimed", i, o.keys(got))
		}
		if c := o.countClaimed(o.all); len(c) != 0 {
			o.t.Errorf("step %d: CountClaimedOutboxRows = %v with only dead row %q", i, c, key)
		}
		if st := o.stats(); st.Dead != 1 || st.Total != 1 {
			o.t.Errorf("step %d: Stats = %+v, want Dead 1 of Total 1", i, st)
		}
		o.h.Advance(o.h.Lease + time.Hour)
	}
}
