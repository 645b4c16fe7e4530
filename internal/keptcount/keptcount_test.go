package keptcount_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/keptcount"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// kept is a store that keeps its counts, as pgstore does, over the
// reference store m: it answers from k where k knows, else reads m (the
// pending counts with NextDue's instant as every route's due time, which
// is early, as a read's may be) and hands the read to k.
type kept struct {
	m      *memstore.Store
	k      *keptcount.Counts
	now    time.Time
	leases []outbox.Row
	keys   int
	hits   int
}

var routes = []backpressure.Route{{Namespace: "a", TaskQueue: "q0"}, {Namespace: "a", TaskQueue: "q1"}, {Namespace: "b", TaskQueue: "q0"}, {Namespace: "c", TaskQueue: "q1"}}

// TestCountsMatchReference drives a reference store through random
// histories — enqueues (some delayed, some duplicates), scoped and window
// claims, completions of every outcome (some of lost leases), requeues,
// failed changes, reads overtaken by a change, listening lost and
// regained, owned shards changed, time passing across leases and delays —
// reporting each step to a Counts as a store does, and after every step
// checks every answer the Counts gives against the reference's full
// counts: claimed, pending at several caps, and windows.
func TestCountsMatchReference(t *testing.T) {
	hits := 0
	rapid.Check(t, func(rt *rapid.T) {
		s := &kept{k: keptcount.New(10 * time.Second), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		var err error
		if s.m, err = memstore.New(memstore.Options{Now: func() time.Time { return s.now }, ShardCount: 8, Lease: time.Second}); err != nil {
			rt.Fatal(err)
		}
		all, _ := backpressure.AllShards(8)
		half, _ := backpressure.NewOwnedShardFraction([]int{0, 2, 3, 7}, 8)
		f := all
		s.k.Listening(true)
		for step := range 50 {
			if g, ok := s.step(rt); ok {
				f = rapid.SampledFrom([]backpressure.OwnedShardFraction{all, half, g}).Draw(rt, "shards")
			}
			s.check(rt, step, f)
		}
		hits += s.hits
	})
	if hits == 0 {
		t.Error("the kept counts never answered")
	}
}

// step takes one random step; ok asks for a change of owned shards (g is
// one more choice).
func (s *kept) step(rt *rapid.T) (g backpressure.OwnedShardFraction, ok bool) {
	ctx := context.Background()
	all, _ := backpressure.AllShards(8)
	switch rapid.IntRange(0, 10).Draw(rt, "action") {
	case 0, 1:
		s.enqueue(rt)
	case 2, 3:
		var claims []backpressure.ScopedClaim
		for _, r := range routes {
			if rapid.Bool().Draw(rt, "route") {
				claims = append(claims, backpressure.ScopedClaim{Route: r, Limit: rapid.IntRange(1, 3).Draw(rt, "limit")})
			}
		}
		s.claim(rt, func() ([]outbox.Row, error) { return s.m.ClaimOutboxRowsScoped(ctx, all, claims) })
	case 4:
		w := backpressure.CountParams{Namespaces: rapid.IntRange(1, 2).Draw(rt, "window"), After: rapid.SampledFrom([]string{"", "a", "b"}).Draw(rt, "after")}
		s.claim(rt, func() ([]outbox.Row, error) {
			rows, _, err := s.m.ClaimOutboxWindow(ctx, all, w, []string{}, map[string]string{})
			return rows, err
		})
	case 5, 6:
		s.complete(rt)
	case 7:
		s.interfere(rt, all)
	case 8:
		s.now = s.now.Add(time.Duration(rapid.SampledFrom([]int{5, 300, 1100, 2500}).Draw(rt, "ms")) * time.Millisecond)
	case 9:
		on := rapid.Bool().Draw(rt, "listening")
		s.k.Listening(on)
		if !on {
			s.k.Listening(true) // heard again: what was missed is forgotten
		}
	default:
		return all, true
	}
	return backpressure.OwnedShardFraction{}, false
}

func (s *kept) enqueue(rt *rapid.T) {
	var batch []outbox.Message
	names := map[string]bool{}
	for range rapid.IntRange(1, 4).Draw(rt, "n") {
		r := rapid.SampledFrom(routes).Draw(rt, "route")
		m := outbox.Message{DispatchKey: fmt.Sprintf("k%d", rapid.IntRange(0, s.keys+2).Draw(rt, "key")), Namespace: r.Namespace, TaskQueue: r.TaskQueue}
		if slices.ContainsFunc(batch, func(b outbox.Message) bool { return b.DispatchKey == m.DispatchKey }) {
			continue
		}
		if rapid.IntRange(0, 3).Draw(rt, "later") == 0 {
			m.RunAt = s.now.Add(time.Duration(rapid.IntRange(1, 2000).Draw(rt, "runAtMs")) * time.Millisecond)
		}
		s.keys++
		names[m.Namespace] = true
		batch = append(batch, m)
	}
	if _, err := s.m.Enqueue(context.Background(), batch); err != nil {
		rt.Fatal(err)
	}
	s.k.Touched(slices.Sorted(maps.Keys(names))) // the store's own enqueue, or the notification of another's
}

func (s *kept) claim(rt *rapid.T, claim func() ([]outbox.Row, error)) {
	ch := s.k.Begin()
	rows, err := claim()
	if err != nil {
		rt.Fatal(err)
	}
	ch.Claimed(rows)
	s.leases = append(s.leases, rows...)
}

func (s *kept) complete(rt *rapid.T) {
	if len(s.leases) == 0 {
		return
	}
	var cs []outbox.Completion
	keys := map[string]bool{}
	done := map[outbox.Lease]bool{}
	for _, r := range rapid.Permutation(s.leases).Draw(rt, "leases")[:rapid.IntRange(1, len(s.leases)).Draw(rt, "k")] {
		if keys[r.DispatchKey] {
			continue
		}
		keys[r.DispatchKey], done[r.Lease()] = true, true
		delay := time.Duration(rapid.SampledFrom([]int{0, 0, 500}).Draw(rt, "delayMs")) * time.Millisecond
		cs = append(cs, rapid.SampledFrom([]outbox.Completion{
			outbox.SettleRow(r), outbox.RetryRow(r, delay, fmt.Errorf("boom")), outbox.DeadLetterRow(r, fmt.Errorf("dead")), outbox.SnoozeRow(r, delay, nil),
		}).Draw(rt, "outcome"))
	}
	ch, at := s.k.Begin(), s.now
	results, err := s.m.Complete(context.Background(), cs)
	if err != nil {
		rt.Fatal(err)
	}
	ch.Completed(cs, results, at)
	s.leases = slices.DeleteFunc(s.leases, func(r outbox.Row) bool { return done[r.Lease()] })
}

// interfere makes a change the Counts must not miss: a requeue, a change
// whose outcome is lost, or a read overtaken by a claim.
func (s *kept) interfere(rt *rapid.T, all backpressure.OwnedShardFraction) {
	ctx := context.Background()
	switch rapid.IntRange(0, 2).Draw(rt, "interference") {
	case 0:
		var keys []string
		for i := range s.keys {
			keys = append(keys, fmt.Sprintf("k%d", i))
		}
		if _, err := s.m.Requeue(ctx, keys); err != nil {
			rt.Fatal(err)
		}
		s.k.Touched(nil)
	case 1:
		ch := s.k.Begin()
		rows, err := s.m.ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Route: routes[0], Limit: 1}})
		if err != nil {
			rt.Fatal(err)
		}
		s.leases = append(s.leases, rows...)
		ch.Failed() // its rows are claimed, but the store does not know
	default:
		t := s.k.Ticket(s.now)
		claimed, read := s.read(rt, all, 3, nil)
		s.claim(rt, func() ([]outbox.Row, error) {
			return s.m.ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Route: routes[2], Limit: 2}})
		})
		s.k.Refreshed(t, keptcount.Snapshot{}, all, claimed, nil, read, 3) // before the claim: must not be kept
	}
}

// read reads the claimed counts and the pending counts of names (nil:
// all) at capPerRoute from the reference.
func (s *kept) read(rt *rapid.T, f backpressure.OwnedShardFraction, capPerRoute int, names []string) (map[string]int, []keptcount.RouteRead) {
	ctx := context.Background()
	claimed, err := s.m.CountClaimedOutboxRows(ctx, f)
	if err != nil {
		rt.Fatal(err)
	}
	pending, err := s.m.CountPendingOutboxRows(ctx, f, capPerRoute)
	if err != nil {
		rt.Fatal(err)
	}
	var out []keptcount.RouteRead
	for _, p := range pending {
		if names == nil || slices.Contains(names, p.Route.Namespace) {
			out = append(out, keptcount.RouteRead{Route: p.Route, Count: p.Count})
		}
	}
	wait, ok, err := s.m.NextDue(ctx, f)
	if err != nil {
		rt.Fatal(err)
	}
	if ok {
		out = append(out, keptcount.RouteRead{Route: routes[0], Due: s.now.Add(wait)})
	}
	// A lease's end, as pgstore's reads find it: memstore's NextDue
	// leaves claimed rows out.
	for _, r := range s.leases {
		if r.LeaseExpiresAt.After(s.now) {
			out = append(out, keptcount.RouteRead{Route: r.Route(), Due: r.LeaseExpiresAt})
		}
	}
	return claimed, out
}

// check compares each answer of the kept counts on f with the
// reference's, reading (and handing to the Counts) what they miss, of the
// stale namespaces or of all.
func (s *kept) check(rt *rapid.T, step int, f backpressure.OwnedShardFraction) {
	ctx := context.Background()
	want, err := s.m.CountClaimedOutboxRows(ctx, f)
	if err != nil {
		rt.Fatal(err)
	}
	if got, ok := s.k.Claimed(f, s.now); ok {
		s.hits++
		if fmt.Sprint(nonZero(got)) != fmt.Sprint(nonZero(want)) {
			rt.Fatalf("step %d: Claimed = %v, want %v", step, got, want)
		}
	}
	for _, c := range rapid.SliceOfN(rapid.IntRange(1, 4), 1, 3).Draw(rt, "caps") {
		full, err := s.m.CountPendingOutboxRows(ctx, f, c)
		if err != nil {
			rt.Fatal(err)
		}
		got, ok := s.k.Pending(f, s.now, c)
		if !ok {
			got, ok = s.refresh(rt, f, c)
		} else {
			s.hits++
		}
		if ok && fmt.Sprint(got) != fmt.Sprint(full) {
			rt.Fatalf("step %d: Pending(cap %d) = %v, want %v", step, c, got, full)
		}
		p := backpressure.CountParams{CapPerRoute: c, Namespaces: rapid.IntRange(1, 3).Draw(rt, "namespaces"), After: rapid.SampledFrom([]string{"", "a", "b", "c", "d"}).Draw(rt, "after")}
		if got, ok := s.k.Window(f, s.now, p); ok {
			if w := window(full, p); fmt.Sprint(got) != fmt.Sprint(w) {
				rt.Fatalf("step %d: Window(%+v) = %v, want %v", step, p, got, w)
			}
		}
	}
}

// refresh reads what the kept counts miss, as pgstore's readKept does,
// and returns what the Counts answer with after it (false: nothing).
func (s *kept) refresh(rt *rapid.T, f backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, bool) {
	if names, ok := s.k.Stale(f, s.now, capPerRoute); ok && rapid.Bool().Draw(rt, "partial") {
		t := s.k.Ticket(s.now)
		claimed, read := s.read(rt, f, capPerRoute, names)
		if got, ok := s.k.Refreshed(t, keptcount.Snapshot{}, f, claimed, names, read, capPerRoute); ok {
			return got, true
		}
	}
	t := s.k.Ticket(s.now)
	claimed, read := s.read(rt, f, capPerRoute, nil)
	return s.k.Refreshed(t, keptcount.Snapshot{}, f, claimed, nil, read, capPerRoute)
}

// window is the window p describes of full pending counts full.
func window(full []backpressure.RouteCount, p backpressure.CountParams) []backpressure.RouteCount {
	var names []string
	for _, rc := range full {
		names = append(names, rc.Route.Namespace)
	}
	names = slices.Compact(names)
	i := 0
	for i < len(names) && names[i] <= p.After {
		i++
	}
	names = slices.Concat(names[i:], names[:i])[:min(len(names), p.Namespaces)]
	out := []backpressure.RouteCount{}
	for _, rc := range full {
		if slices.Contains(names, rc.Route.Namespace) {
			out = append(out, rc)
		}
	}
	return out
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// TestRefreshedLeavesNotifiedNamespacesStale: a notification naming b
// that arrives between the store's Stale (which named a) and its Ticket
// is not in the read of a; the read may be kept, but its answer must not
// give b's count from before the notification (b's new rows would be
// missing: pending understated after a notification).
func TestRefreshedLeavesNotifiedNamespacesStale(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all, _ := backpressure.AllShards(8)
	a, b := routes[0], routes[2]
	k := keptcount.New(10 * time.Second)
	k.Listening(true)
	if _, ok := k.Refreshed(k.Ticket(now), keptcount.Snapshot{}, all, map[string]int{}, nil, []keptcount.RouteRead{{Route: a, Count: 1}, {Route: b, Count: 1}}, 3); !ok {
		t.Fatal("a full read was not kept")
	}
	k.Touched([]string{a.Namespace}) // an enqueue into a
	names, ok := k.Stale(all, now, 3)
	if !ok || fmt.Sprint(names) != "[a]" {
		t.Fatalf("Stale = %v, %v, want [a], true", names, ok)
	}
	k.Touched([]string{b.Namespace}) // b's notification, before the read's ticket
	got, ok := k.Refreshed(k.Ticket(now), keptcount.Snapshot{}, all, map[string]int{}, names, []keptcount.RouteRead{{Route: a, Count: 2}}, 3)
	if ok {
		t.Fatalf("Refreshed of [a] answered %v with b notified since Stale", got)
	}
	if got, ok := k.Pending(all, now, 3); ok {
		t.Fatalf("Pending = %v with b notified and not read", got)
	}
	names, ok = k.Stale(all, now, 3)
	if !ok || fmt.Sprint(names) != "[b]" {
		t.Fatalf("Stale after the read of a = %v, %v, want [b], true", names, ok)
	}
}

// TestWindowOfEveryNamespace asks for a window wider than any count of
// namespaces (as storetest's HugeWindow does): it is every namespace, and
// it allocates nothing by the window's size.
func TestWindowOfEveryNamespace(t *testing.T) {
	k := keptcount.New(time.Minute)
	k.Listening(true)
	all, _ := backpressure.AllShards(8)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := outbox.Route{Namespace: "a", TaskQueue: "q"}, outbox.Route{Namespace: "b", TaskQueue: "q"}
	k.Refreshed(k.Ticket(now), keptcount.Snapshot{}, all, map[string]int{}, nil, []keptcount.RouteRead{{Route: a, Count: 2}, {Route: b, Count: 1}}, 5)
	want := []outbox.RouteCount{{Route: a, Count: 2}, {Route: b, Count: 1}}
	for _, n := range []int{1<<31 - 1, 1 << 31, math.MaxInt} {
		got, ok := k.Window(all, now, outbox.CountParams{CapPerRoute: 5, Namespaces: n, After: "a"})
		if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Window(%d namespaces) = %v, %v; want %v, true", n, got, ok, want)
		}
	}
}
