package sim

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// handoffScenario is a small hand-off: three nodes, node-2 fails at 3s,
// node-3 joins at 9s, two tenants backlogged against their quotas.
func handoffScenario() Scenario {
	return Scenario{
		Nodes:          4,
		NodeList:       []NodeSpec{{}, {}, {FailAt: 3 * time.Second}, {JoinAt: 9 * time.Second}},
		ShardCount:     32,
		BatchSize:      5,
		WorkersPerNode: 10,
		Tick:           100 * time.Millisecond,
		Duration:       10 * time.Second,
		Lease:          4 * time.Second,
		ServiceTime:    ServiceTime{Min: 1 * time.Second, Max: 2 * time.Second},
		Tenants: []Tenant{
			{Name: "big", Quota: 12, Queues: 4, Arrivals: []Arrival{{Pattern: PatternBurst, Rows: 200, At: 0}}},
			{Name: "small", Quota: 3, Queues: 1, Arrivals: []Arrival{{Pattern: PatternSteady, PerSecond: 3}}},
		},
	}
}

// TestHandoffHoldsQuotas runs a node failure and a join under every
// policy and checks, under backpressure, that at every tick each tenant's
// rows in flight stayed within the sum of the current owners' ceilings
// (the failed node's counting until its shards moved, the joiner's from
// its join), that no sweep left a node over its ceiling, and, under every
// policy, that every row was settled once although the failed node's
// claims had to run out and be claimed anew.
func TestHandoffHoldsQuotas(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s := handoffScenario()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir()}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, p := range rep.Policies {
		if !p.Audit.OK() {
			t.Errorf("%s: %v", p.Policy, p.Audit)
		}
		if p.Audit.Recovered == 0 {
			t.Errorf("%s: no claim of the failed node came back: the failure left nothing to recover", p.Policy)
		}
		want := []string{"3s node-2 fails", "9s node-2: ", "9s node-3: 0 → "}
		for _, w := range want {
			if !slices.ContainsFunc(p.Events, func(e string) bool { return strings.HasPrefix(e, w) }) {
				t.Errorf("%s: events %q lack %q", p.Policy, p.Events, w)
			}
		}
	}
	bp := rep.Policy(Backpressure)
	for _, tr := range bp.Tenants {
		if tr.OverOwnersCeiling > 0 || tr.OverNodeCeiling > 0 || tr.PeakInflight > tr.PeakCeiling {
			t.Errorf("%s: peak %d against the owners' ceilings %d; %d over them at some tick, %d sweeps left a node over its ceiling",
				tr.Name, tr.PeakInflight, tr.PeakCeiling, tr.OverOwnersCeiling, tr.OverNodeCeiling)
		}
		if tr.PeakInflight < tr.Quota {
			t.Errorf("%s: peak %d never reached the quota %d: the scenario does not load the ceilings", tr.Name, tr.PeakInflight, tr.Quota)
		}
	}
	// The check has teeth: unscoped ignores quotas and goes over.
	if un := rep.Policy(Unscoped); un.Tenants[0].OverOwnersCeiling == 0 {
		t.Errorf("unscoped never went over the owners' ceilings: the check cannot fail")
	}
}

// TestHandoffWhileClaimsLive hands a failed node's shards over while its
// claims are still live (membership lease below the claim lease): the new
// owners' headroom counts those rows, since counts are per shard, so no
// sweep leaves a node over its ceiling.
func TestHandoffWhileClaimsLive(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s := handoffScenario()
	s.MembershipLease = 500 * time.Millisecond
	rep, err := Run(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir(), Policies: []Policy{Backpressure}}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	bp := rep.Policy(Backpressure)
	if !bp.Audit.OK() || bp.Audit.Recovered == 0 {
		t.Errorf("audit %v, recovered %d", bp.Audit, bp.Audit.Recovered)
	}
	for _, tr := range bp.Tenants {
		if tr.OverNodeCeiling > 0 {
			t.Errorf("%s: %d sweeps left a node over its ceiling", tr.Name, tr.OverNodeCeiling)
		}
	}
}

// TestMembershipOwners checks the membership rule over random scenarios:
// at every tick each shard is owned by a member (a node that has joined
// and whose failure, if any, is less than a membership lease old), and
// between two ticks a shard moves only to a node that just became a member
// or away from one that just stopped being one (rendezvous hashing).
func TestMembershipOwners(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.IntRange(1, 5).Draw(t, "nodes")
		s := Scenario{Nodes: nodes, ShardCount: rapid.IntRange(nodes, 64).Draw(t, "shards"), Tick: time.Second, Lease: 2 * time.Second}
		s.NodeList = make([]NodeSpec, nodes)
		for i := 1; i < nodes; i++ {
			join := rapid.IntRange(0, 10).Draw(t, "join")
			s.NodeList[i].JoinAt = time.Duration(join) * time.Second
			if rapid.Bool().Draw(t, "fails") {
				s.NodeList[i].FailAt = time.Duration(join+rapid.IntRange(1, 10).Draw(t, "after")) * time.Second
			}
		}
		m := newMembership(s)
		member := func(i, tick int) bool {
			if m.static != nil {
				return true
			}
			return tick >= m.join[i] && (m.handover[i] < 0 || tick < m.handover[i])
		}
		var prev []int
		for tick := 0; tick <= 25; tick++ {
			own := m.owners(tick, s.ShardCount)
			for sh, o := range own {
				if !member(o, tick) {
					t.Fatalf("tick %d: shard %d owned by node %d, not a member", tick, sh, o)
				}
				if prev != nil && prev[sh] != o && member(prev[sh], tick) && member(o, tick-1) {
					t.Fatalf("tick %d: shard %d moved from node %d to node %d, both members before and after", tick, sh, prev[sh], o)
				}
			}
			prev = own
		}
	})
}
