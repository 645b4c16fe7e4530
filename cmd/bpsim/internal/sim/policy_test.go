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
	fs, _, err := nodeShards(Scenario{Nodes: 3, ShardCount: 64})
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
	nodes := make([]*node, len(fs))
	for i, f := range fs {
		bp, err := backpressure.New(backpressure.Config{BatchSize: 1, DefaultQuota: 50}, f)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &node{bp: bp}
	}
	if got := clusterCeiling(nodes, "t", 50); got != 52 {
		t.Errorf("clusterCeiling(50) = %d, want 52", got)
	}
	if got := clusterCeiling(nodes, "t", backpressure.Unlimited); got != backpressure.Unlimited {
		t.Errorf("clusterCeiling(Unlimited) = %d", got)
	}
}

// TestNodeShardsFromTheMap checks that an explicit shard map is what the
// nodes own: 1, 7 and 56 of 64, which dealing in turn cannot make.
func TestNodeShardsFromTheMap(t *testing.T) {
	s := Scenario{Nodes: 3, ShardCount: 64, NodeList: []NodeSpec{{Shards: []int{0}}, {Shards: []int{1, 2, 3, 4, 5, 6, 7}}, {}}}
	for sh := 8; sh < 64; sh++ {
		s.NodeList[2].Shards = append(s.NodeList[2].Shards, sh)
	}
	if err := s.validateNodes(); err != nil {
		t.Fatal(err)
	}
	fs, owner, err := nodeShards(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{fs[0].OwnedCount(), fs[1].OwnedCount(), fs[2].OwnedCount()}; fmt.Sprint(got) != "[1 7 56]" {
		t.Errorf("owned counts = %v, want [1 7 56]", got)
	}
	if owner[0] != 0 || owner[7] != 1 || owner[8] != 2 {
		t.Errorf("owner = %v", owner)
	}
}
