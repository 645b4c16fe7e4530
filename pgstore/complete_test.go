package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// claimAll claims up to 100 rows of ns/q.
func (f *fixture) claimAll(ns, q string) []outbox.Row {
	f.t.Helper()
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim(ns, q, 100)})
	if err != nil {
		f.t.Fatalf("claim %s/%s: %v", ns, q, err)
	}
	return rows
}

func (f *fixture) get(key string) outbox.Row {
	f.t.Helper()
	r, err := f.s.Get(f.ctx, key)
	if err != nil {
		f.t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

func (f *fixture) stats() outbox.Stats {
	f.t.Helper()
	st, err := f.s.Stats(f.ctx)
	if err != nil {
		f.t.Fatalf("Stats: %v", err)
	}
	return st
}

// TestCompleteMixedBatch completes live and lost leases of every kind in
// one call: one round trip, a result per entry in argument order, and only
// the live leases applied.
func TestCompleteMixedBatch(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 6; i++ {
		f.enqueue(message("a", "q", fmt.Sprintf("k%d", i)))
	}
	f.enqueue(message("b", "q", "expired"), message("a", "z", "pending"))
	rows := f.claimAll("a", "q")
	old := f.claimAll("b", "q")
	if len(rows) != 6 || len(old) != 1 {
		t.Fatalf("claimed %d and %d rows, want 6 and 1", len(rows), len(old))
	}
	// k5 is settled first: completing it again is a lost lease.
	if err := f.s.Settle(f.ctx, rows[5].Lease()); err != nil {
		t.Fatal(err)
	}
	// "expired"'s lease runs out; the others' are still live.
	f.now = f.now.Add(outbox.DefaultLease / 2)
	if _, err := adminPool.Exec(f.ctx, "UPDATE "+pgx.Identifier{f.schema}.Sanitize()+".outbox SET lease_expires_at = $1 WHERE dispatch_key = 'expired'", f.now); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", outbox.MaxErrorBytes) // cut to MaxErrorBytes
	completions := []outbox.Completion{
		outbox.SettleRow(rows[0]),
		outbox.RetryRow(rows[1], time.Minute, errors.New("boom")),
		outbox.DeadLetterRow(rows[2], errors.New(long)),
		{Lease: outbox.Lease{DispatchKey: "k3", Token: rows[3].Token + 1000}, Outcome: outbox.Settle}, // stale token
		outbox.SettleRow(rows[5]),                                                                     // settled already
		outbox.SettleRow(old[0]),                                                                      // lease expired
		{Lease: outbox.Lease{DispatchKey: "nobody", Token: 1}, Outcome: outbox.Settle},
		{Lease: outbox.Lease{DispatchKey: "pending"}, Outcome: outbox.DeadLetter}, // never claimed
		outbox.RetryRow(rows[4], 0, nil),
	}
	before := f.tr.queries.Load()
	results, err := f.s.Complete(f.ctx, completions)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if n := f.tr.queries.Load() - before; n != 1 {
		t.Errorf("Complete of %d entries made %d round trips, want 1", len(completions), n)
	}
	want := []outbox.State{outbox.StateSettled, outbox.StatePending, outbox.StateDead, "", "", "", "", "", outbox.StatePending}
	for i, r := range results {
		var lost *outbox.LeaseLostError
		switch {
		case want[i] != "" && (r.Err != nil || r.State != want[i]):
			t.Errorf("results[%d] = %+v, want state %s", i, r, want[i])
		case want[i] == "" && (!errors.Is(r.Err, outbox.ErrLeaseLost) || !errors.As(r.Err, &lost) ||
			lost.DispatchKey != completions[i].DispatchKey || lost.Token != completions[i].Token || lost.Op != "Complete" || r.State != ""):
			t.Errorf("results[%d] = %+v, want a *LeaseLostError for %q", i, r, completions[i].DispatchKey)
		}
	}
	if r := f.get("k1"); r.State != outbox.StatePending || !r.RunAt.Equal(f.now.Add(time.Minute)) || r.LastError != "boom" || !r.FinishedAt.IsZero() {
		t.Errorf("retried row = %+v, want pending until +1m with its error", r)
	}
	if r := f.get("k2"); r.State != outbox.StateDead || !r.FinishedAt.Equal(f.now) || r.LastError != outbox.TruncateError(long) || len(r.LastError) > outbox.MaxErrorBytes {
		t.Errorf("dead-lettered row = %+v, want dead now with its error cut to %d bytes", r, outbox.MaxErrorBytes)
	}
	if r := f.get("k0"); r.State != outbox.StateSettled || !r.FinishedAt.Equal(f.now) {
		t.Errorf("settled row = %+v", r)
	}
	for _, k := range []string{"k3", "expired"} {
		if r := f.get(k); r.State != outbox.StateClaimed {
			t.Errorf("row %s with a lost lease is %s, want claimed, unchanged", k, r.State)
		}
	}
	if r := f.get("pending"); r.State != outbox.StatePending || r.LastError != "" {
		t.Errorf("never-claimed row after a dead-letter = %+v, want pending, unchanged", r)
	}
	// k1 waits out its delay; k4 and the expired row are claimable now.
	st := f.stats()
	if want := (outbox.Stats{Pending: 2, Scheduled: 1, Claimed: 1, Expired: 1, Settled: 2, Dead: 1, Total: 8}); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}

// TestCompleteRejectsWholeBatch: one bad entry, and nothing is applied.
func TestCompleteRejectsWholeBatch(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k1"), message("a", "q", "k2"))
	rows := f.claimAll("a", "q")
	for i, bad := range [][]outbox.Completion{
		{outbox.SettleRow(rows[0]), outbox.SettleRow(rows[1]), outbox.RetryRow(rows[0], 0, nil)},
		{outbox.SettleRow(rows[0]), {Lease: rows[1].Lease(), Outcome: outbox.Outcome(9)}},
		{outbox.SettleRow(rows[0]), {Lease: rows[1].Lease(), Outcome: outbox.Retry, Delay: -1}},
		{outbox.SettleRow(rows[0]), {Lease: outbox.Lease{DispatchKey: "k\x00"}, Outcome: outbox.Settle}},
	} {
		results, err := f.s.Complete(f.ctx, bad)
		var ae *outbox.ArgumentError
		if results != nil || !errors.As(err, &ae) || ae.Op != "Complete" {
			t.Errorf("step %d: Complete = %v, %v; want an *outbox.ArgumentError", i, results, err)
		}
	}
	for _, r := range rows {
		if got := f.get(r.DispatchKey); got.State != outbox.StateClaimed {
			t.Errorf("row %s is %s after rejected batches, want claimed", r.DispatchKey, got.State)
		}
	}
	if results, err := f.s.Complete(f.ctx, nil); results == nil || len(results) != 0 || err != nil {
		t.Errorf("Complete(nil) = %#v, %v; want an empty, non-nil slice and no error", results, err)
	}
}

// TestRetryPastMaxAttempts: the store's MaxAttempts, a message's override,
// and 0 (no limit) for rows migrated from an older schema.
func TestRetryPastMaxAttempts(t *testing.T) {
	f := newFixture(t)
	s, err := pgstore.New(f.ctx, f.pool, pgstore.Options{Schema: f.schema, MaxAttempts: 2, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	m := message("a", "once", "once")
	m.MaxAttempts = 1
	f.enqueue(message("a", "q", "k"), m)
	if r := f.get("k"); r.MaxAttempts != 2 {
		t.Errorf("row k: MaxAttempts %d, want the store's 2", r.MaxAttempts)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		rows := f.claimAll("a", "q")
		if len(rows) != 1 || rows[0].Attempts != attempt {
			t.Fatalf("attempt %d: claimed %+v", attempt, rows)
		}
		err := f.s.Retry(f.ctx, rows[0].Lease(), 0, fmt.Errorf("failure %d", attempt))
		if err != nil {
			t.Fatalf("attempt %d: Retry: %v", attempt, err)
		}
		want := outbox.StatePending
		if attempt == 2 {
			want = outbox.StateDead
		}
		if r := f.get("k"); r.State != want || r.LastError != fmt.Sprintf("failure %d", attempt) {
			t.Errorf("after retry %d: row %+v, want %s", attempt, r, want)
		}
	}
	rows := f.claimAll("a", "once")
	if res, err := f.s.Complete(f.ctx, []outbox.Completion{outbox.RetryRow(rows[0], time.Hour, nil)}); err != nil || res[0].State != outbox.StateDead {
		t.Errorf("retry of a row with MaxAttempts 1 = %v, %v; want dead", res, err)
	}
	// Dead rows are never claimed, whatever the time.
	f.now = f.now.Add(24 * time.Hour)
	if rows, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, f.all, 10); err != nil || len(rows) != 0 {
		t.Errorf("unscoped claim with only dead rows = %v, %v", rows, err)
	}
	if c, err := claimerOf(f.s).CountPendingOutboxRows(f.ctx, f.all, 10); err != nil || len(c) != 0 {
		t.Errorf("pending counts with only dead rows = %v, %v", c, err)
	}
}

// TestDeadLetters: ListDead pages in key order and filters by namespace,
// Requeue brings dead rows back (and nothing else), PurgeDead deletes the
// oldest dead rows only.
func TestDeadLetters(t *testing.T) {
	f := newFixture(t)
	keys := []string{"b1", "a2", "a1", "c1", "B0"}
	for _, k := range keys {
		f.enqueue(message(k[:1], "q", k))
	}
	f.enqueue(message("a", "q", "alive"))
	for i, k := range keys {
		rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim(k[:1], "q", 1)})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim %s: %v, %v", k, rows, err)
		}
		f.now = f.now.Add(time.Second) // dead-lettered one second apart, in keys' order
		if res, err := f.s.Complete(f.ctx, []outbox.Completion{outbox.DeadLetterRow(rows[0], fmt.Errorf("e%d", i))}); err != nil || res[0].Err != nil {
			t.Fatalf("dead-letter %s: %v, %v", k, res, err)
		}
	}
	var got []string
	for after := ""; ; {
		page, err := f.s.ListDead(f.ctx, outbox.ListDeadParams{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if r.State != outbox.StateDead {
				t.Errorf("ListDead returned %s in state %s", r.DispatchKey, r.State)
			}
			got = append(got, r.DispatchKey)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].DispatchKey
	}
	if want := "B0 a1 a2 b1 c1"; strings.Join(got, " ") != want { // bytes: upper case first
		t.Errorf("ListDead pages = %v, want %s", got, want)
	}
	if page, err := f.s.ListDead(f.ctx, outbox.ListDeadParams{Namespace: "a"}); err != nil || len(page) != 2 || page[0].DispatchKey != "a1" {
		t.Errorf("ListDead(namespace a) = %v, %v", page, err)
	}
	if n, err := f.s.Requeue(f.ctx, []string{"a1", "alive", "nobody"}); err != nil || n != 1 {
		t.Errorf("Requeue(a1, alive, nobody) = %d, %v; want 1", n, err)
	}
	if r := f.get("a1"); r.State != outbox.StatePending || r.Attempts != 0 || !r.RunAt.Equal(f.now) || !r.FinishedAt.IsZero() {
		t.Errorf("requeued row = %+v, want pending now with no attempts", r)
	}
	if rows := f.claimAll("a", "q"); len(rows) != 2 {
		t.Errorf("claim after requeue = %d rows, want a1 and alive", len(rows))
	}
	// Dead at +1s b1, +2s a2, (+3s a1 requeued), +4s c1, +5s B0.
	start := f.now.Add(-5 * time.Second)
	if n, err := f.s.PurgeDead(f.ctx, start.Add(4*time.Second), 10); err != nil || n != 2 {
		t.Errorf("PurgeDead(before +4s) = %d, %v; want b1 and a2", n, err)
	}
	for k, want := range map[string]bool{"b1": false, "a2": false, "c1": true, "B0": true, "a1": true} {
		_, err := f.s.Get(f.ctx, k)
		if found := err == nil; found != want {
			t.Errorf("after PurgeDead: Get(%s) = %v, want found %v", k, err, want)
		}
	}
	if st := f.stats(); st.Dead != 2 || st.Settled != 0 || st.Total != 4 {
		t.Errorf("Stats after PurgeDead = %+v", st)
	}
}

// TestExtendLeases extends live leases only, in one round trip.
func TestExtendLeases(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k1"), message("a", "q", "k2"), message("a", "q", "k3"))
	rows := f.claimAll("a", "q")
	if err := f.s.Settle(f.ctx, rows[2].Lease()); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(outbox.DefaultLease - time.Second)
	before := f.tr.queries.Load()
	leases := []outbox.Lease{rows[0].Lease(), {DispatchKey: "k2", Token: rows[1].Token + 99}, rows[2].Lease()}
	res, err := f.s.ExtendLeases(f.ctx, leases)
	if err != nil || len(res) != 3 {
		t.Fatalf("ExtendLeases = %v, %v", res, err)
	}
	if n := f.tr.queries.Load() - before; n != 1 {
		t.Errorf("ExtendLeases made %d round trips, want 1", n)
	}
	if res[0].Err != nil || res[0].State != outbox.StateClaimed || !res[0].LeaseExpiresAt.Equal(f.now.Add(outbox.DefaultLease)) {
		t.Errorf("extension of a live lease = %+v", res[0])
	}
	for i := 1; i < 3; i++ {
		if !errors.Is(res[i].Err, outbox.ErrLeaseLost) || !res[i].LeaseExpiresAt.IsZero() {
			t.Errorf("extension %d of a lost lease = %+v, want ErrLeaseLost", i, res[i])
		}
	}
	// Past the first lease's end, the extended row is still held.
	f.now = f.now.Add(2 * time.Second)
	if got := f.claimAll("a", "q"); len(got) != 1 || got[0].DispatchKey != "k2" {
		t.Errorf("claim after extension = %v, want only k2, whose lease ran out", got)
	}
	if err := f.s.Settle(f.ctx, rows[0].Lease()); err != nil {
		t.Errorf("Settle with an extended lease: %v", err)
	}
	// Expired leases are not revived.
	f.now = f.now.Add(outbox.DefaultLease)
	if res, err := f.s.ExtendLeases(f.ctx, []outbox.Lease{rows[1].Lease()}); err != nil || !errors.Is(res[0].Err, outbox.ErrLeaseLost) {
		t.Errorf("extension of an expired lease = %v, %v", res, err)
	}
}

// TestRunAt: a scheduled row is counted and claimed only from its RunAt.
func TestRunAt(t *testing.T) {
	f := newFixture(t)
	later := message("a", "q", "later")
	later.RunAt = f.now.Add(time.Hour)
	past := message("a", "q", "past")
	past.RunAt = f.now.Add(-time.Hour)
	f.enqueue(later, past)
	if r := f.get("later"); !r.RunAt.Equal(later.RunAt) || !r.EnqueuedAt.Equal(f.now) {
		t.Errorf("scheduled row = %+v, want RunAt %v", r, later.RunAt)
	}
	if c, err := claimerOf(f.s).CountPendingOutboxRows(f.ctx, f.all, 10); err != nil || len(c) != 1 || c[0].Count != 1 {
		t.Errorf("pending count before RunAt = %v, %v; want the past row only", c, err)
	}
	rows := f.claimAll("a", "q")
	if len(rows) != 1 || rows[0].DispatchKey != "past" {
		t.Fatalf("claim before RunAt = %v, want past only", rows)
	}
	if st := f.stats(); st.Scheduled != 1 || st.Claimed != 1 {
		t.Errorf("Stats before RunAt = %+v", st)
	}
	if err := f.s.Settle(f.ctx, rows[0].Lease()); err != nil {
		t.Fatal(err)
	}
	f.now = later.RunAt
	if rows := f.claimAll("a", "q"); len(rows) != 1 || rows[0].DispatchKey != "later" {
		t.Errorf("claim at RunAt = %v, want later", rows)
	}
}

// TestEnqueueLimits: messages over the shared limits are refused whole,
// typed, before any round trip; nothing is written.
func TestEnqueueLimits(t *testing.T) {
	f := newFixture(t)
	for i, bad := range []outbox.Message{
		message("a", "q", strings.Repeat("k", outbox.MaxDispatchKeyBytes+1)),
		message(strings.Repeat("n", outbox.MaxNamespaceBytes+1), "q", "k"),
		message("a", strings.Repeat("q", outbox.MaxTaskQueueBytes+1), "k"),
		{DispatchKey: "k", Namespace: "a", Payload: make([]byte, outbox.MaxPayloadBytes+1)},
		{DispatchKey: "k", Namespace: "a", MaxAttempts: -1},
	} {
		before := f.tr.queries.Load()
		n, err := f.s.Enqueue(f.ctx, []outbox.Message{message("a", "q", "fine"), bad})
		var me *outbox.MessageError
		if n != 0 || !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &me) || me.Index != 1 {
			t.Errorf("step %d: Enqueue = %d, %v; want a *MessageError at index 1", i, n, err)
		}
		if trips := f.tr.queries.Load() - before; trips != 0 {
			t.Errorf("step %d: a refused batch made %d round trips", i, trips)
		}
	}
	if st := f.stats(); st.Total != 0 {
		t.Errorf("after refused batches: %+v, want an empty outbox", st)
	}
	// At the limits exactly, PostgreSQL stores the row (no B-tree error).
	at := message(strings.Repeat("n", outbox.MaxNamespaceBytes), strings.Repeat("q", outbox.MaxTaskQueueBytes), strings.Repeat("é", outbox.MaxDispatchKeyBytes/2))
	if n, err := f.s.Enqueue(f.ctx, []outbox.Message{at}); err != nil || n != 1 {
		t.Errorf("Enqueue at the limits = %d, %v", n, err)
	}
}

// TestConcurrentExtendsDoNotDeadlock: a dispatcher's heartbeat extends
// leases while its completer handles the same rows, in any order; the
// statements lock rows in dispatch-key order whatever their plans, so two
// calls over the same rows never deadlock (PostgreSQL would abort one with
// SQLSTATE 40P01). The two callers run on stores of their own over the
// same schema, whose connections plan differently: once the table is
// ANALYZEd, PostgreSQL's generic plan for a small table is a hash join
// over the table's physical order, its custom plan one over the sorted
// entries. When the lock order was the plan's, these two orders deadlocked
// in most runs of this test.
func TestConcurrentExtendsDoNotDeadlock(t *testing.T) {
	f := newFixture(t)
	var msgs []outbox.Message
	for i := 0; i < 40; i++ {
		msgs = append(msgs, message("a", "q", fmt.Sprintf("k%02d", i)))
	}
	f.enqueue(msgs...)
	rows := f.claimAll("a", "q")
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+pgx.Identifier{f.schema}.Sanitize()+".outbox"); err != nil {
		t.Fatal(err)
	}
	up := make([]outbox.Lease, len(rows))
	down := make([]outbox.Lease, len(rows))
	for i, r := range rows {
		up[i], down[len(rows)-1-i] = r.Lease(), r.Lease()
	}
	errs := make(chan error, 2)
	for i, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		s, err := pgstore.New(f.ctx, newPool(t, nil, 1, "plan_cache_mode", mode), pgstore.Options{Schema: f.schema, Now: func() time.Time { return f.now }})
		if err != nil {
			t.Fatal(err)
		}
		leases := [][]outbox.Lease{up, down}[i]
		go func() {
			for i := 0; i < 100; i++ {
				res, err := s.ExtendLeases(f.ctx, leases)
				if err == nil {
					for _, r := range res {
						if err == nil {
							err = r.Err
						}
					}
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", mode, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Errorf("concurrent ExtendLeases in opposite orders: %v", err)
		}
	}
	completions := make([]outbox.Completion, len(down))
	for i, l := range down {
		completions[i] = outbox.Completion{Lease: l, Outcome: outbox.Settle}
	}
	if res, err := f.s.Complete(f.ctx, completions); err != nil || res[0].Err != nil {
		t.Errorf("Complete after the extensions = %v, %v", res, err)
	}
}
