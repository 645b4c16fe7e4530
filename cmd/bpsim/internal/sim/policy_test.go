package sim

import (
	"fmt"
	"testing"

	"github.com/outboxkit/backpressure"
)

func rc(ns, tq string, n int) backpressure.RouteCount {
	return backpressure.RouteCount{Route: backpressure.Route{Namespace: ns, TaskQueue: tq}, Count: n}
}

func TestRouteRobinPlan(t *testing.T) {
	var rr routeRobin
	pending := []backpressure.RouteCount{rc("b", "q1", 10), rc("a", "q0", 1), rc("b", "q0", 10), rc("c", "q0", 0)}
	claims := rr.plan(pending, 6)
	// Sorted a/q0, b/q0, b/q1; a/q0 is capped at 1, the rest share 5.
	want := []backpressure.ScopedClaim{
		{Route: backpressure.Route{Namespace: "a", TaskQueue: "q0"}, Limit: 1},
		{Route: backpressure.Route{Namespace: "b", TaskQueue: "q0"}, Limit: 3},
		{Route: backpressure.Route{Namespace: "b", TaskQueue: "q1"}, Limit: 2},
	}
	if fmt.Sprint(claims) != fmt.Sprint(want) {
		t.Errorf("plan(%v, 6) = %v, want %v", pending, claims, want)
	}
	if got := rr.plan(nil, 5); got != nil {
		t.Errorf("plan(nothing pending) = %v, want none", got)
	}
	if got := rr.plan(pending, 0); got != nil {
		t.Errorf("plan(budget 0) = %v, want none", got)
	}
	if got := sumLimits(rr.plan([]backpressure.RouteCount{rc("a", "q", 2)}, 5)); got != 2 {
		t.Errorf("plan claims %d of a route with 2 pending, want 2", got)
	}
}

// TestRouteRobinRotates checks that the remainder rotates: under steady
// demand every route's cumulative grant stays within one of every other's,
// and a tenant's share grows with its queue count (the flaw being measured).
func TestRouteRobinRotates(t *testing.T) {
	var rr routeRobin
	var pending []backpressure.RouteCount
	for i := range 7 {
		pending = append(pending, rc("big", queueName(i), 100))
	}
	pending = append(pending, rc("small", "q00", 100))
	got := map[backpressure.Route]int{}
	for sweep := range 50 {
		claims := rr.plan(pending, 3)
		if n := sumLimits(claims); n != 3 {
			t.Fatalf("sweep %d: claims %d rows, want the whole budget 3", sweep, n)
		}
		for _, c := range claims {
			got[c.Route] += c.Limit
		}
		lo, hi := 1<<30, 0
		for _, p := range pending {
			lo, hi = min(lo, got[p.Route]), max(hi, got[p.Route])
		}
		if hi-lo > 1 {
			t.Fatalf("sweep %d: cumulative grants per route range over [%d, %d]: %v", sweep, lo, hi, got)
		}
	}
	big := 0
	for _, p := range pending[:7] {
		big += got[p.Route]
	}
	if small := got[pending[7].Route]; big < 6*small {
		t.Errorf("big (7 queues) got %d rows, small (1 queue) %d: want big about 7× small", big, small)
	}
}

func sumLimits(cs []backpressure.ScopedClaim) int {
	n := 0
	for _, c := range cs {
		n += c.Limit
	}
	return n
}

func TestPoliciesAreDescribed(t *testing.T) {
	for _, p := range Policies {
		if p.Describe() == string(p) {
			t.Errorf("policy %q has no description", p)
		}
	}
}

func TestNodeShardsPartition(t *testing.T) {
	fs, err := nodeShards(3, 64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for i, f := range fs {
		for _, s := range f.Owned() {
			if j, dup := seen[s]; dup {
				t.Fatalf("shard %d owned by nodes %d and %d", s, j, i)
			}
			seen[s] = i
		}
	}
	if len(seen) != 64 {
		t.Fatalf("nodes own %d of 64 shards", len(seen))
	}
	if got := []int{fs[0].OwnedCount(), fs[1].OwnedCount(), fs[2].OwnedCount()}; fmt.Sprint(got) != "[22 21 21]" {
		t.Errorf("owned counts = %v, want [22 21 21]", got)
	}
	// The per-node ceilings of quota 50 round up: 18 + 17 + 17.
	if got := clusterCeiling(fs, 50); got != 52 {
		t.Errorf("clusterCeiling(50) = %d, want 52", got)
	}
	if got := clusterCeiling(fs, backpressure.Unlimited); got != backpressure.Unlimited {
		t.Errorf("clusterCeiling(Unlimited) = %d", got)
	}
}
