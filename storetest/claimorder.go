package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// claimOrderFault says where rows, as a claim of claims returned them,
// break the claim order: grouped by claim in the claims' order and, within
// each, highest priority first, then oldest (EnqueuedAt, then ID). With
// claims nil it checks only the order within each route (what a window
// claim or a Sweep returns). It returns "" when the order holds. It reads
// each row with Inspect, so it must not run inside a round-trip count.
func (e *env[R]) claimOrderFault(claims []backpressure.ScopedClaim, rows []R) string {
	e.t.Helper()
	index := map[backpressure.Route]int{}
	for i, c := range claims {
		index[c.Route] = i
	}
	last := map[backpressure.Route]RowState{}
	group := -1
	for i, r := range rows {
		st := e.inspect(e.h.Key(r))
		rt := route(st.Namespace, st.TaskQueue)
		if claims != nil {
			at, ok := index[rt]
			switch {
			case !ok:
				return fmt.Sprintf("row %d (%s) is on %v, which no claim names", i, st.DispatchKey, rt)
			case at < group:
				return fmt.Sprintf("row %d (%s) of claim %d comes after a row of claim %d: not grouped in the claims' order", i, st.DispatchKey, at, group)
			}
			group = at
		}
		if prev, ok := last[rt]; ok && !claimedBefore(prev, st) {
			return fmt.Sprintf("row %d (%s, priority %d, enqueued %v, ID %d) follows %s (priority %d, enqueued %v, ID %d) on %v: want highest priority first, then oldest",
				i, st.DispatchKey, st.Priority, st.EnqueuedAt, st.ID, prev.DispatchKey, prev.Priority, prev.EnqueuedAt, prev.ID, rt)
		}
		last[rt] = st
	}
	return ""
}

// claimedBefore reports whether a claim takes a before b: a has the higher
// priority, or the same and is older (enqueued earlier, or at the same
// instant with the lower ID).
func claimedBefore(a, b RowState) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if c := a.EnqueuedAt.Compare(b.EnqueuedAt); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// checkClaimOrder fails the test, naming step, where claimOrderFault finds
// a fault.
func (e *env[R]) checkClaimOrder(step string, claims []backpressure.ScopedClaim, rows []R) {
	e.t.Helper()
	if f := e.claimOrderFault(claims, rows); f != "" {
		e.t.Errorf("%s returned %v: %s", step, e.keysInOrder(rows), f)
	}
}

// keysInOrder returns the dispatch keys of rows in their order.
func (e *env[R]) keysInOrder(rows []R) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = e.h.Key(r)
	}
	return out
}

// orderedRow is a row of the claim-order property's reference: its key and
// what orders it within its route.
type orderedRow struct {
	key   string
	route backpressure.Route
	prio  int
	seq   int // enqueue order
}

// testClaimOrderProperty checks, on random backlogs, that a claim returns
// exactly the rows a naive reference takes, in its order: per claim in the
// claims' order, the route's rows by priority (highest first), then
// enqueue order. Each case uses namespaces of its own on one store.
func testClaimOrderProperty[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	e := setup(t, newHarness)
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		routes := []backpressure.Route{}
		for i := range rapid.IntRange(1, 3).Draw(rt, "routes") {
			routes = append(routes, route("p"+strconv.Itoa(cases)+"-"+strconv.Itoa(i), rapid.SampledFrom([]string{"", "q"}).Draw(rt, "tq")))
		}
		var backlog []orderedRow
		for b := range rapid.IntRange(1, 4).Draw(rt, "batches") {
			var ms []outbox.Message
			for j := range rapid.IntRange(1, 6).Draw(rt, "batch size") {
				r := rapid.SampledFrom(routes).Draw(rt, "route")
				m := msg(r.Namespace, r.TaskQueue, fmt.Sprintf("c%d-%02d", cases, 99-len(backlog)))
				m.Priority = rapid.IntRange(-2, 2).Draw(rt, "priority")
				ms = append(ms, m)
				backlog = append(backlog, orderedRow{m.DispatchKey, r, m.Priority, 10*b + j})
			}
			e.enqueue(ms...)
			e.h.Advance(time.Millisecond)
		}
		for step := range rapid.IntRange(1, 3).Draw(rt, "claims") {
			claims := []backpressure.ScopedClaim{}
			for _, r := range rapid.Permutation(routes).Draw(rt, "claim routes")[:rapid.IntRange(1, len(routes)).Draw(rt, "claimed routes")] {
				claims = append(claims, backpressure.ScopedClaim{Route: r, Limit: rapid.IntRange(1, 5).Draw(rt, "limit")})
			}
			var want []string
			want, backlog = referenceClaim(backlog, claims)
			got := e.keysInOrder(e.claim(e.all, claims...))
			if !slices.Equal(got, want) {
				rt.Fatalf("claim %d of %v returned %v, want %v: per claim, highest priority first, then oldest", step, claims, got, want)
			}
		}
	})
}

// referenceClaim takes, per claim in order, the first Limit rows of its
// route from backlog by priority (highest first), then enqueue order, and
// returns their keys and the rows left.
func referenceClaim(backlog []orderedRow, claims []backpressure.ScopedClaim) (keys []string, rest []orderedRow) {
	sorted := slices.Clone(backlog)
	slices.SortStableFunc(sorted, func(a, b orderedRow) int {
		return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.seq, b.seq))
	})
	taken := map[string]bool{}
	for _, c := range claims {
		n := 0
		for _, r := range sorted {
			if r.route == c.Route && n < c.Limit {
				keys = append(keys, r.key)
				taken[r.key] = true
				n++
			}
		}
	}
	for _, r := range backlog {
		if !taken[r.key] {
			rest = append(rest, r)
		}
	}
	return keys, rest
}
