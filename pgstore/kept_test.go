package pgstore_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"pgregory.net/rapid"
)

// keptFixture is TestKeptCountsMatchFullCounts's state: a store that keeps
// counts (kept, subscribed, on a traced pool), a store that reads every
// count (ref, the reference), a producer standing for another process, and
// the leases kept's claims hold.
type keptFixture struct {
	*fixture
	kept, ref, producer *pgstore.Store
	woken               <-chan struct{}
	leases              []outbox.Row
	keys                int
	shards              []backpressure.OwnedShardFraction
	f                   backpressure.OwnedShardFraction // the fraction of this step
	reads, hits         int
}

var keptRoutes = []backpressure.Route{{Namespace: "a", TaskQueue: "q0"}, {Namespace: "a", TaskQueue: "q1"}, {Namespace: "b", TaskQueue: "q0"}, {Namespace: "c", TaskQueue: "q1"}}

// TestKeptCountsMatchFullCounts drives a store that keeps its counts
// through random histories — enqueues of its own (some delayed, some
// duplicates), another process's enqueues and EnqueueTx (committed or
// rolled back), another process's enqueue whose notification arrives
// after a count and a claim that may have seen its rows, scoped, unscoped and window claims, completions of every
// outcome (some of lost leases), lease extensions, requeues, a failed
// statement, a change of owned shards, and time passing across leases and
// delays — and after every step checks each of its counts (claimed,
// pending at several caps, full and window CountOutboxRows) against a
// store that reads every count. A step that enqueues waits for the kept
// store's notification, as the contract allows pending counts to lag
// until it arrives. It also checks that counts were answered without a
// round trip.
func TestKeptCountsMatchFullCounts(t *testing.T) {
	base := newFixture(t)
	half, err := backpressure.NewOwnedShardFraction([]int{0, 1, 2, 3, 5, 8, 13, 21, 34}, base.s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return base.now }
	ref, err := pgstore.New(base.ctx, base.pool, pgstore.Options{Schema: base.schema, Now: clock, Lease: time.Second, RecountInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{base.schema}.Sanitize() + ".outbox"
	var reads, hits int
	rapid.Check(t, func(rt *rapid.T) {
		if _, err := adminPool.Exec(base.ctx, "TRUNCATE "+table); err != nil {
			rt.Fatal(err)
		}
		kf := &keptFixture{fixture: base, ref: ref, producer: ref, shards: []backpressure.OwnedShardFraction{base.all, half}, f: base.all}
		kf.kept, err = pgstore.New(base.ctx, base.pool, pgstore.Options{Schema: base.schema, Now: clock, Lease: time.Second, WindowClaims: true, RecountInterval: pgstore.RecommendedRecountInterval})
		if err != nil {
			rt.Fatal(err)
		}
		defer kf.kept.Close()
		if kf.woken, err = kf.kept.Subscribe(base.ctx); err != nil {
			rt.Fatal(err)
		}
		for step := range 40 {
			kf.step(rt, step)
			kf.check(rt, step)
		}
		reads, hits = reads+kf.reads, hits+kf.hits
	})
	if hits == 0 {
		t.Errorf("kept counts answered none of %d counts without a round trip", reads)
	}
	t.Logf("kept counts answered %d of %d counts without a round trip", hits, reads)
}

// step takes one random step of a history.
func (kf *keptFixture) step(rt *rapid.T, step int) {
	switch rapid.IntRange(0, 12).Draw(rt, "action") {
	case 12:
		kf.raced(rt)
	case 0, 1:
		kf.enqueue(rt, kf.kept)
	case 2:
		kf.enqueue(rt, kf.producer)
	case 3:
		kf.enqueueTx(rt)
	case 4, 5:
		kf.claimScoped(rt)
	case 6:
		kf.claimOther(rt)
	case 7, 8:
		kf.complete(rt)
	case 9:
		kf.extendOrRequeue(rt)
	case 10:
		kf.now = kf.now.Add(time.Duration(rapid.SampledFrom([]int{10, 300, 1100, 2500}).Draw(rt, "ms")) * time.Millisecond)
	default:
		kf.f = rapid.SampledFrom(kf.shards).Draw(rt, "shards")
		if rapid.Bool().Draw(rt, "fault") {
			kf.tr.arm(1) // the next statement fails before it is sent
			_, err := claimerOf(kf.kept).ClaimOutboxRowsScoped(kf.ctx, kf.f, []backpressure.ScopedClaim{{Route: keptRoutes[0], Limit: 1}})
			if err == nil {
				kf.tr.arm(0) // answered without a statement
			}
		}
	}
}

// messages draws a batch: keys from a small pool (so some are
// duplicates), some with a run-at ahead.
func (kf *keptFixture) messages(rt *rapid.T) []outbox.Message {
	var batch []outbox.Message
	seen := map[string]bool{}
	for range rapid.IntRange(1, 4).Draw(rt, "n") {
		r := rapid.SampledFrom(keptRoutes).Draw(rt, "route")
		key := fmt.Sprintf("k%d", rapid.IntRange(0, kf.keys+2).Draw(rt, "key"))
		if seen[key] {
			continue
		}
		seen[key] = true
		kf.keys++
		m := message(r.Namespace, r.TaskQueue, key)
		if rapid.IntRange(0, 3).Draw(rt, "later") == 0 {
			m.RunAt = kf.now.Add(time.Duration(rapid.IntRange(1, 2000).Draw(rt, "runAtMs")) * time.Millisecond)
		}
		batch = append(batch, m)
	}
	return batch
}

func (kf *keptFixture) enqueue(rt *rapid.T, s *pgstore.Store) {
	n, err := s.Enqueue(kf.ctx, kf.messages(rt))
	if err != nil {
		rt.Fatal(err)
	}
	kf.heard(rt, n)
}

func (kf *keptFixture) enqueueTx(rt *rapid.T) {
	tx, err := kf.pool.Begin(kf.ctx)
	if err != nil {
		rt.Fatal(err)
	}
	n, err := kf.kept.EnqueueTx(kf.ctx, tx, kf.messages(rt))
	if err != nil {
		rt.Fatal(err)
	}
	if rapid.Bool().Draw(rt, "rollback") {
		if err := tx.Rollback(kf.ctx); err != nil {
			rt.Fatal(err)
		}
		return
	}
	if err := tx.Commit(kf.ctx); err != nil {
		rt.Fatal(err)
	}
	kf.heard(rt, n)
}

// raced is another process's enqueue whose notification the kept store
// hears only after it counted (its read may see the rows: the
// notification must not add them again) and claimed (the claim may take
// rows the kept counts have not added yet: the notification must not add
// those either).
func (kf *keptFixture) raced(rt *rapid.T) {
	n, err := kf.producer.Enqueue(kf.ctx, kf.messages(rt))
	if err != nil {
		rt.Fatal(err)
	}
	if rapid.Bool().Draw(rt, "count first") {
		if _, err := claimerOf(kf.kept).CountPendingOutboxRows(kf.ctx, kf.f, rapid.SampledFrom([]int{1, 3, 100}).Draw(rt, "cap")); err != nil {
			rt.Fatal(err)
		}
	}
	if rapid.Bool().Draw(rt, "claim first") {
		kf.claimScoped(rt)
	}
	kf.heard(rt, n)
}

// heard waits for the kept store's wake-up after a commit that inserted n
// rows: its notification has then been heard.
func (kf *keptFixture) heard(rt *rapid.T, n int) {
	if n == 0 {
		return
	}
	select {
	case <-kf.woken:
	case <-time.After(10 * time.Second):
		rt.Fatal("no notification after an enqueue")
	}
}

func (kf *keptFixture) claimScoped(rt *rapid.T) {
	var claims []backpressure.ScopedClaim
	for _, r := range keptRoutes {
		if rapid.Bool().Draw(rt, "route") {
			claims = append(claims, backpressure.ScopedClaim{Route: r, Limit: rapid.IntRange(1, 3).Draw(rt, "limit")})
		}
	}
	rows, err := claimerOf(kf.kept).ClaimOutboxRowsScoped(kf.ctx, kf.f, claims)
	if err != nil {
		rt.Fatal(err)
	}
	kf.leases = append(kf.leases, rows...)
}

// claimOther makes an unscoped or a window claim.
func (kf *keptFixture) claimOther(rt *rapid.T) {
	c := claimerOf(kf.kept)
	var (
		rows []outbox.Row
		err  error
	)
	if rapid.Bool().Draw(rt, "unscoped") {
		rows, err = c.ClaimOutboxRowsUnscoped(kf.ctx, kf.f, rapid.IntRange(1, 3).Draw(rt, "limit"))
	} else {
		wc := kf.kept.Claimer().(interface {
			ClaimOutboxWindow(context.Context, backpressure.OwnedShardFraction, backpressure.CountParams, []string, map[string]string) ([]outbox.Row, []backpressure.RouteCount, error)
		})
		w := backpressure.CountParams{Namespaces: rapid.IntRange(1, 2).Draw(rt, "window"), After: rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(rt, "after")}
		rows, _, err = wc.ClaimOutboxWindow(kf.ctx, kf.f, w, []string{}, map[string]string{})
	}
	if err != nil {
		rt.Fatal(err)
	}
	kf.leases = append(kf.leases, rows...)
}

// complete completes some of the leases held, with every outcome; some
// leases have expired, or were claimed again since.
func (kf *keptFixture) complete(rt *rapid.T) {
	if len(kf.leases) == 0 {
		return
	}
	var cs []outbox.Completion
	keys := map[string]bool{}
	for _, i := range rapid.Permutation(kf.leases).Draw(rt, "leases")[:rapid.IntRange(1, len(kf.leases)).Draw(rt, "k")] {
		if keys[i.DispatchKey] {
			continue
		}
		keys[i.DispatchKey] = true
		delay := time.Duration(rapid.SampledFrom([]int{0, 0, 500}).Draw(rt, "delayMs")) * time.Millisecond
		switch rapid.IntRange(0, 3).Draw(rt, "outcome") {
		case 0:
			cs = append(cs, outbox.SettleRow(i))
		case 1:
			cs = append(cs, outbox.RetryRow(i, delay, fmt.Errorf("boom")))
		case 2:
			cs = append(cs, outbox.DeadLetterRow(i, fmt.Errorf("dead")))
		default:
			cs = append(cs, outbox.SnoozeRow(i, delay, nil))
		}
	}
	if _, err := kf.kept.Complete(kf.ctx, cs); err != nil {
		rt.Fatal(err)
	}
	kf.leases = slices.DeleteFunc(kf.leases, func(r outbox.Row) bool { return keys[r.DispatchKey] })
}

func (kf *keptFixture) extendOrRequeue(rt *rapid.T) {
	if rapid.Bool().Draw(rt, "extend") {
		var ls []outbox.Lease
		seen := map[string]bool{}
		for _, r := range slices.Backward(kf.leases) {
			if !seen[r.DispatchKey] {
				seen[r.DispatchKey] = true
				ls = append(ls, r.Lease())
			}
		}
		if _, err := kf.kept.ExtendLeases(kf.ctx, ls); err != nil {
			rt.Fatal(err)
		}
		return
	}
	var keys []string
	for i := range kf.keys {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	n, err := kf.kept.Requeue(kf.ctx, keys)
	if err != nil {
		rt.Fatal(err)
	}
	kf.heard(rt, n)
}

// check compares every count of the kept store with the reference's.
func (kf *keptFixture) check(rt *rapid.T, step int) {
	k, r := claimerOf(kf.kept), claimerOf(kf.ref)
	kf.compare(rt, step, "CountClaimedOutboxRows", func(c planner) (any, error) {
		m, err := c.CountClaimedOutboxRows(kf.ctx, kf.f)
		return nonEmpty(m), err
	}, k, r)
	for _, cp := range rapid.SliceOfN(rapid.IntRange(1, 4), 1, 3).Draw(rt, "caps") {
		kf.compare(rt, step, fmt.Sprintf("CountPendingOutboxRows(cap %d)", cp), func(c planner) (any, error) {
			return c.CountPendingOutboxRows(kf.ctx, kf.f, cp)
		}, k, r)
	}
	p := backpressure.CountParams{
		CapPerRoute: rapid.IntRange(1, 4).Draw(rt, "cap"),
		Namespaces:  rapid.IntRange(0, 2).Draw(rt, "namespaces"),
		After:       rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(rt, "after"),
		Claimed:     rapid.Bool().Draw(rt, "claimed"),
	}
	kf.compare(rt, step, fmt.Sprintf("CountOutboxRows(%+v)", p), func(c planner) (any, error) {
		claimed, pending, err := c.CountOutboxRows(kf.ctx, kf.f, p)
		return fmt.Sprint(nonEmpty(claimed), pending), err
	}, k, r)
}

// compare runs count on the kept store's claimer k and the reference's r
// and fails rt if they differ; it counts the kept answers that made no
// round trip.
func (kf *keptFixture) compare(rt *rapid.T, step int, what string, count func(planner) (any, error), k, r planner) {
	before := kf.tr.queries.Load()
	got, err := count(k)
	if err != nil {
		rt.Fatalf("step %d: kept %s: %v", step, what, err)
	}
	kf.reads++
	if kf.tr.queries.Load() == before {
		kf.hits++
	}
	want, err := count(r)
	if err != nil {
		rt.Fatalf("step %d: reference %s: %v", step, what, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		rt.Fatalf("step %d at %v on %v: kept %s = %v, want %v", step, kf.now.Format("15:04:05.000"), kf.f, what, got, want)
	}
}

// nonEmpty is m without its zero counts, sorted for printing.
func nonEmpty(m map[string]int) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			out = append(out, fmt.Sprintf("%s:%d", k, m[k]))
		}
	}
	return out
}
