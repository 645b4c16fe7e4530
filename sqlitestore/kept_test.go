package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// keptFixture is TestKeptCountsMatchFullCounts's state: a store that keeps
// counts (kept), another Store on the same file that reads every count
// (ref, the reference, which also writes as another connection would), an
// application's database on the file (app, for EnqueueTx), the clock both
// stores read, and the leases kept's claims hold.
type keptFixture struct {
	ctx       context.Context
	kept, ref *Store
	app       *sql.DB
	now       time.Time
	leases    []outbox.Row
	keys      int
	shards    []backpressure.OwnedShardFraction
	f         backpressure.OwnedShardFraction // the fraction of this step
	reads     int
}

var keptRoutes = []backpressure.Route{{Namespace: "a", TaskQueue: "q0"}, {Namespace: "a", TaskQueue: "q1"}, {Namespace: "b", TaskQueue: "q0"}, {Namespace: "c", TaskQueue: "q1"}}

// errRollBack is what a sweep transaction's fn returns to roll it back.
var errRollBack = errors.New("roll back")

// TestKeptCountsMatchFullCounts drives a store that keeps its counts, on
// a real file, through random histories — enqueues of its own (some
// delayed, some duplicates), another Store's enqueues, claims and
// completions on the same file, EnqueueTx in an application's transaction
// committed or rolled back, scoped, unscoped and window claims, sweep
// transactions that claim and commit or roll back, completions of every
// outcome (some of lost leases), lease extensions, requeues, a failed
// statement, a change of owned shards, and time passing across leases and
// run-ats on an injected clock — and after every step checks each of its
// counts (claimed, pending at several caps, full and window
// CountOutboxRows, and the same in a sweep transaction) against the other
// Store, which reads every count. It also checks that counts were answered
// from the kept values.
func TestKeptCountsMatchFullCounts(t *testing.T) {
	dir := t.TempDir()
	var reads int
	var hits int64
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		kf := openKeptFixture(rt, t.Context(), filepath.Join(dir, fmt.Sprintf("outbox%d.db", run)))
		defer kf.close()
		for step := range 40 {
			kf.step(rt)
			kf.check(rt, step)
		}
		reads += kf.reads
		hits += kf.kept.keptSt.hits.Load()
	})
	if hits == 0 {
		t.Errorf("kept counts answered none of %d counts", reads)
	}
	t.Logf("kept counts answered %d of %d counts without reading them", hits, reads)
}

func openKeptFixture(rt *rapid.T, ctx context.Context, path string) *keptFixture {
	kf := &keptFixture{ctx: ctx, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return kf.now }
	var err error
	if kf.ref, err = Open(ctx, path, Options{ShardCount: 8, Now: clock, Lease: time.Second, SyncNormal: true}); err != nil {
		rt.Fatal(err)
	}
	if kf.kept, err = Open(ctx, path, Options{Now: clock, Lease: time.Second, SyncNormal: true, RecountInterval: time.Second}); err != nil {
		rt.Fatal(err)
	}
	if kf.app, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"); err != nil {
		rt.Fatal(err)
	}
	all, _ := backpressure.AllShards(8)
	half, _ := backpressure.NewOwnedShardFraction([]int{0, 2, 3, 7}, 8)
	kf.shards, kf.f = []backpressure.OwnedShardFraction{all, half}, all
	return kf
}

func (kf *keptFixture) close() {
	_ = kf.kept.Close()
	_ = kf.ref.Close()
	_ = kf.app.Close()
}

// step takes one random step of a history.
func (kf *keptFixture) step(rt *rapid.T) {
	switch rapid.IntRange(0, 12).Draw(rt, "action") {
	case 0, 1:
		kf.enqueue(rt, kf.kept)
	case 2:
		kf.enqueue(rt, kf.ref)
	case 3:
		kf.enqueueTx(rt)
	case 4, 5:
		kf.claimScoped(rt)
	case 6:
		kf.claimOther(rt)
	case 7:
		kf.sweepTx(rt)
	case 8, 9:
		kf.complete(rt)
	case 10:
		kf.extendOrRequeue(rt)
	case 11:
		kf.now = kf.now.Add(time.Duration(rapid.SampledFrom([]int{10, 300, 1100, 2500}).Draw(rt, "ms")) * time.Millisecond)
	default:
		kf.f = rapid.SampledFrom(kf.shards).Draw(rt, "shards")
		if rapid.Bool().Draw(rt, "fault") {
			kf.kept.failNth.Store(1) // the next statement fails
			_, err := kf.kept.Claimer().ClaimOutboxRowsScoped(kf.ctx, kf.f, []backpressure.ScopedClaim{{Route: keptRoutes[0], Limit: 1}})
			if err == nil {
				rt.Fatal("a claim with an injected fault succeeded")
			}
			kf.kept.failNth.Store(0)
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
		m := outbox.Message{DispatchKey: key, Namespace: r.Namespace, TaskQueue: r.TaskQueue, Payload: []byte("p")}
		if rapid.IntRange(0, 3).Draw(rt, "later") == 0 {
			m.RunAt = kf.now.Add(time.Duration(rapid.IntRange(1, 2000).Draw(rt, "runAtMs")) * time.Millisecond)
		}
		batch = append(batch, m)
	}
	return batch
}

func (kf *keptFixture) enqueue(rt *rapid.T, s *Store) {
	if _, err := s.Enqueue(kf.ctx, kf.messages(rt)); err != nil {
		rt.Fatal(err)
	}
}

// enqueueTx enqueues through the kept store in an application's
// transaction on its own connection, which commits or rolls back.
func (kf *keptFixture) enqueueTx(rt *rapid.T) {
	tx, err := kf.app.BeginTx(kf.ctx, nil)
	if err != nil {
		rt.Fatal(err)
	}
	if _, err := kf.kept.EnqueueTx(kf.ctx, tx, kf.messages(rt)); err != nil {
		rt.Fatal(err)
	}
	kf.compare(rt, -1, kf.kept.Claimer().(counter), kf.ref.Claimer().(counter)) // while tx holds the write lock
	if rapid.Bool().Draw(rt, "rollback") {
		err = tx.Rollback()
	} else {
		err = tx.Commit()
	}
	if err != nil {
		rt.Fatal(err)
	}
}

func (kf *keptFixture) drawClaims(rt *rapid.T) []backpressure.ScopedClaim {
	var claims []backpressure.ScopedClaim
	for _, r := range keptRoutes {
		if rapid.Bool().Draw(rt, "route") {
			claims = append(claims, backpressure.ScopedClaim{Route: r, Limit: rapid.IntRange(1, 3).Draw(rt, "limit")})
		}
	}
	return claims
}

func (kf *keptFixture) claimScoped(rt *rapid.T) {
	rows, err := kf.kept.Claimer().ClaimOutboxRowsScoped(kf.ctx, kf.f, kf.drawClaims(rt))
	if err != nil {
		rt.Fatal(err)
	}
	kf.leases = append(kf.leases, rows...)
}

// claimOther makes an unscoped or a window claim, by the kept store or,
// now and then, by the other store (which the kept store cannot see).
func (kf *keptFixture) claimOther(rt *rapid.T) {
	s := kf.kept
	if rapid.IntRange(0, 3).Draw(rt, "other") == 0 {
		s = kf.ref
	}
	var (
		rows []outbox.Row
		err  error
	)
	if rapid.Bool().Draw(rt, "unscoped") {
		rows, err = (*claimer)(s).ClaimOutboxRowsUnscoped(kf.ctx, kf.f, rapid.IntRange(1, 3).Draw(rt, "limit"))
	} else {
		w := backpressure.CountParams{Namespaces: rapid.IntRange(1, 2).Draw(rt, "window"), After: rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(rt, "after")}
		rows, _, err = (*claimer)(s).ClaimOutboxWindow(kf.ctx, kf.f, w, []string{}, map[string]string{})
	}
	if err != nil {
		rt.Fatal(err)
	}
	kf.leases = append(kf.leases, rows...)
}

// sweepTx counts and claims in a sweep transaction of the kept store,
// which commits or rolls back.
func (kf *keptFixture) sweepTx(rt *rapid.T) {
	back := rapid.Bool().Draw(rt, "rollback")
	var got []outbox.Row
	err := kf.kept.Claimer().(backpressure.TxSweeper[outbox.Row]).InSweepTx(kf.ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
		if _, err := tx.CountClaimedOutboxRows(kf.ctx, kf.f); err != nil {
			return err
		}
		if _, err := tx.CountPendingOutboxRows(kf.ctx, kf.f, rapid.IntRange(1, 4).Draw(rt, "cap")); err != nil {
			return err
		}
		rows, err := tx.ClaimOutboxRowsScoped(kf.ctx, kf.f, kf.drawClaims(rt))
		if err != nil {
			return err
		}
		got = rows
		if back {
			return errRollBack
		}
		return nil
	})
	switch {
	case back && !errors.Is(err, errRollBack):
		rt.Fatalf("InSweepTx = %v, want the rollback", err)
	case !back && err != nil:
		rt.Fatal(err)
	case !back:
		kf.leases = append(kf.leases, got...)
	}
}

// complete completes some of the leases held, with every outcome, through
// the kept store or now and then the other; some leases have expired, or
// were claimed again since.
func (kf *keptFixture) complete(rt *rapid.T) {
	if len(kf.leases) == 0 {
		return
	}
	var cs []outbox.Completion
	keys := map[string]bool{}
	for _, r := range rapid.Permutation(kf.leases).Draw(rt, "leases")[:rapid.IntRange(1, len(kf.leases)).Draw(rt, "k")] {
		if keys[r.DispatchKey] {
			continue
		}
		keys[r.DispatchKey] = true
		delay := time.Duration(rapid.SampledFrom([]int{0, 0, 500}).Draw(rt, "delayMs")) * time.Millisecond
		cs = append(cs, rapid.SampledFrom([]outbox.Completion{
			outbox.SettleRow(r), outbox.RetryRow(r, delay, fmt.Errorf("boom")), outbox.DeadLetterRow(r, fmt.Errorf("dead")), outbox.SnoozeRow(r, delay, nil),
		}).Draw(rt, "outcome"))
	}
	s := kf.kept
	if rapid.IntRange(0, 4).Draw(rt, "other") == 0 {
		s = kf.ref
	}
	if _, err := s.Complete(kf.ctx, cs); err != nil {
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
	if _, err := kf.kept.Requeue(kf.ctx, keys); err != nil {
		rt.Fatal(err)
	}
}

// counter is the counts the check compares: the Claimer's, or a sweep
// transaction's view's.
type counter interface {
	CountClaimedOutboxRows(context.Context, backpressure.OwnedShardFraction) (map[string]int, error)
	CountPendingOutboxRows(context.Context, backpressure.OwnedShardFraction, int) ([]backpressure.RouteCount, error)
	CountOutboxRows(context.Context, backpressure.OwnedShardFraction, backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error)
}

// check compares every count of the kept store with the reference's, on
// the Claimer or, now and then, in a sweep transaction that claims
// nothing.
func (kf *keptFixture) check(rt *rapid.T, step int) {
	r := kf.ref.Claimer().(counter)
	if !rapid.Bool().Draw(rt, "inTx") {
		kf.compare(rt, step, kf.kept.Claimer().(counter), r)
		return
	}
	err := kf.kept.Claimer().(backpressure.TxSweeper[outbox.Row]).InSweepTx(kf.ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
		kf.compare(rt, step, tx.(counter), r)
		return errRollBack
	})
	if !errors.Is(err, errRollBack) {
		rt.Fatalf("InSweepTx = %v", err)
	}
}

func (kf *keptFixture) compare(rt *rapid.T, step int, k, r counter) {
	kf.same(rt, step, "CountClaimedOutboxRows", func(c counter) (any, error) {
		m, err := c.CountClaimedOutboxRows(kf.ctx, kf.f)
		return nonEmpty(m), err
	}, k, r)
	for _, cp := range rapid.SliceOfN(rapid.IntRange(1, 4), 1, 3).Draw(rt, "caps") {
		kf.same(rt, step, fmt.Sprintf("CountPendingOutboxRows(cap %d)", cp), func(c counter) (any, error) {
			return c.CountPendingOutboxRows(kf.ctx, kf.f, cp)
		}, k, r)
	}
	p := backpressure.CountParams{
		CapPerRoute: rapid.IntRange(1, 4).Draw(rt, "cap"),
		Namespaces:  rapid.IntRange(0, 2).Draw(rt, "namespaces"),
		After:       rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(rt, "after"),
	}
	kf.same(rt, step, fmt.Sprintf("CountOutboxRows(%+v)", p), func(c counter) (any, error) {
		_, pending, err := c.CountOutboxRows(kf.ctx, kf.f, p)
		return pending, err
	}, k, r)
}

// same runs count on the kept store's counter k and the reference's r and
// fails rt if they differ.
func (kf *keptFixture) same(rt *rapid.T, step int, what string, count func(counter) (any, error), k, r counter) {
	got, err := count(k)
	if err != nil {
		rt.Fatalf("step %d: kept %s: %v", step, what, err)
	}
	kf.reads++
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

// TestKeptCountsInsideSweepTx counts on the Store (not the view) inside
// InSweepTx's fn, which holds the writer connection the kept counts check
// on: the counts must be read, as without kept counts, not wait for the
// transaction that waits for them.
func TestKeptCountsInsideSweepTx(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Options{RecountInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "a", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	c := s.Claimer().(counter)
	err = s.Claimer().(backpressure.TxSweeper[outbox.Row]).InSweepTx(ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
		if _, err := tx.ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "a", TaskQueue: "q"}, Limit: 1}}); err != nil {
			return err
		}
		claimed, err := c.CountClaimedOutboxRows(ctx, all)
		if err != nil || len(claimed) != 0 {
			return fmt.Errorf("CountClaimedOutboxRows inside the sweep = %v, %v; want none (the claim is not committed)", claimed, err)
		}
		pending, err := c.CountPendingOutboxRows(ctx, all, 5)
		if err != nil || len(pending) != 1 || pending[0] != (backpressure.RouteCount{Route: backpressure.Route{Namespace: "a", TaskQueue: "q"}, Count: 1}) {
			return fmt.Errorf("CountPendingOutboxRows inside the sweep = %v, %v; want a/q: 1", pending, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := c.CountClaimedOutboxRows(ctx, all)
	if err != nil || claimed["a"] != 1 {
		t.Fatalf("CountClaimedOutboxRows after the sweep = %v, %v; want a: 1", claimed, err)
	}
}

// TestKeptCountsRefused checks that kept counts are refused where the
// store cannot tell its commits from others' (New) or has nothing to keep
// (ReadOnly), with an *outbox.ArgumentError naming the option.
func TestKeptCountsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name string
		open func() (*Store, error)
	}{
		{"New", func() (*Store, error) { return New(t.Context(), db, Options{RecountInterval: time.Second}) }},
		{"ReadOnly", func() (*Store, error) {
			return Open(t.Context(), path, Options{ReadOnly: true, RecountInterval: time.Second})
		}},
	} {
		s, err := c.open()
		var ae *outbox.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "Options.RecountInterval" {
			if s != nil {
				_ = s.Close()
			}
			t.Errorf("%s with RecountInterval = %v, want an *outbox.ArgumentError for Options.RecountInterval", c.name, err)
		}
	}
}
