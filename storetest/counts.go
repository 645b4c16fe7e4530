package storetest

import (
	"maps"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
)

// testCounts checks CountClaimedOutboxRows (live leases only) and
// CountPendingOutboxRows (claimable rows per route, capped), and that
// counting changes no row.
func testCounts[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("EmptyStore", func(t *testing.T) {
		e := setup(t, newHarness)
		if got := e.countClaimed(e.all); len(got) != 0 {
			t.Errorf("CountClaimedOutboxRows(empty) = %v, want none", got)
		}
		if got := e.countPending(e.all, 10); len(got) != 0 {
			t.Errorf("CountPendingOutboxRows(empty) = %v, want none", got)
		}
	})

	t.Run("ClaimedCountsLiveLeasesOnly", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "q", "a", 4)...)
		e.enqueue(msgs("b", "q", "b", 3)...)
		half := (e.h.Lease / 2).Truncate(time.Millisecond)
		steps := []struct {
			name string
			do   func()
			want map[string]int
		}{
			{"pending only", func() {}, map[string]int{}},
			{"claim 3 of a, 1 of b", func() {
				rows := e.claim(e.all, scope("a", "q", 3), scope("b", "q", 1))
				for _, r := range rows {
					if e.h.Key(r) == "a-0" {
						e.settle(r)
					}
				}
			}, map[string]int{"a": 2, "b": 1}},
			{"lease half gone", func() { e.h.Advance(half) }, map[string]int{"a": 2, "b": 1}},
			{"claim 1 more of b", func() { e.claim(e.all, scope("b", "q", 1)) }, map[string]int{"a": 2, "b": 2}},
			{"first leases expired", func() { e.h.Advance(e.h.Lease - half + time.Millisecond) }, map[string]int{"b": 1}},
			{"all leases expired", func() { e.h.Advance(e.h.Lease) }, map[string]int{}},
		}
		for i, s := range steps {
			s.do()
			if got := e.countClaimed(e.all); !maps.Equal(got, s.want) {
				t.Errorf("step %d (%s): CountClaimedOutboxRows = %v, want %v", i, s.name, got, s.want)
			}
		}
	})

	t.Run("PendingCountsCapped", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "q1", "a1", 5)...)
		e.enqueue(msgs("a", "q2", "a2", 2)...)
		e.enqueue(msgs("b", "q1", "b1", 1)...)
		for _, c := range []struct {
			capPerRoute int
			want        map[backpressure.Route]int
		}{
			{1, map[backpressure.Route]int{route("a", "q1"): 1, route("a", "q2"): 1, route("b", "q1"): 1}},
			{2, map[backpressure.Route]int{route("a", "q1"): 2, route("a", "q2"): 2, route("b", "q1"): 1}},
			{3, map[backpressure.Route]int{route("a", "q1"): 3, route("a", "q2"): 2, route("b", "q1"): 1}},
			{5, map[backpressure.Route]int{route("a", "q1"): 5, route("a", "q2"): 2, route("b", "q1"): 1}},
			{1000, map[backpressure.Route]int{route("a", "q1"): 5, route("a", "q2"): 2, route("b", "q1"): 1}},
		} {
			if got := e.countPending(e.all, c.capPerRoute); !equalCounts(got, c.want) {
				t.Errorf("CountPendingOutboxRows(cap %d) = %v, want %v", c.capPerRoute, got, c.want)
			}
		}
	})

	t.Run("PendingCountsClaimableOnly", func(t *testing.T) {
		e := setup(t, newHarness)
		r := route("a", "q")
		e.enqueue(msgs("a", "q", "k", 6)...)
		var claimed []R
		quarter := (e.h.Lease / 4).Truncate(time.Millisecond)
		steps := []struct {
			name string
			do   func()
			want int
		}{
			{"6 pending", func() {}, 6},
			{"claim 3", func() { claimed = e.need("claim(a/q ≤ 3)", e.claim(e.all, scope("a", "q", 3)), 3) }, 3},
			{"settle 1", func() { e.settle(claimed[0]) }, 3},
			{"retry 1 with a delay", func() { e.retry(claimed[1], quarter) }, 3},
			{"delay passed", func() { e.h.Advance(quarter) }, 4},
			{"lease of the third expired", func() { e.h.Advance(e.h.Lease) }, 5},
			{"claim everything", func() { e.claim(e.all, scope("a", "q", 100)) }, 0},
		}
		for i, s := range steps {
			s.do()
			if got := e.countPending(e.all, 100); got[r] != s.want || len(got) > 1 {
				t.Errorf("step %d (%s): CountPendingOutboxRows = %v, want %v: %d", i, s.name, got, r, s.want)
			}
		}
	})

	t.Run("CountsChangeNothing", func(t *testing.T) {
		e := setup(t, newHarness)
		ms := msgs("a", "q", "k", 8)
		e.enqueue(ms...)
		rows := e.need("claim(a/q ≤ 4)", e.claim(e.all, scope("a", "q", 4)), 4)
		e.settle(rows[0])
		e.retry(rows[1], time.Minute)
		e.h.Advance(e.h.Lease + time.Millisecond) // rows[2] and rows[3] expire
		before := e.snapshot(messageKeys(ms))
		e.countClaimed(e.all)
		e.countPending(e.all, 1)
		e.countPending(e.all, 100)
		e.unchanged("counts", before, nil)
	})
}
