package storetest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testShards checks that rows land on ShardFor(dispatch_key, shardCount) and
// that each call sees only the owned shards.
func testShards[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("Placement", func(t *testing.T) {
		e := setup(t, newHarness)
		ms := msgs("acme", "emails", "k", 200)
		e.enqueue(ms...)
		for _, m := range ms {
			if s, want := e.inspect(m.DispatchKey), backpressure.ShardFor(m.DispatchKey, e.h.ShardCount); s.Shard != want {
				t.Errorf("row %q: Shard %d, want ShardFor(%q, %d) = %d", m.DispatchKey, s.Shard, m.DispatchKey, e.h.ShardCount, want)
			}
		}
	})

	t.Run("OwnedShardsOnly", func(t *testing.T) {
		e := setup(t, newHarness)
		if e.h.ShardCount < 2 {
			t.Skip("needs a store with at least 2 shards")
		}
		even := func(s int) bool { return s%2 == 0 }
		odd := func(s int) bool { return s%2 == 1 }
		a, b := e.fraction(even), e.fraction(odd)

		var ms []outbox.Message
		wantA, wantB := map[backpressure.Route]int{}, map[backpressure.Route]int{}
		onA := map[string]bool{}
		for i := 0; i < 160; i++ {
			r := route("ns"+strconv.Itoa(i%2), "q"+strconv.Itoa(i%4))
			m := msg(r.Namespace, r.TaskQueue, "k-"+strconv.Itoa(i))
			ms = append(ms, m)
			if even(backpressure.ShardFor(m.DispatchKey, e.h.ShardCount)) {
				wantA[r]++
				onA[m.DispatchKey] = true
			} else {
				wantB[r]++
			}
		}
		e.enqueue(ms...)
		if got := e.countPending(a, 1000); !equalCounts(got, wantA) {
			t.Errorf("CountPendingOutboxRows(even shards) = %v, want %v", got, wantA)
		}
		if got := e.countPending(b, 1000); !equalCounts(got, wantB) {
			t.Errorf("CountPendingOutboxRows(odd shards) = %v, want %v", got, wantB)
		}

		before := e.snapshot(messageKeys(ms))
		var claims []backpressure.ScopedClaim
		for r := range wantA {
			claims = append(claims, backpressure.ScopedClaim{Route: r, Limit: 1000})
		}
		for r := range wantB {
			if _, ok := wantA[r]; !ok {
				claims = append(claims, backpressure.ScopedClaim{Route: r, Limit: 1000})
			}
		}
		got := e.keySet("claim on even shards", e.claim(a, claims...))
		if len(got) != len(onA) {
			t.Errorf("claim on even shards returned %d rows, want %d", len(got), len(onA))
		}
		for k := range got {
			if !onA[k] {
				t.Errorf("claim on even shards returned %q on shard %d", k, backpressure.ShardFor(k, e.h.ShardCount))
			}
		}
		e.unchanged("claim on even shards", before, got)
		if c := e.countClaimed(b); len(c) != 0 {
			t.Errorf("CountClaimedOutboxRows(odd shards) = %v after claiming only even shards, want none", c)
		}
		if c := e.countClaimed(a); sum(c) != len(onA) {
			t.Errorf("CountClaimedOutboxRows(even shards) = %v, want %d in all", c, len(onA))
		}
		if got := e.countPending(a, 1000); len(got) != 0 {
			t.Errorf("CountPendingOutboxRows(even shards) = %v after claiming them all, want none", got)
		}
		rest := e.keySet("claim on odd shards", e.claim(b, claims...))
		if len(rest) != len(ms)-len(onA) {
			t.Errorf("claim on odd shards returned %d rows, want %d", len(rest), len(ms)-len(onA))
		}
		for k := range rest {
			if onA[k] {
				t.Errorf("claim on odd shards returned %q, already claimed on an even shard", k)
			}
		}
	})

	t.Run("NoShardsOwned", func(t *testing.T) {
		e := setup(t, newHarness)
		none := e.fraction(func(int) bool { return false })
		ms := msgs("acme", "emails", "k", 20)
		e.enqueue(ms...)
		before := e.snapshot(messageKeys(ms))
		if got := e.countPending(none, 100); len(got) != 0 {
			t.Errorf("CountPendingOutboxRows(no shards) = %v, want none", got)
		}
		if got := e.claim(none, scope("acme", "emails", 100)); len(got) != 0 {
			t.Errorf("claim on no shards returned %v, want nothing", e.keys(got))
		}
		e.unchanged("claim on no shards", before, nil)
	})

	t.Run("ShardCountMismatch", func(t *testing.T) {
		e := setup(t, newHarness)
		other, err := backpressure.AllShards(e.h.ShardCount + 1)
		if err != nil {
			t.Fatal(err)
		}
		ms := msgs("acme", "emails", "k", 10)
		e.enqueue(ms...)
		e.claim(e.all, scope("acme", "emails", 3))
		before := e.snapshot(messageKeys(ms))
		if _, err := e.h.Store.CountClaimedOutboxRows(e.ctx, other); err == nil {
			t.Errorf("CountClaimedOutboxRows(shard count %d on a %d-shard store) returned no error", other.ShardCount(), e.h.ShardCount)
		}
		if _, err := e.h.Store.CountPendingOutboxRows(e.ctx, other, 10); err == nil {
			t.Errorf("CountPendingOutboxRows(shard count %d on a %d-shard store) returned no error", other.ShardCount(), e.h.ShardCount)
		}
		rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, other, []backpressure.ScopedClaim{scope("acme", "emails", 10)})
		if err == nil || len(rows) != 0 {
			t.Errorf("ClaimOutboxRowsScoped(shard count %d on a %d-shard store) = %d rows, %v; want an error and no rows", other.ShardCount(), e.h.ShardCount, len(rows), err)
		}
		if errors.Is(err, e.h.ErrLeaseLost) {
			t.Errorf("shard-count mismatch reported as a lost lease: %v", err)
		}
		e.unchanged("calls with a mismatched shard count", before, nil)
	})
}

func equalCounts(got, want map[backpressure.Route]int) bool {
	if len(got) != len(want) {
		return false
	}
	for r, n := range want {
		if got[r] != n {
			return false
		}
	}
	return true
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
