package sqlitestore

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// TestPriorityNeverChangesGrants: two stores get the same messages, one
// with random priorities and one with every priority 0; sweep after sweep,
// with rows settled in between, the plans are the same (every namespace's
// grant and its split over routes), and so are the rows claimed per route.
// Only which rows of a route are claimed may differ: in the first store the
// highest priorities, checked against the rows still pending.
func TestPriorityNeverChangesGrants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		now := time.Unix(1_700_000_000, 0)
		clock := func() time.Time { return now }
		open := func() *Store {
			s, err := Open(t.Context(), ":memory:", Options{Now: clock, ShardCount: 8})
			if err != nil {
				rt.Fatalf("Open: %v", err)
			}
			return s
		}
		prio, flat := open(), open()
		defer prio.Close()
		defer flat.Close()
		var ms, flatMs []outbox.Message
		for i := rapid.IntRange(1, 60).Draw(rt, "messages"); i > 0; i-- {
			m := outbox.Message{
				DispatchKey: fmt.Sprintf("k%03d", i),
				Namespace:   rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "namespace"),
				TaskQueue:   rapid.SampledFrom([]string{"", "q1", "q2"}).Draw(rt, "taskQueue"),
				Priority:    rapid.IntRange(-3, 3).Draw(rt, "priority") * 300,
			}
			ms = append(ms, m)
			m.Priority = 0
			flatMs = append(flatMs, m)
		}
		for _, s := range []struct {
			st *Store
			ms []outbox.Message
		}{{prio, ms}, {flat, flatMs}} {
			if _, err := s.st.Enqueue(t.Context(), s.ms); err != nil {
				rt.Fatalf("Enqueue: %v", err)
			}
		}
		cfg := backpressure.Config{BatchSize: rapid.IntRange(1, 12).Draw(rt, "batch"), DefaultQuota: rapid.IntRange(1, 8).Draw(rt, "quota")}
		all, _ := backpressure.AllShards(8)
		bp, _ := backpressure.New(cfg, all)
		bf, _ := backpressure.New(cfg, all)
		for sweep := 0; sweep < 8; sweep++ {
			rp, pp, err := backpressure.Sweep(t.Context(), bp, prio.Claimer())
			if err != nil {
				rt.Fatalf("sweep %d: %v", sweep, err)
			}
			rf, pf, err := backpressure.Sweep(t.Context(), bf, flat.Claimer())
			if err != nil {
				rt.Fatalf("sweep %d: %v", sweep, err)
			}
			if !slices.Equal(pp.Claims, pf.Claims) {
				rt.Fatalf("sweep %d: with priorities the plan is\n%v\nwithout\n%v", sweep, pp.Claims, pf.Claims)
			}
			perRoute := func(rows []outbox.Row) map[backpressure.Route]int {
				m := map[backpressure.Route]int{}
				for _, r := range rows {
					m[r.Route()]++
				}
				return m
			}
			if a, b := perRoute(rp), perRoute(rf); !maps.Equal(a, b) {
				rt.Fatalf("sweep %d: claimed per route %v with priorities, %v without", sweep, a, b)
			}
			// Every row claimed has a priority at least that of every
			// row of its route left pending.
			lowest := map[backpressure.Route]int{}
			for _, r := range rp {
				if p, ok := lowest[r.Route()]; !ok || r.Priority < p {
					lowest[r.Route()] = r.Priority
				}
			}
			for _, m := range ms {
				row, err := prio.Get(t.Context(), m.DispatchKey)
				if err != nil {
					rt.Fatal(err)
				}
				if p, ok := lowest[row.Route()]; ok && row.State == outbox.StatePending && row.Priority > p {
					rt.Fatalf("sweep %d: %s (priority %d) left pending while its route claimed priority %d", sweep, row.DispatchKey, row.Priority, p)
				}
			}
			// Settle some of each store's claims alike: the same count
			// per route, so the claimed counts stay equal.
			settle := func(st *Store, rows []outbox.Row, n map[backpressure.Route]int) {
				for _, r := range rows {
					if n[r.Route()] > 0 {
						n[r.Route()]--
						if err := st.Settle(t.Context(), r.Lease()); err != nil {
							rt.Fatal(err)
						}
					}
				}
			}
			n := map[backpressure.Route]int{}
			for r, c := range perRoute(rp) {
				n[r] = rapid.IntRange(0, c).Draw(rt, "settle")
			}
			settle(prio, rp, maps.Clone(n))
			settle(flat, rf, n)
		}
	})
}
