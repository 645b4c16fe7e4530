package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// epoch is simulated time zero. Any fixed instant would do; a fixed one
// keeps the database's timestamps the same from run to run.
var epoch = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// simClock is the simulated clock the stores read through Options.Now.
// It is safe for concurrent use.
type simClock struct {
	tick  time.Duration
	ticks atomic.Int64
}

func (c *simClock) set(t int)      { c.ticks.Store(int64(t)) }
func (c *simClock) Now() time.Time { return epoch.Add(time.Duration(c.ticks.Load()) * c.tick) }

// node is one dispatcher node.
type node struct {
	id      int
	shards  backpressure.OwnedShardFraction
	owned   []int                      // shards.Owned()
	workers int                        // 0: unlimited
	bp      *backpressure.Backpressure // every policy: the ceilings; backpressure's planner
	rr      routeRobin                 // RoundRobin policy only
	d       *dispatchNode              // Backpressure policy only
	running int                        // rows its workers are running

	// atCeiling lists, per tenant, the ticks in which the node's sweep held
	// the tenant at its ceiling, ascending (Backpressure policy only).
	atCeiling [][]int
}

// full is the rows a node asks for when it sweeps, and the free workers it
// waits for before it sweeps: min(workers, batch).
func (n *node) full(batch int) int {
	if n.workers == 0 {
		return batch
	}
	return min(n.workers, batch)
}

// job is a claimed row a worker is running.
type job struct {
	idx     int // index into workload.arrivals
	lease   outbox.Lease
	tenant  int
	shard   int
	expires int // first tick at which the claim's lease has run out
	node    *node
	// rejected says the row's downstream answers this call 429: its
	// handler returns dispatch.Overloaded, and the dispatcher snoozes it.
	rejected bool
}

// Orphan states of a row (see runPolicy): claimed by a node that failed
// while running it, and then past its lease.
const (
	notOrphan = iota
	orphanLeased
	orphanExpired
)

// ownerSnap is the shard owners from tick from on.
type ownerSnap struct {
	from  int
	owner []int
}

// fractions turns shard owners into each of nodes nodes' owned shards.
func fractions(owner []int, nodes, shardCount int) ([]backpressure.OwnedShardFraction, error) {
	owned := make([][]int, nodes)
	for sh, o := range owner {
		owned[o] = append(owned[o], sh)
	}
	out := make([]backpressure.OwnedShardFraction, nodes)
	for i := range owned {
		f, err := backpressure.NewOwnedShardFraction(owned[i], shardCount)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

// enqueueChunk bounds one Enqueue call, to stay far below any database's
// limit on bound parameters.
const enqueueChunk = 500

// maxRunTicks stops a run that cannot finish: a guard against a bug, not a
// scenario limit.
const maxRunTicks = 50_000_000

// ErrStalled reports a run in which rows were waiting but no node could
// claim any and none were running, so nothing would ever change.
var ErrStalled = errors.New("bpsim: run stalled")

// nodeShards returns each node's owned shards: NodeList's when it lists
// them, else dealt out in turn (shard s to node s mod Nodes).
func nodeShards(s Scenario) ([]backpressure.OwnedShardFraction, []int, error) {
	owned := make([][]int, s.Nodes)
	owner := make([]int, s.ShardCount)
	for sh := range s.ShardCount {
		owner[sh] = sh % s.Nodes
	}
	if len(s.NodeList) > 0 && s.NodeList[0].Shards != nil {
		for i, n := range s.NodeList {
			for _, sh := range n.Shards {
				owner[sh] = i
			}
		}
	}
	for sh, o := range owner {
		owned[o] = append(owned[o], sh)
	}
	out := make([]backpressure.OwnedShardFraction, s.Nodes)
	for i := range owned {
		f, err := backpressure.NewOwnedShardFraction(owned[i], s.ShardCount)
		if err != nil {
			return nil, nil, err
		}
		out[i] = f
	}
	return out, owner, nil
}

// nodeWorkers returns node i's workers: its NodeSpec's, else
// WorkersPerNode (0: unlimited).
func (s Scenario) nodeWorkers(i int) int {
	if i < len(s.NodeList) && s.NodeList[i].Workers > 0 {
		return s.NodeList[i].Workers
	}
	return s.WorkersPerNode
}

// apportionment is the scenario's backpressure.Apportionment.
func (s Scenario) apportionment() backpressure.Apportionment {
	if s.Apportionment == "shares" {
		return backpressure.ApportionShares
	}
	return backpressure.ApportionCeil
}

// tenantConfig is the quotas and weights in force, per tenant index.
type tenantConfig struct {
	quotas, weights []int
}

func initialConfig(s Scenario) tenantConfig {
	c := tenantConfig{quotas: make([]int, len(s.Tenants)), weights: make([]int, len(s.Tenants))}
	for i, t := range s.Tenants {
		c.quotas[i], c.weights[i] = t.Quota, max(t.Weight, 1)
	}
	return c
}

// apply applies ch to c.
func (c tenantConfig) apply(ch Change, tenantIdx map[string]int) {
	for name, q := range ch.Quotas {
		c.quotas[tenantIdx[name]] = q
	}
	for name, w := range ch.Weights {
		c.weights[tenantIdx[name]] = w
	}
}

// backpressureConfig is c as a backpressure.Config, its token buckets on
// the simulated clock now.
func (c tenantConfig) backpressureConfig(s Scenario, now func() time.Time) backpressure.Config {
	cfg := backpressure.Config{
		BatchSize:     s.BatchSize,
		DefaultQuota:  backpressure.Unlimited,
		Quotas:        make(map[string]int, len(s.Tenants)),
		Apportionment: s.apportionment(),
		Clock:         now,
	}
	for i, t := range s.Tenants {
		cfg.Quotas[t.Name] = c.quotas[i]
		if t.Rate.PerSecond > 0 {
			if cfg.Rates == nil {
				cfg.Rates = map[string]backpressure.Rate{}
			}
			cfg.Rates[t.Name] = t.Rate
		}
		if c.weights[i] > 1 {
			if cfg.Weights == nil {
				cfg.Weights = map[string]int{}
			}
			cfg.Weights[t.Name] = c.weights[i]
		}
	}
	return cfg
}

// pausedAtEnd reports, per tenant, whether its quota is 0 once every
// change is applied: the run does not wait for its rows.
func pausedAtEnd(s Scenario, tenantIdx map[string]int) []bool {
	c := initialConfig(s)
	for _, ch := range s.Changes {
		c.apply(ch, tenantIdx)
	}
	out := make([]bool, len(s.Tenants))
	for i, q := range c.quotas {
		out[i] = q == 0
	}
	return out
}

// ownersEver is how many of the nodes owned a shard at some time of the
// run, per the ownership history.
func ownersEver(history []ownerSnap, nodes int) int {
	owned := make([]bool, nodes)
	k := 0
	for _, snap := range history {
		for _, o := range snap.owner {
			if !owned[o] {
				owned[o] = true
				k++
			}
		}
	}
	return k
}

// heldAtCeiling reports whether, in [from, end), a sweep of the node that
// owned shard then held tenant at its ceiling.
func heldAtCeiling(nodes []*node, history []ownerSnap, shard, tenant, from, end int) bool {
	for k, snap := range history {
		lo, hi := max(snap.from, from), end
		if k+1 < len(history) {
			hi = min(hi, history[k+1].from)
		}
		if lo >= hi {
			continue
		}
		ticks := nodes[snap.owner[shard]].atCeiling[tenant]
		j, _ := slices.BinarySearch(ticks, lo)
		if j < len(ticks) && ticks[j] < hi {
			return true
		}
	}
	return false
}

// sweep makes node n's one sweep under policy p, asking for budget rows,
// and returns the rows it claimed. For the backpressure policy it adds the
// plan's held rows to rep and records the tick in n.atCeiling for the
// tenants held at the ceiling.
func sweep(ctx context.Context, p Policy, n *node, tick int, ob *simStore, budget int, rep *PolicyReport, tenantIdx map[string]int) ([]outbox.Row, error) {
	switch p {
	case Unscoped:
		return ob.ClaimUnscoped(ctx, n.shards, budget)
	case RoundRobin:
		pending, err := ob.CountPendingOutboxRows(ctx, n.shards, budget)
		if err != nil {
			return nil, err
		}
		claims := n.rr.plan(pending, budget)
		if len(claims) == 0 {
			return nil, nil
		}
		return ob.ClaimOutboxRowsScoped(ctx, n.shards, claims)
	case Backpressure, NoSignals, Static, Oracle, Adaptive:
		done, err := n.d.sweep(ctx)
		if err != nil {
			return nil, err
		}
		if done.event.Asked != budget {
			return nil, fmt.Errorf("bpsim: the dispatcher asked for %d rows, the lockstep expected %d", done.event.Asked, budget)
		}
		for _, ns := range done.event.Plan.Namespaces {
			if ns.Reason == backpressure.HeldRate {
				if i, ok := tenantIdx[ns.Namespace]; ok {
					rep.Tenants[i].SweepsAtRate++
				}
			}
			if ns.Reason != backpressure.HeldAtCeiling {
				continue
			}
			if i, ok := tenantIdx[ns.Namespace]; ok {
				rep.Tenants[i].HeldRowSweeps += ns.Held
				rep.Tenants[i].SweepsAtCeiling++
				n.atCeiling[i] = append(n.atCeiling[i], tick)
			}
		}
		return done.rows, nil
	}
	return nil, fmt.Errorf("bpsim: unknown policy %q", p)
}

func enqueue(ctx context.Context, ob *simStore, s Scenario, arrivals []arrival) error {
	for lo := 0; lo < len(arrivals); lo += enqueueChunk {
		batch := arrivals[lo:min(lo+enqueueChunk, len(arrivals))]
		msgs := make([]outbox.Message, len(batch))
		for i, a := range batch {
			msgs[i] = a.message(s)
		}
		n, err := ob.Enqueue(ctx, msgs)
		if err != nil {
			return err
		}
		if n != len(msgs) {
			return fmt.Errorf("inserted %d of %d new rows: a dispatch key was already taken", n, len(msgs))
		}
	}
	return nil
}

// clusterCeiling is Σ over nodes of the per-node ceiling of the tenant's
// quota under the scenario's apportionment: what the backpressure policy
// lets it hold cluster-wide.
func clusterCeiling(nodes []*node, name string, quota int) int {
	if quota == backpressure.Unlimited {
		return backpressure.Unlimited
	}
	sum := 0
	for _, n := range nodes {
		sum += n.bp.Ceiling(name)
	}
	return sum
}
