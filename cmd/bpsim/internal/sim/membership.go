package sim

import (
	"fmt"
	"slices"

	"github.com/outboxkit/backpressure/pgstore"
)

// membership is who owns which shard over a run in which a node fails or
// joins, in ticks. A node is a member from its join tick until
// MembershipLease after its failure (the others take that long to notice),
// and the members share the shards by rendezvous hashing, as pgstore's
// membership does. A node sweeps from its join tick until its failure tick.
// Without a failure or a join, ownership is the scenario's fixed map.
type membership struct {
	names    []string // "node-0", …: the names the hashing sees
	join     []int    // tick a node joins (0: from the start)
	fail     []int    // tick a node fails, or -1
	handover []int    // tick a failed node stops being a member, or -1
	events   []int    // ticks at which the members change, ascending, unique
	static   []int    // owner of each shard when nothing fails or joins
}

func newMembership(s Scenario) *membership {
	m := &membership{}
	if !s.dynamic() {
		_, m.static, _ = nodeShards(s)
		return m
	}
	lease := int(ceilTicks(s.membershipLease(), s.Tick))
	for i, n := range s.NodeList {
		m.names = append(m.names, fmt.Sprintf("node-%d", i))
		m.join = append(m.join, int(n.JoinAt/s.Tick))
		f, h := -1, -1
		if n.FailAt > 0 {
			f = int(n.FailAt / s.Tick)
			h = f + lease
		}
		m.fail, m.handover = append(m.fail, f), append(m.handover, h)
		for _, t := range []int{m.join[i], f, h} {
			if t > 0 && !slices.Contains(m.events, t) {
				m.events = append(m.events, t)
			}
		}
	}
	slices.Sort(m.events)
	return m
}

// live reports whether node i sweeps at tick t: it has joined and not
// failed.
func (m *membership) live(i, t int) bool {
	if m.static != nil {
		return true
	}
	return t >= m.join[i] && (m.fail[i] < 0 || t < m.fail[i])
}

// owners returns the owner of each shard at tick t: shardCount entries,
// each a node index.
func (m *membership) owners(t, shardCount int) []int {
	if m.static != nil {
		return m.static
	}
	var members []string
	for i, name := range m.names {
		if t >= m.join[i] && (m.handover[i] < 0 || t < m.handover[i]) {
			members = append(members, name)
		}
	}
	out := make([]int, shardCount)
	// A scenario's shard count is 1..4096 (validated), inside AssignShards'
	// range, so it cannot fail here.
	assigned, _ := pgstore.AssignShards(members, shardCount)
	for sh, name := range assigned {
		out[sh] = slices.Index(m.names, name)
	}
	return out
}
