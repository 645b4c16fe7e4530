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
	idx    int // index into workload.arrivals
	lease  outbox.Lease
	tenant int
	node   *node
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

// backpressureConfig is c as a backpressure.Config.
func (c tenantConfig) backpressureConfig(s Scenario) backpressure.Config {
	cfg := backpressure.Config{
		BatchSize:     s.BatchSize,
		DefaultQuota:  backpressure.Unlimited,
		Quotas:        make(map[string]int, len(s.Tenants)),
		Apportionment: s.apportionment(),
	}
	for i, t := range s.Tenants {
		cfg.Quotas[t.Name] = c.quotas[i]
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

// runPolicy replays w under policy p on a fresh outbox from db and measures
// it.
func runPolicy(ctx context.Context, s Scenario, w *workload, p Policy, db database, progress func(tick, settled int)) (*PolicyReport, error) {
	clock := &simClock{tick: s.Tick}
	ob, err := db.Open(ctx, string(p), storeOptions{ShardCount: s.ShardCount, Lease: s.Lease, Now: clock.Now})
	if err != nil {
		return nil, err
	}
	defer ob.Close()

	nt := len(s.Tenants)
	tenantIdx := make(map[string]int, nt)
	for i, t := range s.Tenants {
		tenantIdx[t.Name] = i
	}
	cfg := initialConfig(s)
	paused := pausedAtEnd(s, tenantIdx)
	changeTicks := make([]int, len(s.Changes))
	for i, ch := range s.Changes {
		changeTicks[i] = int(ch.At / s.Tick)
	}
	nextChange := 0

	fractions, owner, err := nodeShards(s)
	if err != nil {
		return nil, err
	}
	nodes := make([]*node, s.Nodes)
	capacity := 0 // workers over the cluster; 0 when some node has no bound
	bounded := true
	for i, f := range fractions {
		n := &node{id: i, shards: f, workers: s.nodeWorkers(i), atCeiling: make([][]int, nt)}
		nodes[i] = n
		if n.workers == 0 {
			bounded = false
		}
		capacity += n.workers
		if n.bp, err = backpressure.New(cfg.backpressureConfig(s), f); err != nil {
			return nil, err
		}
		if p == Backpressure {
			workers := n.workers
			if workers == 0 {
				// Unlimited: one worker per row of the run is as many as
				// could ever run at once.
				workers = max(len(w.arrivals), 1)
			}
			if n.d, err = startDispatchNode(ctx, n.bp, ob, workers, len(w.arrivals)); err != nil {
				return nil, err
			}
			defer n.d.stop()
		}
	}
	if !bounded {
		capacity = 0
	}

	rep := &PolicyReport{Policy: p, Description: p.Describe(), Database: db.ReportName(string(p))}
	rep.Tenants = make([]TenantReport, nt)
	for i, t := range s.Tenants {
		tr := &rep.Tenants[i]
		tr.Name, tr.Quota, tr.Weight, tr.Queues, tr.Rows = t.Name, t.Quota, max(t.Weight, 1), t.Queues, w.perTenant[i]
		tr.ClusterCeiling = clusterCeiling(nodes, t.Name, t.Quota)
		tr.Paused = paused[i]
	}
	waits := make([][]time.Duration, nt)
	inflight := make([]int, nt) // claimed, not yet settled
	waiting := make([]int, nt)  // enqueued, never claimed
	starved := make([]int, nt)  // sweeps in a row without a claim while backlogged under quota
	claimedTick := make([]int, nt)
	waitingTotal := 0
	timeline := newSampler(nt)
	claimedKey := make([]bool, len(w.arrivals))
	settledKey := make([]bool, len(w.arrivals))
	claimTick := make([]int, len(w.arrivals))
	due := map[int][]job{}
	running := 0 // claims whose worker has not finished
	total, settled, claimedTotal := len(w.arrivals), 0, 0
	// wanted is the rows the run waits for: all but a paused tenant's.
	wanted, settledWanted := 0, 0
	for i := range w.arrivals {
		if !paused[w.arrivals[i].tenant] {
			wanted++
		}
	}
	var jainSum float64
	jainTicks := 0
	lastSettle := 0
	// lastProgress is the last tick in which a row arrived or a settle
	// succeeded. In a valid scenario a running row settles within the
	// longest service time of its claim; a run in which rows keep running
	// for longer than that plus a lease without a settle is going round in
	// claims that each outlive their lease, and is given up (see below).
	lastProgress := 0
	stuckAfter := int(ceilTicks(s.Lease, s.Tick)) + w.maxService + 1
	ent := newEntitlement(nt)

	settle := func(t int, j job, err error) error {
		switch {
		case errors.Is(err, outbox.ErrLeaseLost):
			// Someone claimed the row while this worker ran it, or its
			// lease ran out: the audit reports it.
			rep.Audit.LeaseLost++
			if len(rep.Audit.Examples) < maxExamples {
				rep.Audit.Examples = append(rep.Audit.Examples, w.arrivals[j.idx].key+" (lease lost at settle)")
			}
		case err != nil:
			return fmt.Errorf("%s: settling %q: %w", ob.Name(), w.arrivals[j.idx].key, err)
		default:
			if !settledKey[j.idx] {
				settledKey[j.idx] = true
				settled++
				if !paused[j.tenant] {
					settledWanted++
				}
			}
			lastSettle, lastProgress = t, t
		}
		j.node.running--
		inflight[j.tenant]--
		running--
		return nil
	}

	for t := 0; ; t++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if t > maxRunTicks {
			return nil, fmt.Errorf("%w: %d of %d rows settled after %d ticks", ErrStalled, settled, total, t)
		}
		clock.set(t)

		// 0. Configuration changes due by now, before the tick's sweeps.
		for nextChange < len(changeTicks) && changeTicks[nextChange] <= t {
			cfg.apply(s.Changes[nextChange], tenantIdx)
			for _, n := range nodes {
				if err := n.bp.SetConfig(cfg.backpressureConfig(s)); err != nil {
					return nil, fmt.Errorf("changes[%d]: %w", nextChange, err)
				}
			}
			nextChange++
		}

		// 1. Workers finish: settle the rows whose service time is over.
		// Only a settle the store accepts counts: a refused one leaves the
		// row to the claim that holds it now, or pending once more. Under
		// backpressure, the node's dispatcher settles them.
		if p == Backpressure {
			for _, n := range nodes {
				var leases []outbox.Lease
				jobs := map[outbox.Lease]job{}
				for _, j := range due[t] {
					if j.node == n {
						leases = append(leases, j.lease)
						jobs[j.lease] = j
					}
				}
				if len(leases) == 0 {
					continue
				}
				done, err := n.d.settle(ctx, leases)
				if err != nil {
					return nil, fmt.Errorf("%s: node %d: %w", ob.Name(), n.id, err)
				}
				// In the order released, whatever order the completer wrote.
				errs := make(map[outbox.Lease]error, len(done))
				for _, c := range done {
					errs[c.lease] = c.err
				}
				for _, l := range leases {
					if err := settle(t, jobs[l], errs[l]); err != nil {
						return nil, err
					}
				}
			}
		} else {
			for _, j := range due[t] {
				if err := settle(t, j, ob.Settle(ctx, j.lease)); err != nil {
					return nil, err
				}
			}
		}
		delete(due, t)

		// 2. Producers enqueue the tick's arrivals.
		if t < len(w.perTick) && len(w.perTick[t]) > 0 {
			if err := enqueue(ctx, ob, s, w.perTick[t]); err != nil {
				return nil, fmt.Errorf("%s: enqueue: %w", ob.Name(), err)
			}
			for _, a := range w.perTick[t] {
				waiting[a.tenant]++
			}
			waitingTotal += len(w.perTick[t])
			lastProgress = t
		}

		// 3. Every node with min(workers, batch) free workers sweeps once.
		backlogged := make([]bool, nt)
		for i := range nt {
			backlogged[i] = waiting[i] > 0 && (cfg.quotas[i] < 0 || inflight[i] < cfg.quotas[i])
		}
		clear(claimedTick)
		claimedNow, swept := 0, false
		for _, n := range nodes {
			full := n.full(s.BatchSize)
			if n.workers > 0 && n.workers-n.running < full {
				continue
			}
			swept = true
			rows, err := sweep(ctx, p, n, t, ob, full, rep, tenantIdx)
			if err != nil {
				return nil, fmt.Errorf("%s: node %d sweep (%s): %w", ob.Name(), n.id, p, err)
			}
			for _, r := range rows {
				i, ok := w.byKey[r.DispatchKey]
				if !ok {
					return nil, fmt.Errorf("%s: node %d claimed %q, a key the run never enqueued", ob.Name(), n.id, r.DispatchKey)
				}
				a := w.arrivals[i]
				if claimedKey[i] {
					rep.Audit.ClaimedAgain++
				} else {
					claimedKey[i] = true
					claimTick[i] = t
					waiting[a.tenant]--
					waitingTotal--
					claimedTotal++
				}
				claimedTick[a.tenant]++
				rep.Tenants[a.tenant].Claimed++
				waits[a.tenant] = append(waits[a.tenant], r.ClaimedAt.Sub(r.EnqueuedAt))
				inflight[a.tenant]++
				n.running++
				running++
				due[t+a.service] = append(due[t+a.service], job{idx: i, lease: r.Lease(), tenant: a.tenant, node: n})
			}
			claimedNow += len(rows)
		}
		if swept {
			for i := range nt {
				if backlogged[i] && claimedTick[i] == 0 {
					starved[i]++
					rep.Tenants[i].StarvedSweeps = max(rep.Tenants[i].StarvedSweeps, starved[i])
				} else {
					starved[i] = 0
				}
			}
		}

		// 4. Measure the tick.
		measure := func() {
			timeline.add(inflight)
			for i := range nt {
				rep.Tenants[i].PeakInflight = max(rep.Tenants[i].PeakInflight, inflight[i])
			}
			if j, ok := ent.jain(inflight, waiting, cfg, capacity); ok {
				jainSum += j
				jainTicks++
			}
		}
		measure()
		if progress != nil {
			progress(t, settled)
		}

		// 5. The end: nothing running, every row the run waits for
		// settled, nothing more to arrive and no change to come.
		changesDone := nextChange == len(changeTicks)
		if t >= w.lastTick && running == 0 && changesDone {
			if settledWanted == wanted {
				break
			}
			if claimedNow == 0 {
				return nil, fmt.Errorf("%w at tick %d under %s: %d of %d rows settled, none running, none claimable", ErrStalled, t, p, settled, wanted)
			}
		}
		if running > 0 && t-lastProgress > stuckAfter {
			// Every running claim keeps outliving its lease and being
			// claimed again: give up, and let the audit say what it did.
			rep.GaveUp = true
			break
		}

		// 6. Idle: nothing running, nothing waiting and every claimed row
		// settled. The ticks up to the next arrival or change change
		// nothing but the timeline, so they are recorded without sweeping.
		if running == 0 && waitingTotal == 0 && settled == claimedTotal {
			next := w.nextArrival(t + 1)
			if !changesDone {
				next = min(next, changeTicks[nextChange])
			}
			for ; t+1 < next; t++ {
				measure()
			}
		}
	}

	rep.Settled = settled
	rep.Ticks = timeline.ticks
	rep.Makespan = time.Duration(max(lastSettle-w.firstTick, 0)) * s.Tick
	if rep.Makespan > 0 {
		rep.Throughput = float64(settled) / rep.Makespan.Seconds()
	}
	rep.FairnessTicks = jainTicks
	if jainTicks > 0 {
		rep.Fairness = jainSum / float64(jainTicks)
	}
	for i := range nt {
		st := summarise(waits[i])
		rep.Tenants[i].WaitP50, rep.Tenants[i].WaitP99, rep.Tenants[i].WaitMax = st.P50, st.P99, st.Max
		rep.Tenants[i].HeldAtEnd = waiting[i]
		rep.Tenants[i].StarvedMax = time.Duration(rep.Tenants[i].StarvedSweeps) * s.Tick
	}
	rep.Timeline = Timeline{Tick: time.Duration(timeline.stride) * s.Tick, Inflight: timeline.vals}

	// A row was held at the ceiling when, between its enqueue and its
	// claim (or the end, for a row never claimed), a sweep of the node
	// that owns its shard held its tenant at the ceiling.
	if p == Backpressure {
		for i, a := range w.arrivals {
			ticks := nodes[owner[backpressure.ShardFor(a.key, s.ShardCount)]].atCeiling[a.tenant]
			k, _ := slices.BinarySearch(ticks, a.tick)
			if k < len(ticks) && (!claimedKey[i] || ticks[k] < claimTick[i]) {
				rep.Tenants[a.tenant].HeldAtCeiling++
			}
		}
	}

	// Stop the dispatchers before the audit re-enqueues every key, so that
	// none claims a row the audit is about to read.
	for _, n := range nodes {
		if n.d != nil {
			n.d.stop()
		}
	}
	if err := audit(ctx, ob, s, w, paused, &rep.Audit); err != nil {
		return nil, fmt.Errorf("%s: audit: %w", ob.Name(), err)
	}
	return rep, nil
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
	case Backpressure:
		done, err := n.d.sweep(ctx)
		if err != nil {
			return nil, err
		}
		if done.event.Asked != budget {
			return nil, fmt.Errorf("bpsim: the dispatcher asked for %d rows, the lockstep expected %d", done.event.Asked, budget)
		}
		for _, ns := range done.event.Plan.Namespaces {
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
			msgs[i] = outbox.Message{DispatchKey: a.key, Namespace: s.Tenants[a.tenant].Name, TaskQueue: a.queue}
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
