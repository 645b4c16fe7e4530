package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
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
	bp      *backpressure.Backpressure // Backpressure policy only
	rr      routeRobin                 // RoundRobin policy only
	running int                        // rows its workers are running

	// atCeiling lists, per tenant, the ticks in which the node's sweep held
	// the tenant at its ceiling, ascending (Backpressure policy only).
	atCeiling [][]int
}

// job is a claimed row a worker is running.
type job struct {
	idx    int // index into workload.arrivals
	token  int64
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

// nodeShards deals the shards out to the nodes in turn: shard s goes to
// node s mod nodes.
func nodeShards(nodes, shardCount int) ([]backpressure.OwnedShardFraction, error) {
	owned := make([][]int, nodes)
	for s := range shardCount {
		owned[s%nodes] = append(owned[s%nodes], s)
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

// runPolicy replays w under policy p on a fresh outbox from db and measures
// it.
func runPolicy(ctx context.Context, s Scenario, w *workload, p Policy, db database, progress func(tick, settled int)) (*PolicyReport, error) {
	clock := &simClock{tick: s.Tick}
	ob, err := db.Open(ctx, string(p), storeOptions{ShardCount: s.ShardCount, Lease: s.Lease, Now: clock.Now})
	if err != nil {
		return nil, err
	}
	defer ob.Close()

	tenantIdx := make(map[string]int, len(s.Tenants))
	quotas := make(map[string]int, len(s.Tenants))
	for i, t := range s.Tenants {
		tenantIdx[t.Name] = i
		quotas[t.Name] = t.Quota
	}
	fractions, err := nodeShards(s.Nodes, s.ShardCount)
	if err != nil {
		return nil, err
	}
	nodes := make([]*node, s.Nodes)
	for i, f := range fractions {
		nodes[i] = &node{id: i, shards: f, atCeiling: make([][]int, len(s.Tenants))}
		if p == Backpressure {
			nodes[i].bp, err = backpressure.New(backpressure.Config{
				BatchSize:    s.BatchSize,
				DefaultQuota: backpressure.Unlimited,
				Quotas:       quotas,
			}, f)
			if err != nil {
				return nil, err
			}
		}
	}

	nt := len(s.Tenants)
	rep := &PolicyReport{Policy: p, Description: p.Describe(), Database: db.ReportName(string(p))}
	rep.Tenants = make([]TenantReport, nt)
	for i, t := range s.Tenants {
		tr := &rep.Tenants[i]
		tr.Name, tr.Quota, tr.Queues, tr.Rows = t.Name, t.Quota, t.Queues, w.perTenant[i]
		tr.ClusterCeiling = clusterCeiling(fractions, t.Quota)
	}
	waits := make([][]time.Duration, nt)
	inflight := make([]int, nt) // claimed, not yet settled
	waiting := make([]int, nt)  // enqueued, never claimed
	waitingTotal := 0
	timeline := newSampler(nt)
	claimedKey := make([]bool, len(w.arrivals))
	settledKey := make([]bool, len(w.arrivals))
	claimTick := make([]int, len(w.arrivals))
	due := map[int][]job{}
	running := 0 // claims whose worker has not finished
	total, settled, claimedTotal := len(w.arrivals), 0, 0
	var jainSum float64
	jainTicks := 0
	xs := make([]float64, 0, nt)
	lastSettle := 0
	// lastProgress is the last tick in which a row arrived or a settle
	// succeeded. In a valid scenario a running row settles within the
	// longest service time of its claim; a run in which rows keep running
	// for longer than that plus a lease without a settle is going round in
	// claims that each outlive their lease, and is given up (see below).
	lastProgress := 0
	stuckAfter := int(ceilTicks(s.Lease, s.Tick)) + w.maxService + 1

	for t := 0; ; t++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if t > maxRunTicks {
			return nil, fmt.Errorf("%w: %d of %d rows settled after %d ticks", ErrStalled, settled, total, t)
		}
		clock.set(t)

		// 1. Workers finish: settle the rows whose service time is over.
		// Only a settle the store accepts counts: a refused one leaves the
		// row to the claim that holds it now, or pending once more.
		for _, r := range due[t] {
			switch err := ob.Settle(ctx, w.arrivals[r.idx].key, r.token); {
			case errors.Is(err, errLeaseLost):
				// Someone claimed the row while this worker ran it, or its
				// lease ran out: the audit reports it.
				rep.Audit.LeaseLost++
				if len(rep.Audit.Examples) < maxExamples {
					rep.Audit.Examples = append(rep.Audit.Examples, w.arrivals[r.idx].key+" (lease lost at settle)")
				}
			case err != nil:
				return nil, fmt.Errorf("%s: settling %q: %w", ob.Name(), w.arrivals[r.idx].key, err)
			default:
				if !settledKey[r.idx] {
					settledKey[r.idx] = true
					settled++
				}
				lastSettle, lastProgress = t, t
			}
			r.node.running--
			inflight[r.tenant]--
			running--
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

		// 3. Every node with a batch's worth of free workers sweeps once.
		claimedNow := 0
		for _, n := range nodes {
			if s.WorkersPerNode > 0 && s.WorkersPerNode-n.running < s.BatchSize {
				continue
			}
			rows, err := sweep(ctx, p, n, t, ob, s.BatchSize, rep, tenantIdx)
			if err != nil {
				return nil, fmt.Errorf("%s: node %d sweep (%s): %w", ob.Name(), n.id, p, err)
			}
			for _, r := range rows {
				i, ok := w.byKey[r.Key]
				if !ok {
					return nil, fmt.Errorf("%s: node %d claimed %q, a key the run never enqueued", ob.Name(), n.id, r.Key)
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
				rep.Tenants[a.tenant].Claimed++
				waits[a.tenant] = append(waits[a.tenant], r.ClaimedAt.Sub(r.EnqueuedAt))
				inflight[a.tenant]++
				n.running++
				running++
				due[t+a.service] = append(due[t+a.service], job{idx: i, token: r.Token, tenant: a.tenant, node: n})
			}
			claimedNow += len(rows)
		}

		// 4. Measure the tick.
		measure := func() {
			xs = xs[:0]
			timeline.add(inflight)
			for i := range nt {
				rep.Tenants[i].PeakInflight = max(rep.Tenants[i].PeakInflight, inflight[i])
				if x, ok := entitledShare(inflight[i], waiting[i], s.Tenants[i].Quota); ok {
					xs = append(xs, x)
				}
			}
			// Ticks in which every tenant that wants rows holds none say
			// nothing about how the rows were shared: they are skipped.
			if len(xs) >= 2 {
				if j, ok := jain(xs); ok {
					jainSum += j
					jainTicks++
				}
			}
		}
		measure()
		if progress != nil {
			progress(t, settled)
		}

		// 5. The end: nothing due, running or pending, and nothing more to
		// arrive.
		if t >= w.lastTick && running == 0 {
			if settled == total {
				break
			}
			if claimedNow == 0 {
				return nil, fmt.Errorf("%w at tick %d under %s: %d of %d rows settled, none running, none claimable", ErrStalled, t, p, settled, total)
			}
		}
		if running > 0 && t-lastProgress > stuckAfter {
			// Every running claim keeps outliving its lease and being
			// claimed again: give up, and let the audit say what it did.
			rep.GaveUp = true
			break
		}

		// 6. Idle: nothing running, nothing waiting and every claimed row
		// settled. The ticks up to the next arrival change nothing but the
		// timeline, so they are recorded without sweeping.
		if running == 0 && waitingTotal == 0 && settled == claimedTotal {
			next := w.nextArrival(t + 1)
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
	}
	rep.Timeline = Timeline{Tick: time.Duration(timeline.stride) * s.Tick, Inflight: timeline.vals}

	// A row was held at the ceiling when, between its enqueue and its
	// claim, a sweep of the node that owns its shard held its tenant at
	// the ceiling.
	if p == Backpressure {
		for i, a := range w.arrivals {
			ticks := nodes[backpressure.ShardFor(a.key, s.ShardCount)%s.Nodes].atCeiling[a.tenant]
			k, _ := slices.BinarySearch(ticks, a.tick)
			if k < len(ticks) && ticks[k] < claimTick[i] {
				rep.Tenants[a.tenant].HeldAtCeiling++
			}
		}
	}

	if err := audit(ctx, ob, s, w, &rep.Audit); err != nil {
		return nil, fmt.Errorf("%s: audit: %w", ob.Name(), err)
	}
	return rep, nil
}

// sweep makes node n's one sweep under policy p and returns the rows it
// claimed. For the backpressure policy it adds the plan's held rows to rep
// and records the tick in n.atCeiling for the tenants held at the ceiling.
func sweep(ctx context.Context, p Policy, n *node, tick int, ob outbox, batch int, rep *PolicyReport, tenantIdx map[string]int) ([]row, error) {
	switch p {
	case Unscoped:
		return ob.ClaimUnscoped(ctx, n.shards, batch)
	case RoundRobin:
		pending, err := ob.CountPendingOutboxRows(ctx, n.shards, batch)
		if err != nil {
			return nil, err
		}
		claims := n.rr.plan(pending, batch)
		if len(claims) == 0 {
			return nil, nil
		}
		return ob.ClaimOutboxRowsScoped(ctx, n.shards, claims)
	case Backpressure:
		rows, plan, err := backpressure.Sweep(ctx, n.bp, ob)
		if err != nil {
			return nil, err
		}
		for _, ns := range plan.Namespaces {
			if ns.Reason != backpressure.HeldAtCeiling {
				continue
			}
			if i, ok := tenantIdx[ns.Namespace]; ok {
				rep.Tenants[i].HeldRowSweeps += ns.Held
				rep.Tenants[i].SweepsAtCeiling++
				n.atCeiling[i] = append(n.atCeiling[i], tick)
			}
		}
		return rows, nil
	}
	return nil, fmt.Errorf("bpsim: unknown policy %q", p)
}

func enqueue(ctx context.Context, ob outbox, s Scenario, arrivals []arrival) error {
	for lo := 0; lo < len(arrivals); lo += enqueueChunk {
		batch := arrivals[lo:min(lo+enqueueChunk, len(arrivals))]
		msgs := make([]message, len(batch))
		for i, a := range batch {
			msgs[i] = message{Key: a.key, Namespace: s.Tenants[a.tenant].Name, TaskQueue: a.queue}
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

// clusterCeiling is Σ over nodes of the per-node ceiling of quota: what the
// backpressure policy lets a tenant hold cluster-wide. It is at least the
// quota and at most quota + nodes − 1, because each node rounds up.
func clusterCeiling(fractions []backpressure.OwnedShardFraction, quota int) int {
	if quota == backpressure.Unlimited {
		return backpressure.Unlimited
	}
	sum := 0
	for _, f := range fractions {
		sum += f.Ceiling(quota)
	}
	return sum
}
