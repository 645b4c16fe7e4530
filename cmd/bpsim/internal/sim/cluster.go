package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// runPolicy replays w under policy p on a fresh outbox from db and measures
// it.
func runPolicy(ctx context.Context, s Scenario, w *workload, p Policy, db database, progress func(tick, settled int)) (*PolicyReport, error) {
	clock := &simClock{tick: s.Tick}
	ob, err := db.Open(ctx, string(p), storeOptions{ShardCount: s.ShardCount, Lease: s.Lease, Now: clock.Now, PendingCaps: s.pendingCaps()})
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

	mem := newMembership(s)
	owner := mem.owners(0, s.ShardCount)
	history := []ownerSnap{{0, owner}}
	fracs, err := fractions(owner, s.Nodes, s.ShardCount)
	if err != nil {
		return nil, err
	}
	nextEvent := 0 // index into mem.events
	nodes := make([]*node, s.Nodes)
	capacity := 0 // workers over the cluster; 0 when some node has no bound
	bounded := true
	for i, f := range fracs {
		n := &node{id: i, shards: f, owned: f.Owned(), workers: s.nodeWorkers(i), atCeiling: make([][]int, nt)}
		nodes[i] = n
		if n.workers == 0 {
			bounded = false
		}
		capacity += n.workers
		if n.bp, err = backpressure.New(cfg.backpressureConfig(s, clock.Now), f); err != nil {
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
	// prioWaits and prioRows are, per tenant with priorities, the waits
	// and rows of each priority class.
	prioWaits := make([]map[int][]time.Duration, nt)
	prioRows := make([]map[int]int, nt)
	for i, t := range s.Tenants {
		if len(t.Priorities) > 0 {
			prioWaits[i], prioRows[i] = map[int][]time.Duration{}, map[int]int{}
		}
	}
	for _, a := range w.arrivals {
		if prioRows[a.tenant] != nil {
			prioRows[a.tenant][a.priority]++
		}
	}
	var meter *startMeter
	if s.hasRates() {
		meter = newStartMeter(s)
	}
	capped := s.hasPendingCaps()
	rejected := make([]bool, len(w.arrivals))
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

	// A failed node's claims are orphans until their leases run out: still
	// claimed (in flight, counted by the owner's headroom), then pending
	// again, and claimed anew by whoever owns the shard. expected counts
	// the claims a row should see: one, plus one per orphaned claim.
	orphans := map[int][]job{} // by the tick the lease runs out
	orphanCount := 0
	orphan := make([]int8, len(w.arrivals))
	expected := make([]int, len(w.arrivals))
	// claimedOn counts, per tenant and shard, rows under a live claim,
	// whoever holds it: what a node's headroom counts.
	claimedOn := make([][]int, nt)
	for i := range claimedOn {
		claimedOn[i] = make([]int, s.ShardCount)
	}
	// bound is, per tenant, Σ over nodes of the node's ceiling (0 on a node
	// that owns no shard): the most the current owners let it hold.
	bound := make([]int, nt)
	setBound := func() {
		for i, t := range s.Tenants {
			bound[i] = clusterCeiling(nodes, t.Name, cfg.quotas[i])
		}
	}
	setBound()

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
		claimedOn[j.tenant][j.shard]--
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
				if err := n.bp.SetConfig(cfg.backpressureConfig(s, clock.Now)); err != nil {
					return nil, fmt.Errorf("changes[%d]: %w", nextChange, err)
				}
			}
			nextChange++
			setBound()
		}

		// 0b. Membership: nodes that fail now stop, before this tick's
		// settles, leaving their claims to run out; then leases that ran
		// out put orphans back; then ownership moves as the members
		// changed, before the tick's sweeps.
		if nextEvent < len(mem.events) && mem.events[nextEvent] == t {
			for _, n := range nodes {
				if mem.fail[n.id] != t {
					continue
				}
				for at, js := range due {
					kept := js[:0]
					for _, j := range js {
						if j.node != n {
							kept = append(kept, j)
							continue
						}
						orphans[j.expires] = append(orphans[j.expires], j)
						orphan[j.idx] = orphanLeased
						orphanCount++
						running--
					}
					due[at] = kept
				}
				n.running = 0
				if n.d != nil {
					n.d.crash()
				}
				rep.Events = append(rep.Events, fmt.Sprintf("%v node-%d fails", time.Duration(t)*s.Tick, n.id))
			}
		}
		for _, j := range orphans[t] {
			if orphan[j.idx] != orphanLeased {
				continue // claimed again already
			}
			orphan[j.idx] = orphanExpired
			orphanCount--
			inflight[j.tenant]--
			claimedOn[j.tenant][j.shard]--
			waiting[j.tenant]++
			waitingTotal++
		}
		delete(orphans, t)
		if nextEvent < len(mem.events) && mem.events[nextEvent] == t {
			nextEvent++
			owner = mem.owners(t, s.ShardCount)
			history = append(history, ownerSnap{t, owner})
			fracs, err := fractions(owner, s.Nodes, s.ShardCount)
			if err != nil {
				return nil, err
			}
			for i, n := range nodes {
				if n.shards.Equal(fracs[i]) {
					continue
				}
				rep.Events = append(rep.Events, fmt.Sprintf("%v node-%d: %d → %d shards", time.Duration(t)*s.Tick, n.id, len(n.owned), fracs[i].OwnedCount()))
				n.shards, n.owned = fracs[i], fracs[i].Owned()
				if err := n.bp.SetOwnedShards(fracs[i]); err != nil {
					return nil, fmt.Errorf("node %d: %w", n.id, err)
				}
			}
			setBound()
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

		// 2. Producers enqueue the tick's arrivals. Under pending caps,
		// each tenant's producer enqueues its own and drops the rows the
		// store refuses.
		if t < len(w.perTick) && len(w.perTick[t]) > 0 {
			var refused []arrival
			var err error
			if capped {
				refused, err = enqueueCapped(ctx, ob, s, w.perTick[t])
			} else {
				err = enqueue(ctx, ob, s, w.perTick[t])
			}
			if err != nil {
				return nil, fmt.Errorf("%s: enqueue: %w", ob.Name(), err)
			}
			for _, a := range refused {
				i := w.byKey[a.key]
				rejected[i] = true
				rep.Tenants[a.tenant].Rejected++
				if !paused[a.tenant] {
					wanted--
				}
			}
			for _, a := range w.perTick[t] {
				waiting[a.tenant]++
			}
			for _, a := range refused {
				waiting[a.tenant]--
			}
			waitingTotal += len(w.perTick[t]) - len(refused)
			lastProgress = t
			if capped {
				for i := range nt {
					rep.Tenants[i].PeakUnfinished = max(rep.Tenants[i].PeakUnfinished, waiting[i]+inflight[i])
				}
			}
		}

		// 3. Every node with min(workers, batch) free workers sweeps once.
		backlogged := make([]bool, nt)
		for i := range nt {
			backlogged[i] = waiting[i] > 0 && (cfg.quotas[i] < 0 || inflight[i] < cfg.quotas[i])
		}
		clear(claimedTick)
		claimedNow, swept := 0, false
		for _, n := range nodes {
			if !mem.live(n.id, t) {
				continue
			}
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
				if rejected[i] {
					return nil, fmt.Errorf("%s: node %d claimed %q, a row the store refused to enqueue", ob.Name(), n.id, r.DispatchKey)
				}
				switch {
				case claimedKey[i] && orphan[i] != notOrphan:
					// A failed node's row, claimed anew.
					rep.Audit.Recovered++
					expected[i]++
					if orphan[i] == orphanExpired {
						waiting[a.tenant]--
						waitingTotal--
					} else {
						orphanCount--
						inflight[a.tenant]--
						claimedOn[a.tenant][r.Shard]--
					}
					orphan[i] = notOrphan
				case claimedKey[i]:
					rep.Audit.ClaimedAgain++
				default:
					expected[i] = 1
					claimedKey[i] = true
					claimTick[i] = t
					waiting[a.tenant]--
					waitingTotal--
					claimedTotal++
				}
				claimedTick[a.tenant]++
				rep.Tenants[a.tenant].Claimed++
				waits[a.tenant] = append(waits[a.tenant], r.ClaimedAt.Sub(r.EnqueuedAt))
				if pw := prioWaits[a.tenant]; pw != nil {
					pw[a.priority] = append(pw[a.priority], r.ClaimedAt.Sub(r.EnqueuedAt))
				}
				inflight[a.tenant]++
				claimedOn[a.tenant][r.Shard]++
				n.running++
				running++
				expires := int(ceilTicks(r.LeaseExpiresAt.Sub(epoch), s.Tick))
				due[t+a.service] = append(due[t+a.service], job{idx: i, lease: r.Lease(), tenant: a.tenant, shard: r.Shard, expires: expires, node: n})
			}
			claimedNow += len(rows)
			if p == Backpressure {
				// The planner's promise, node by node: after a sweep that
				// claimed a tenant's rows, the rows claimed on the node's
				// shards, whoever claimed them, are within its ceiling.
				mine := map[int]bool{}
				for _, r := range rows {
					mine[w.arrivals[w.byKey[r.DispatchKey]].tenant] = true
				}
				for i := range mine {
					if cfg.quotas[i] == backpressure.Unlimited {
						continue
					}
					k := 0
					for _, sh := range n.owned {
						k += claimedOn[i][sh]
					}
					if k > n.bp.Ceiling(s.Tenants[i].Name) {
						rep.Tenants[i].OverNodeCeiling++
					}
				}
			}
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
			if meter != nil {
				meter.add(claimedTick)
			}
			for i := range nt {
				tr := &rep.Tenants[i]
				if inflight[i] > tr.PeakInflight {
					tr.PeakInflight, tr.PeakCeiling = inflight[i], bound[i]
				}
				if cfg.quotas[i] != backpressure.Unlimited {
					over := inflight[i] - bound[i]
					tr.OverOwnersCeiling = max(tr.OverOwnersCeiling, over)
					if claimedTick[i] > 0 {
						tr.OverAtClaim = max(tr.OverAtClaim, over)
					}
				}
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
		changesDone := nextChange == len(changeTicks) && nextEvent == len(mem.events)
		if t >= w.lastTick && running == 0 && orphanCount == 0 && changesDone {
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
			if nextChange < len(changeTicks) {
				next = min(next, changeTicks[nextChange])
			}
			if nextEvent < len(mem.events) {
				next = min(next, mem.events[nextEvent])
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
		rep.Tenants[i].PendingCap = s.pendingCap(i)
		if prioRows[i] != nil {
			rep.Tenants[i].ByPriority = priorityWaits(prioRows[i], prioWaits[i])
		}
		if meter != nil {
			rep.Tenants[i].Starts = meter.report(i, s.Tenants[i].Rate, ownersEver(history, s.Nodes))
		}
	}
	rep.Timeline = Timeline{Tick: time.Duration(timeline.stride) * s.Tick, Inflight: timeline.vals}
	if meter != nil {
		rep.Starts = Timeline{Tick: time.Duration(meter.series.stride) * s.Tick, Inflight: meter.series.vals}
		rep.startsPerTick = meter.perTick
	}

	// A row was held at the ceiling when, between its enqueue and its
	// claim (or the end, for a row never claimed), a sweep of the node
	// that owns its shard held its tenant at the ceiling.
	if p == Backpressure {
		for i, a := range w.arrivals {
			end := math.MaxInt
			if claimedKey[i] {
				end = claimTick[i]
			}
			if heldAtCeiling(nodes, history, backpressure.ShardFor(a.key, s.ShardCount), a.tenant, a.tick, end) {
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
	if err := audit(ctx, ob, s, w, paused, rejected, expected, &rep.Audit); err != nil {
		return nil, fmt.Errorf("%s: audit: %w", ob.Name(), err)
	}
	return rep, nil
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
	case Backpressure:
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
