package storetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testComplete checks [outbox.Completer.Complete]: settle, retry and
// dead-letter in one batch with per-row results at the argument's indexes;
// every kind of lost lease reported per row with the row unchanged; bad
// arguments refused whole; and a batch failing part-way applying nothing.
func testComplete[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("MixedOutcomes", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 4)...)
		rows := o.claimN("claim", 4, scope("a", "q", 4))
		o.h.Advance(time.Second)
		const delay = 5 * time.Second
		// Out of key order, so a store that sorts its results fails.
		cs := []outbox.Completion{
			outbox.DeadLetterRow(rows[2], errors.New("poison")),
			outbox.SettleRow(rows[0]),
			outbox.RetryRow(rows[1], delay, errors.New("flaky")),
			outbox.RetryRow(rows[3], 0, nil),
		}
		res := o.complete("mixed batch", cs...)
		now := o.h.Now()
		want := []struct {
			state     outbox.State
			runAt     time.Time
			finished  time.Time
			lastError string
		}{
			{outbox.StateDead, rows[2].RunAt, now, "poison"},
			{outbox.StateSettled, rows[0].RunAt, now, ""},
			{outbox.StatePending, now.Add(delay), time.Time{}, "flaky"},
			{outbox.StatePending, now, time.Time{}, ""},
		}
		for i, c := range cs {
			o.applied("completion "+strconv.Itoa(i)+" ("+c.Outcome.String()+")", res[i], want[i].state)
			r := o.get(c.DispatchKey)
			w := want[i]
			if r.State != w.state || !r.FinishedAt.Equal(w.finished) || r.LastError != w.lastError || r.Attempts != 1 || r.Token != c.Token {
				t.Errorf("after %s: row %q = State %q FinishedAt %v LastError %q Attempts %d Token %d; want %q %v %q 1 %d",
					c.Outcome, c.DispatchKey, r.State, r.FinishedAt, r.LastError, r.Attempts, r.Token, w.state, w.finished, w.lastError, c.Token)
			}
			if r.State == outbox.StatePending && !r.RunAt.Equal(w.runAt) {
				t.Errorf("after %s: row %q RunAt %v, want %v", c.Outcome, c.DispatchKey, r.RunAt, w.runAt)
			}
		}
		if c := o.countClaimed(o.all); len(c) != 0 {
			t.Errorf("CountClaimedOutboxRows after completing every claim = %v, want none", c)
		}
		if got := o.keys(o.claim(o.all, scope("a", "q", 10))); len(got) != 1 || got[0] != rows[3].DispatchKey {
			t.Errorf("claim after the batch = %v, want only the row retried without delay, %q", got, rows[3].DispatchKey)
		}
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		o := setupStore(t, newHarness)
		// Every backend answers alike: an empty, non-nil slice.
		for _, none := range [][]outbox.Completion{nil, {}} {
			if res, err := o.s.Complete(o.ctx, none); err != nil || res == nil || len(res) != 0 {
				t.Errorf("Complete(%#v) = %#v, %v; want no results (an empty, non-nil slice) and no error", none, res, err)
			}
		}
	})

	t.Run("ErrorTextTruncated", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 2)...)
		rows := o.claimN("claim", 2, scope("a", "q", 2))
		long := "bad\xff\x00" + strings.Repeat("é", outbox.MaxErrorBytes)
		o.complete("long errors", outbox.RetryRow(rows[0], 0, errors.New(long)), outbox.DeadLetterRow(rows[1], errors.New(long)))
		for _, r := range rows {
			if got := o.get(r.DispatchKey).LastError; got != outbox.TruncateError(long) {
				t.Errorf("row %q LastError is %d bytes %.20q…, want outbox.TruncateError of the error (%d bytes)", r.DispatchKey, len(got), got, len(outbox.TruncateError(long)))
			}
		}
	})

	t.Run("RetryRecordsCause", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		r := o.claimN("claim", 1, scope("a", "q", 1))[0]
		if err := o.s.Retry(o.ctx, r.Lease(), time.Second, errors.New("timeout")); err != nil {
			t.Fatalf("Retry: %v", err)
		}
		if got := o.get("k"); got.State != outbox.StatePending || got.LastError != "timeout" {
			t.Errorf("after Retry(cause timeout): State %q LastError %q, want pending, \"timeout\"", got.State, got.LastError)
		}
	})

	// Each kind of lost lease, alone: reported in its Result, the row
	// unchanged, and the one-row conveniences returning the same error.
	for _, lc := range []struct {
		name string
		// lose claims the row k (and maybe more) and returns a lease on
		// it that is no longer its current live claim.
		lose func(o *ox) outbox.Lease
	}{
		{"StaleToken", func(o *ox) outbox.Lease {
			old := o.claimN("first claim", 1, scope("a", "q", 1))[0]
			o.h.Advance(o.h.Lease + time.Millisecond)
			o.claimN("claim after expiry", 1, scope("a", "q", 1))
			return old.Lease()
		}},
		{"Twice", func(o *ox) outbox.Lease {
			r := o.claimN("claim", 1, scope("a", "q", 1))[0]
			o.applied("first settle", o.complete("first settle", outbox.SettleRow(r))[0], outbox.StateSettled)
			return r.Lease()
		}},
		{"RetriedThenSettled", func(o *ox) outbox.Lease {
			r := o.claimN("claim", 1, scope("a", "q", 1))[0]
			o.applied("retry", o.complete("retry", outbox.RetryRow(r, time.Hour, nil))[0], outbox.StatePending)
			return r.Lease()
		}},
		{"ExpiredLease", func(o *ox) outbox.Lease {
			r := o.claimN("claim", 1, scope("a", "q", 1))[0]
			o.h.Advance(o.h.Lease + time.Millisecond)
			return r.Lease()
		}},
		{"NeverClaimed", func(o *ox) outbox.Lease {
			return outbox.Lease{DispatchKey: "k", Token: o.get("k").Token}
		}},
		{"WrongToken", func(o *ox) outbox.Lease {
			r := o.claimN("claim", 1, scope("a", "q", 1))[0]
			return outbox.Lease{DispatchKey: r.DispatchKey, Token: r.Token + 1}
		}},
		{"NoSuchRow", func(o *ox) outbox.Lease {
			r := o.claimN("claim", 1, scope("a", "q", 1))[0]
			return outbox.Lease{DispatchKey: "no-such-row", Token: r.Token}
		}},
		{"AfterPurge", func(o *ox) outbox.Lease {
			r := o.claimN("claim", 1, scope("a", "q", 1))[0]
			o.applied("settle", o.complete("settle", outbox.SettleRow(r))[0], outbox.StateSettled)
			o.h.Advance(time.Second)
			if n, err := o.s.PurgeSettled(o.ctx, o.h.Now(), 10); err != nil || n != 1 {
				o.t.Fatalf("PurgeSettled = %d, %v; want 1", n, err)
			}
			return r.Lease()
		}},
	} {
		t.Run("Lost/"+lc.name, func(t *testing.T) {
			for _, outcome := range []outbox.Outcome{outbox.Settle, outbox.Retry, outbox.DeadLetter} {
				o := setupStore(t, newHarness)
				o.enqueue(msg("a", "q", "k"))
				l := lc.lose(o)
				keys := []string{l.DispatchKey}
				if _, err := o.s.Get(o.ctx, l.DispatchKey); errors.Is(err, outbox.ErrNotFound) {
					keys = nil // purged, or never there: it must stay gone
					defer o.gone(outcome.String()+" with a lost lease", l.DispatchKey)
				}
				before := o.snapshot(keys)
				step := outcome.String() + " with a lost lease"
				res := o.complete(step, outbox.Completion{Lease: l, Outcome: outcome, Error: "x"})
				o.lost(step, res[0], l)
				o.unchanged(step, before, nil)
				var err error
				switch outcome {
				case outbox.Settle:
					err = o.s.Settle(o.ctx, l)
				case outbox.Retry:
					err = o.s.Retry(o.ctx, l, 0, errors.New("x"))
				default:
					continue
				}
				o.lost(outcome.String()+" (one row) with a lost lease", outbox.Result{Err: err}, l)
				o.unchanged(outcome.String()+" (one row) with a lost lease", before, nil)
			}
		})
	}

	t.Run("MixedLiveAndLost", func(t *testing.T) {
		// k-0: an expired claim's lease (the row claimed again since);
		// k-1: a settled row's; k-2, k-3: live; and a key with no row.
		o := setupStore(t, newHarness)
		keys := messageKeys(msgs("a", "q", "k", 4))
		o.enqueue(msgs("a", "q", "k", 4)...)
		expired := o.claimN("claim k-0", 1, scope("a", "q", 1))[0]
		o.h.Advance(o.h.Lease + time.Millisecond)
		rows := map[string]outbox.Row{}
		for _, r := range o.claimN("claim all", 4, scope("a", "q", 4)) {
			rows[r.DispatchKey] = r
		}
		o.applied("settle k-1", o.complete("settle k-1", outbox.SettleRow(rows["k-1"]))[0], outbox.StateSettled)
		before := o.snapshot(keys)
		cs := []outbox.Completion{
			outbox.SettleRow(rows["k-2"]),
			outbox.DeadLetterRow(expired, errors.New("stale")),
			outbox.RetryRow(rows["k-1"], time.Second, errors.New("twice")),
			outbox.DeadLetterRow(rows["k-3"], errors.New("poison")),
			{Lease: outbox.Lease{DispatchKey: "no-such-row", Token: rows["k-2"].Token}, Outcome: outbox.Settle},
		}
		res := o.complete("mixed batch", cs...)
		o.applied("mixed batch, live k-2", res[0], outbox.StateSettled)
		o.lost("mixed batch, k-0's expired claim", res[1], cs[1].Lease)
		o.lost("mixed batch, settled k-1", res[2], cs[2].Lease)
		o.applied("mixed batch, live k-3", res[3], outbox.StateDead)
		o.lost("mixed batch, no such row", res[4], cs[4].Lease)
		if got := o.get("k-2").State; got != outbox.StateSettled {
			t.Errorf("k-2 after the batch: State %q, want settled", got)
		}
		if got := o.get("k-3"); got.State != outbox.StateDead || got.LastError != "poison" {
			t.Errorf("k-3 after the batch: State %q LastError %q, want dead, \"poison\"", got.State, got.LastError)
		}
		o.unchanged("mixed batch", before, map[string]bool{"k-2": true, "k-3": true})
		o.gone("mixed batch", "no-such-row")
	})

	t.Run("InvalidBatchAppliesNothing", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 3)...)
		rows := o.claimN("claim", 3, scope("a", "q", 3))
		before := o.snapshot([]string{"k-0", "k-1", "k-2"})
		good := []outbox.Completion{outbox.SettleRow(rows[0]), outbox.DeadLetterRow(rows[1], errors.New("x"))}
		for name, bad := range map[string]outbox.Completion{
			"duplicate key":               outbox.RetryRow(rows[0], 0, nil),
			"zero Outcome":                {Lease: rows[2].Lease()},
			"unknown Outcome":             {Lease: rows[2].Lease(), Outcome: outbox.DeadLetter + 7},
			"Retry with a negative delay": {Lease: rows[2].Lease(), Outcome: outbox.Retry, Delay: -time.Second},
		} {
			res, err := o.s.Complete(o.ctx, append(good[:len(good):len(good)], bad))
			o.invalidArgument("Complete with a "+name, err)
			if res != nil {
				t.Errorf("Complete with a %s returned results %v with its error", name, res)
			}
			o.unchanged("Complete with a "+name, before, nil)
		}
		for _, r := range o.complete("the valid batch after", append(good, outbox.SettleRow(rows[2]))...) {
			if r.Err != nil {
				t.Errorf("the valid batch after the invalid ones: %v", r.Err)
			}
		}
	})

	t.Run("AtomicOnFault", func(t *testing.T) {
		o := setupStore(t, newHarness)
		if o.h.FailNth == nil {
			t.Log("WARNING: Harness.FailNth is nil, so this suite does NOT check that a batch completion failing part-way applies nothing. Set Harness.FailNth to check it.")
			t.Skip("all-or-nothing under a mid-batch failure not checked: Harness.FailNth is nil")
		}
		ms := msgs("a", "q", "k", 8)
		o.enqueue(ms...)
		rows := o.claimN("claim", 6, scope("a", "q", 6))
		o.applied("settle k-5 first", o.complete("settle", outbox.SettleRow(rows[5]))[0], outbox.StateSettled)
		cs := []outbox.Completion{
			outbox.SettleRow(rows[0]),
			outbox.RetryRow(rows[1], time.Minute, errors.New("r")),
			outbox.DeadLetterRow(rows[2], errors.New("d")),
			outbox.SettleRow(rows[3]),
			outbox.RetryRow(rows[4], 0, nil),
			outbox.SettleRow(rows[5]), // lost: settled already
		}
		before := o.snapshot(messageKeys(ms))
		for n := 1; ; n++ {
			if n > 1000 {
				t.Fatal("Complete still failing after 1000 armed faults; FailNth does not disarm")
			}
			o.h.FailNth(n)
			res, err := o.s.Complete(o.ctx, cs)
			o.h.FailNth(0)
			if err == nil {
				if n == 1 {
					t.Errorf("Complete succeeded with its first statement armed to fail; FailNth had no effect")
				}
				want := []outbox.State{outbox.StateSettled, outbox.StatePending, outbox.StateDead, outbox.StateSettled, outbox.StatePending}
				for i, s := range want {
					o.applied("Complete after "+strconv.Itoa(n-1)+" faults, entry "+strconv.Itoa(i), res[i], s)
				}
				o.lost("Complete after faults, the settled row", res[5], cs[5].Lease)
				break
			}
			if res != nil {
				t.Errorf("Complete failing at statement %d returned results %v with error %v", n, res, err)
			}
			o.unchanged("Complete failing at statement "+strconv.Itoa(n), before, nil)
		}
	})
}
