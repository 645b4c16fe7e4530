package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// runPolicy replays w under policy p on a fresh outbox from db and measures
// it: the run's setup, then its ticks, each in the steps of [policyRun.tick],
// then the report.
func runPolicy(ctx context.Context, s Scenario, w *workload, p Policy, db database, progress func(tick, settled int)) (*PolicyReport, error) {
	s = armScenario(s, p)
	r := &policyRun{s: s, w: w, p: p, progress: progress, clock: &simClock{tick: s.Tick}}
	defer r.close()
	if err := r.open(ctx, db); err != nil {
		return nil, err
	}
	if err := r.startNodes(ctx); err != nil {
		return nil, err
	}
	r.start(db)
	for t := 0; ; t++ {
		next, end, err := r.tick(ctx, t)
		if err != nil {
			return nil, err
		}
		if end {
			break
		}
		t = next
	}
	r.report()
	// Stop the dispatchers before the audit re-enqueues every key, so that
	// none claims a row the audit is about to read.
	for _, n := range r.nodes {
		if n.d != nil {
			n.d.stop()
		}
	}
	if err := audit(ctx, r.ob, s, w, r.paused, r.rejected, r.expected, &r.rep.Audit); err != nil {
		return nil, fmt.Errorf("%s: audit: %w", r.ob.Name(), err)
	}
	return r.rep, nil
}

// policyRun is one run of a policy: the store and the nodes, the rows'
// states as the lockstep tracks them, and the measures the report is made
// of. Not safe for concurrent use: the run's ticks are one goroutine's.
type policyRun struct {
	s        Scenario
	w        *workload
	p        Policy
	progress func(tick, settled int)
	clock    *simClock
	ob       *simStore

	nt          int // tenants
	tenantIdx   map[string]int
	cfg         tenantConfig
	paused      []bool // per tenant, paused at the end (see pausedAtEnd)
	changeTicks []int
	nextChange  int // index into s.Changes

	mem       *membership
	owner     []int
	history   []ownerSnap
	nextEvent int // index into mem.events
	nodes     []*node
	capacity  int // workers over the cluster; 0 when some node has no bound

	rep   *PolicyReport
	waits [][]time.Duration
	// prioWaits and prioRows are, per tenant with priorities, the waits
	// and rows of each priority class.
	prioWaits []map[int][]time.Duration
	prioRows  []map[int]int
	meter     *startMeter
	capped    bool

	rejected     []bool
	inflight     []int // claimed, not yet settled
	waiting      []int // enqueued, never claimed
	starved      []int // sweeps in a row without a claim while backlogged under quota
	claimedTick  []int
	waitingTotal int
	timeline     *sampler
	claimedKey   []bool
	settledKey   []bool
	claimTick    []int
	due          map[int][]job
	running      int // claims whose worker has not finished

	total, settled, claimedTotal int
	// wanted is the rows the run waits for: all but a paused tenant's.
	wanted, settledWanted int
	jainSum               float64
	jainTicks             int
	lastSettle            int
	// lastProgress is the last tick in which a row arrived or a settle
	// succeeded. In a valid scenario a running row settles within the
	// longest service time of its claim; a run in which rows keep running
	// for longer than that plus a lease without a settle is going round in
	// claims that each outlive their lease, and is given up (see tick).
	lastProgress int
	stuckAfter   int
	ent          *entitlement

	// A failed node's claims are orphans until their leases run out: still
	// claimed (in flight, counted by the owner's headroom), then pending
	// again, and claimed anew by whoever owns the shard. expected counts
	// the claims a row should see: one, plus one per orphaned claim.
	orphans     map[int][]job // by the tick the lease runs out
	orphanCount int
	orphan      []int8
	expected    []int
	// claimedOn counts, per tenant and shard, rows under a live claim,
	// whoever holds it: what a node's headroom counts.
	claimedOn [][]int
	// bound is, per tenant, Σ over nodes of the node's ceiling (0 on a node
	// that owns no shard): the most the current owners let it hold.
	bound []int

	// ds is, per tenant, its downstream (nil: none; nil slice: no tenant
	// has one). snoozed marks the rows a 429 put back to pending, whose
	// next claim is expected; snoozedUntil is the first tick at which
	// every snoozed row is claimable again.
	ds           []*downstreamRun
	snoozed      []bool
	snoozedUntil int
	window       int // the arrival window in ticks
}

// open opens the run's fresh outbox.
func (r *policyRun) open(ctx context.Context, db database) error {
	s := r.s
	ob, err := db.Open(ctx, string(r.p), storeOptions{ShardCount: s.ShardCount, Lease: s.Lease, Now: r.clock.Now, PendingCaps: s.pendingCaps()})
	if err != nil {
		return err
	}
	r.ob = ob
	return nil
}

// close stops the nodes' dispatchers, last started first, then closes the
// outbox.
func (r *policyRun) close() {
	for i := len(r.nodes) - 1; i >= 0; i-- {
		if d := r.nodes[i].d; d != nil {
			d.stop()
		}
	}
	if r.ob != nil {
		r.ob.Close()
	}
}

// startNodes reads the scenario's tenants, changes and membership, and
// starts the nodes: each its planner and, under backpressure, its
// dispatcher.
func (r *policyRun) startNodes(ctx context.Context) error {
	s, w := r.s, r.w
	r.nt = len(s.Tenants)
	r.tenantIdx = make(map[string]int, r.nt)
	for i, t := range s.Tenants {
		r.tenantIdx[t.Name] = i
	}
	r.cfg = initialConfig(s)
	r.paused = pausedAtEnd(s, r.tenantIdx)
	r.changeTicks = make([]int, len(s.Changes))
	for i, ch := range s.Changes {
		r.changeTicks[i] = int(ch.At / s.Tick)
	}

	r.mem = newMembership(s)
	r.owner = r.mem.owners(0, s.ShardCount)
	r.history = []ownerSnap{{0, r.owner}}
	fracs, err := fractions(r.owner, s.Nodes, s.ShardCount)
	if err != nil {
		return err
	}
	bounded := true
	for i, f := range fracs {
		n := &node{id: i, shards: f, owned: f.Owned(), workers: s.nodeWorkers(i), atCeiling: make([][]int, r.nt)}
		r.nodes = append(r.nodes, n)
		if n.workers == 0 {
			bounded = false
		}
		r.capacity += n.workers
		if n.bp, err = backpressure.New(r.cfg.backpressureConfig(s, r.clock.Now), f); err != nil {
			return err
		}
		if r.p.dispatched() {
			workers := n.workers
			if workers == 0 {
				// Unlimited: one worker per row of the run is as many as
				// could ever run at once.
				workers = max(len(w.arrivals), 1)
			}
			if n.d, err = startDispatchNode(ctx, n.bp, r.ob, workers, len(w.arrivals), armOptions(r.p, s, r.clock)); err != nil {
				return err
			}
		}
	}
	if !bounded {
		r.capacity = 0
	}
	return nil
}

// start sets up the report and the rows' states before the first tick.
func (r *policyRun) start(db database) {
	s, w, nt := r.s, r.w, r.nt
	r.rep = &PolicyReport{Policy: r.p, Description: r.p.Describe(), Database: db.ReportName(string(r.p))}
	r.rep.Tenants = make([]TenantReport, nt)
	for i, t := range s.Tenants {
		tr := &r.rep.Tenants[i]
		tr.Name, tr.Quota, tr.Weight, tr.Queues, tr.Rows = t.Name, t.Quota, max(t.Weight, 1), t.Queues, w.perTenant[i]
		tr.ClusterCeiling = clusterCeiling(r.nodes, t.Name, t.Quota)
		tr.Paused = r.paused[i]
	}
	r.waits = make([][]time.Duration, nt)
	r.prioWaits = make([]map[int][]time.Duration, nt)
	r.prioRows = make([]map[int]int, nt)
	for i, t := range s.Tenants {
		if len(t.Priorities) > 0 {
			r.prioWaits[i], r.prioRows[i] = map[int][]time.Duration{}, map[int]int{}
		}
	}
	for _, a := range w.arrivals {
		if r.prioRows[a.tenant] != nil {
			r.prioRows[a.tenant][a.priority]++
		}
	}
	if s.hasRates() {
		r.meter = newStartMeter(s)
	}
	r.capped = s.hasPendingCaps()
	r.rejected = make([]bool, len(w.arrivals))
	r.inflight = make([]int, nt)
	r.waiting = make([]int, nt)
	r.starved = make([]int, nt)
	r.claimedTick = make([]int, nt)
	r.timeline = newSampler(nt)
	r.claimedKey = make([]bool, len(w.arrivals))
	r.settledKey = make([]bool, len(w.arrivals))
	r.claimTick = make([]int, len(w.arrivals))
	r.due = map[int][]job{}
	r.total = len(w.arrivals)
	for i := range w.arrivals {
		if !r.paused[w.arrivals[i].tenant] {
			r.wanted++
		}
	}
	r.stuckAfter = int(ceilTicks(s.Lease, s.Tick)) + w.maxService + 1
	r.ent = newEntitlement(nt)
	r.orphans = map[int][]job{}
	r.orphan = make([]int8, len(w.arrivals))
	r.expected = make([]int, len(w.arrivals))
	r.claimedOn = make([][]int, nt)
	for i := range r.claimedOn {
		r.claimedOn[i] = make([]int, s.ShardCount)
	}
	r.bound = make([]int, nt)
	r.setBound()
	r.ds = newDownstreams(s, r.p)
	r.snoozed = make([]bool, len(w.arrivals))
	r.window = int(s.Duration / s.Tick)
}

// setBound recomputes bound from the nodes' ceilings.
func (r *policyRun) setBound() {
	for i, t := range r.s.Tenants {
		r.bound[i] = clusterCeiling(r.nodes, t.Name, r.cfg.quotas[i])
	}
}

// tick runs tick t in its steps, and returns the last tick it covered
// (after t when the run was idle) and whether the run ended.
func (r *policyRun) tick(ctx context.Context, t int) (last int, end bool, err error) {
	if err := ctx.Err(); err != nil {
		return t, false, err
	}
	if t > maxRunTicks {
		return t, false, fmt.Errorf("%w: %d of %d rows settled after %d ticks", ErrStalled, r.settled, r.total, t)
	}
	r.clock.set(t)
	if err := r.applyChanges(t); err != nil { // 0.
		return t, false, err
	}
	for _, d := range r.ds {
		if d != nil {
			d.advance(t, r.s.Tick)
		}
	}
	if err := r.moveMembers(t); err != nil { // 0b.
		return t, false, err
	}
	if err := r.settleDue(ctx, t); err != nil { // 1.
		return t, false, err
	}
	if err := r.enqueueArrivals(ctx, t); err != nil { // 2.
		return t, false, err
	}
	claimedNow, err := r.sweepNodes(ctx, t) // 3.
	if err != nil {
		return t, false, err
	}
	r.measure() // 4.
	if r.progress != nil {
		r.progress(t, r.settled)
	}
	if end, err := r.ended(t, claimedNow); end || err != nil { // 5.
		return t, end, err
	}
	return r.skipIdle(t), false, nil // 6.
}

// applyChanges is a tick's step 0: the configuration changes due by now,
// before the tick's sweeps.
func (r *policyRun) applyChanges(t int) error {
	for r.nextChange < len(r.changeTicks) && r.changeTicks[r.nextChange] <= t {
		r.cfg.apply(r.s.Changes[r.nextChange], r.tenantIdx)
		for _, n := range r.nodes {
			if err := n.bp.SetConfig(r.cfg.backpressureConfig(r.s, r.clock.Now)); err != nil {
				return fmt.Errorf("changes[%d]: %w", r.nextChange, err)
			}
		}
		r.nextChange++
		r.setBound()
	}
	return nil
}

// moveMembers is a tick's step 0b, membership: nodes that fail now stop,
// before this tick's settles, leaving their claims to run out; then leases
// that ran out put orphans back; then ownership moves as the members
// changed, before the tick's sweeps.
func (r *policyRun) moveMembers(t int) error {
	s := r.s
	if r.nextEvent < len(r.mem.events) && r.mem.events[r.nextEvent] == t {
		for _, n := range r.nodes {
			if r.mem.fail[n.id] == t {
				r.failNode(t, n)
			}
		}
	}
	for _, j := range r.orphans[t] {
		if r.orphan[j.idx] != orphanLeased {
			continue // claimed again already
		}
		r.orphan[j.idx] = orphanExpired
		r.orphanCount--
		r.inflight[j.tenant]--
		r.claimedOn[j.tenant][j.shard]--
		r.waiting[j.tenant]++
		r.waitingTotal++
	}
	delete(r.orphans, t)
	if r.nextEvent < len(r.mem.events) && r.mem.events[r.nextEvent] == t {
		r.nextEvent++
		r.owner = r.mem.owners(t, s.ShardCount)
		r.history = append(r.history, ownerSnap{t, r.owner})
		fracs, err := fractions(r.owner, s.Nodes, s.ShardCount)
		if err != nil {
			return err
		}
		for i, n := range r.nodes {
			if n.shards.Equal(fracs[i]) {
				continue
			}
			r.rep.Events = append(r.rep.Events, fmt.Sprintf("%v node-%d: %d → %d shards", time.Duration(t)*s.Tick, n.id, len(n.owned), fracs[i].OwnedCount()))
			n.shards, n.owned = fracs[i], fracs[i].Owned()
			if err := n.bp.SetOwnedShards(fracs[i]); err != nil {
				return fmt.Errorf("node %d: %w", n.id, err)
			}
		}
		r.setBound()
	}
	return nil
}

// failNode stops node n at tick t: its running claims become orphans.
func (r *policyRun) failNode(t int, n *node) {
	for at, js := range r.due {
		kept := js[:0]
		for _, j := range js {
			if j.node != n {
				kept = append(kept, j)
				continue
			}
			r.orphans[j.expires] = append(r.orphans[j.expires], j)
			r.orphan[j.idx] = orphanLeased
			r.orphanCount++
			r.running--
		}
		r.due[at] = kept
	}
	n.running = 0
	if n.d != nil {
		n.d.crash()
	}
	r.rep.Events = append(r.rep.Events, fmt.Sprintf("%v node-%d fails", time.Duration(t)*r.s.Tick, n.id))
}

// settleDue is a tick's step 1, workers finish: settle the rows whose
// service time is over. Only a settle the store accepts counts: a refused
// one leaves the row to the claim that holds it now, or pending once more.
// Under backpressure, the node's dispatcher settles them.
func (r *policyRun) settleDue(ctx context.Context, t int) error {
	if r.p.dispatched() {
		for _, n := range r.nodes {
			var leases []outbox.Lease
			var results []error
			jobs := map[outbox.Lease]job{}
			for _, j := range r.due[t] {
				if j.node == n {
					leases = append(leases, j.lease)
					results = append(results, j.result(r.s))
					jobs[j.lease] = j
				}
			}
			if len(leases) == 0 {
				continue
			}
			done, err := n.d.settle(ctx, leases, results)
			if err != nil {
				return fmt.Errorf("%s: node %d: %w", r.ob.Name(), n.id, err)
			}
			// In the order released, whatever order the completer wrote.
			byLease := make(map[outbox.Lease]completion, len(done))
			for _, c := range done {
				byLease[c.lease] = c
			}
			for _, l := range leases {
				c, j := byLease[l], jobs[l]
				if want := j.outcome(); c.err == nil && c.outcome != want {
					return fmt.Errorf("%s: node %d completed %q with %v, want %v", r.ob.Name(), n.id, r.w.arrivals[j.idx].key, c.outcome, want)
				}
				if j.rejected && c.err == nil {
					r.snooze(t, j)
					continue
				}
				if err := r.settle(t, j, c.err); err != nil {
					return err
				}
			}
		}
	} else {
		for _, j := range r.due[t] {
			if err := r.settle(t, j, r.ob.Settle(ctx, j.lease)); err != nil {
				return err
			}
		}
	}
	delete(r.due, t)
	return nil
}

// settle records the settle of job j at tick t, which the store answered
// with err.
func (r *policyRun) settle(t int, j job, err error) error {
	switch {
	case errors.Is(err, outbox.ErrLeaseLost):
		// Someone claimed the row while this worker ran it, or its
		// lease ran out: the audit reports it.
		r.rep.Audit.LeaseLost++
		if len(r.rep.Audit.Examples) < maxExamples {
			r.rep.Audit.Examples = append(r.rep.Audit.Examples, r.w.arrivals[j.idx].key+" (lease lost at settle)")
		}
	case err != nil:
		return fmt.Errorf("%s: settling %q: %w", r.ob.Name(), r.w.arrivals[j.idx].key, err)
	default:
		if !r.settledKey[j.idx] {
			r.settledKey[j.idx] = true
			r.settled++
			if !r.paused[j.tenant] {
				r.settledWanted++
			}
		}
		r.lastSettle, r.lastProgress = t, t
	}
	if d := r.downstream(j.tenant); d != nil {
		d.done(t, j.rejected, r.window)
	}
	j.node.running--
	r.inflight[j.tenant]--
	r.claimedOn[j.tenant][j.shard]--
	r.running--
	return nil
}

// downstream is tenant i's downstream, or nil.
func (r *policyRun) downstream(i int) *downstreamRun {
	if r.ds == nil {
		return nil
	}
	return r.ds[i]
}

// snooze records at tick t job j's call answered 429, which the
// dispatcher snoozed: the row is pending again, claimable after the
// Retry-After, and its next claim is expected.
func (r *policyRun) snooze(t int, j job) {
	d := r.ds[j.tenant]
	d.done(t, true, r.window)
	r.snoozed[j.idx] = true
	wait := d.spec.RetryAfter
	if wait == 0 {
		wait = time.Second // dispatch's default OverloadSnooze
	}
	r.snoozedUntil = max(r.snoozedUntil, t+int(ceilTicks(wait, r.s.Tick))+1)
	r.rep.Tenants[j.tenant].Snoozed++
	j.node.running--
	r.inflight[j.tenant]--
	r.claimedOn[j.tenant][j.shard]--
	r.running--
	r.waiting[j.tenant]++
	r.waitingTotal++
	r.lastProgress = t
}

// enqueueArrivals is a tick's step 2, producers enqueue the tick's
// arrivals. Under pending caps, each tenant's producer enqueues its own and
// drops the rows the store refuses.
func (r *policyRun) enqueueArrivals(ctx context.Context, t int) error {
	w := r.w
	if t >= len(w.perTick) || len(w.perTick[t]) == 0 {
		return nil
	}
	var refused []arrival
	var err error
	if r.capped {
		refused, err = enqueueCapped(ctx, r.ob, r.s, w.perTick[t])
	} else {
		err = enqueue(ctx, r.ob, r.s, w.perTick[t])
	}
	if err != nil {
		return fmt.Errorf("%s: enqueue: %w", r.ob.Name(), err)
	}
	for _, a := range refused {
		i := w.byKey[a.key]
		r.rejected[i] = true
		r.rep.Tenants[a.tenant].Rejected++
		if !r.paused[a.tenant] {
			r.wanted--
		}
	}
	for _, a := range w.perTick[t] {
		r.waiting[a.tenant]++
	}
	for _, a := range refused {
		r.waiting[a.tenant]--
	}
	r.waitingTotal += len(w.perTick[t]) - len(refused)
	r.lastProgress = t
	if r.capped {
		for i := range r.nt {
			r.rep.Tenants[i].PeakUnfinished = max(r.rep.Tenants[i].PeakUnfinished, r.waiting[i]+r.inflight[i])
		}
	}
	return nil
}

// sweepNodes is a tick's step 3: every node with min(workers, batch) free
// workers sweeps once. It returns the rows claimed.
func (r *policyRun) sweepNodes(ctx context.Context, t int) (claimedNow int, err error) {
	backlogged := make([]bool, r.nt)
	for i := range r.nt {
		backlogged[i] = r.waiting[i] > 0 && (r.cfg.quotas[i] < 0 || r.inflight[i] < r.cfg.quotas[i])
	}
	clear(r.claimedTick)
	swept := false
	for _, n := range r.sweepOrder(t) {
		if !r.mem.live(n.id, t) {
			continue
		}
		full := n.full(r.s.BatchSize)
		if n.workers > 0 && n.workers-n.running < full {
			continue
		}
		swept = true
		rows, err := sweep(ctx, r.p, n, t, r.ob, full, r.rep, r.tenantIdx)
		if err != nil {
			return 0, fmt.Errorf("%s: node %d sweep (%s): %w", r.ob.Name(), n.id, r.p, err)
		}
		for _, row := range rows {
			if err := r.claimed(t, n, row); err != nil {
				return 0, err
			}
		}
		claimedNow += len(rows)
		if r.p.dispatched() {
			r.checkNodeCeiling(n, rows)
		}
	}
	if swept {
		for i := range r.nt {
			if backlogged[i] && r.claimedTick[i] == 0 {
				r.starved[i]++
				r.rep.Tenants[i].StarvedSweeps = max(r.rep.Tenants[i].StarvedSweeps, r.starved[i])
			} else {
				r.starved[i] = 0
			}
		}
	}
	return claimedNow, nil
}

// sweepOrder is the order in which the nodes sweep at tick t: their
// order, or, in a scenario with downstreams, that order rotated by t. A
// downstream answers its calls in the order they come, so the first node
// to sweep takes every slot freed since the last tick, and a fixed order
// would give the same node every freed slot and the others every 429,
// which no real cluster of racing nodes does.
func (r *policyRun) sweepOrder(t int) []*node {
	if r.ds == nil || len(r.nodes) < 2 {
		return r.nodes
	}
	k := t % len(r.nodes)
	return append(slices.Clone(r.nodes[k:]), r.nodes[:k]...)
}

// claimed records row, claimed by node n's sweep at tick t.
func (r *policyRun) claimed(t int, n *node, row outbox.Row) error {
	w := r.w
	i, ok := w.byKey[row.DispatchKey]
	if !ok {
		return fmt.Errorf("%s: node %d claimed %q, a key the run never enqueued", r.ob.Name(), n.id, row.DispatchKey)
	}
	a := w.arrivals[i]
	if r.rejected[i] {
		return fmt.Errorf("%s: node %d claimed %q, a row the store refused to enqueue", r.ob.Name(), n.id, row.DispatchKey)
	}
	switch {
	case r.claimedKey[i] && r.orphan[i] != notOrphan:
		// A failed node's row, claimed anew.
		r.rep.Audit.Recovered++
		r.expected[i]++
		if r.orphan[i] == orphanExpired {
			r.waiting[a.tenant]--
			r.waitingTotal--
		} else {
			r.orphanCount--
			r.inflight[a.tenant]--
			r.claimedOn[a.tenant][row.Shard]--
		}
		r.orphan[i] = notOrphan
	case r.claimedKey[i] && r.snoozed[i]:
		// A row a 429 snoozed, claimed again after its Retry-After.
		r.snoozed[i] = false
		r.waiting[a.tenant]--
		r.waitingTotal--
	case r.claimedKey[i]:
		r.rep.Audit.ClaimedAgain++
	default:
		r.expected[i] = 1
		r.claimedKey[i] = true
		r.claimTick[i] = t
		r.waiting[a.tenant]--
		r.waitingTotal--
		r.claimedTotal++
	}
	r.claimedTick[a.tenant]++
	r.rep.Tenants[a.tenant].Claimed++
	r.waits[a.tenant] = append(r.waits[a.tenant], row.ClaimedAt.Sub(row.EnqueuedAt))
	if pw := r.prioWaits[a.tenant]; pw != nil {
		pw[a.priority] = append(pw[a.priority], row.ClaimedAt.Sub(row.EnqueuedAt))
	}
	r.inflight[a.tenant]++
	r.claimedOn[a.tenant][row.Shard]++
	n.running++
	r.running++
	expires := int(ceilTicks(row.LeaseExpiresAt.Sub(epoch), r.s.Tick))
	service, rejected := a.service, false
	if d := r.downstream(a.tenant); d != nil {
		service, rejected = d.call(t, a.service, r.s)
	}
	r.due[t+service] = append(r.due[t+service], job{idx: i, lease: row.Lease(), tenant: a.tenant, shard: row.Shard, expires: expires, node: n, rejected: rejected})
	return nil
}

// checkNodeCeiling checks the planner's promise, node by node: after a
// sweep that claimed a tenant's rows, the rows claimed on the node's
// shards, whoever claimed them, are within its ceiling.
func (r *policyRun) checkNodeCeiling(n *node, rows []outbox.Row) {
	mine := map[int]bool{}
	for _, row := range rows {
		mine[r.w.arrivals[r.w.byKey[row.DispatchKey]].tenant] = true
	}
	for i := range mine {
		if r.cfg.quotas[i] == backpressure.Unlimited {
			continue
		}
		k := 0
		for _, sh := range n.owned {
			k += r.claimedOn[i][sh]
		}
		if k > n.bp.Ceiling(r.s.Tenants[i].Name) {
			r.rep.Tenants[i].OverNodeCeiling++
		}
	}
}

// measure is a tick's step 4: measure the tick.
func (r *policyRun) measure() {
	t := r.timeline.ticks
	r.timeline.add(r.inflight)
	var snaps []map[string]dispatch.AdaptiveCeiling
	for i, d := range r.ds {
		if d == nil {
			continue
		}
		d.record(t, r.inflight[i], r.window)
		if d.ceilings == nil {
			continue
		}
		if snaps == nil {
			snaps = make([]map[string]dispatch.AdaptiveCeiling, len(r.nodes))
			for k, n := range r.nodes {
				if n.d != nil && r.mem.live(n.id, t) {
					snaps[k] = n.d.d.AdaptiveCeilings()
				}
			}
		}
		sum, name := 0, r.s.Tenants[i].Name
		for k, n := range r.nodes {
			if !r.mem.live(n.id, t) {
				continue
			}
			if c, ok := snaps[k][name]; ok {
				sum += c.Ceiling
			} else {
				sum += n.bp.Ceiling(name)
			}
		}
		d.ceilings.add([]int{sum})
	}
	if r.meter != nil {
		r.meter.add(r.claimedTick)
	}
	for i := range r.nt {
		tr := &r.rep.Tenants[i]
		if r.inflight[i] > tr.PeakInflight {
			tr.PeakInflight, tr.PeakCeiling = r.inflight[i], r.bound[i]
		}
		if r.cfg.quotas[i] != backpressure.Unlimited {
			over := r.inflight[i] - r.bound[i]
			tr.OverOwnersCeiling = max(tr.OverOwnersCeiling, over)
			if r.claimedTick[i] > 0 {
				tr.OverAtClaim = max(tr.OverAtClaim, over)
			}
		}
	}
	if j, ok := r.ent.jain(r.inflight, r.waiting, r.cfg, r.capacity); ok {
		r.jainSum += j
		r.jainTicks++
	}
}

// ended is a tick's step 5, the end: nothing running, every row the run
// waits for settled, nothing more to arrive and no change to come. A run
// that can make no more progress is an ErrStalled; one whose running claims
// keep outliving their leases is given up.
func (r *policyRun) ended(t, claimedNow int) (bool, error) {
	changesDone := r.nextChange == len(r.changeTicks) && r.nextEvent == len(r.mem.events)
	if t >= r.w.lastTick && r.running == 0 && r.orphanCount == 0 && changesDone {
		if r.settledWanted == r.wanted {
			return true, nil
		}
		if claimedNow == 0 && t >= r.snoozedUntil {
			return false, fmt.Errorf("%w at tick %d under %s: %d of %d rows settled, none running, none claimable", ErrStalled, t, r.p, r.settled, r.wanted)
		}
	}
	if r.running > 0 && t-r.lastProgress > r.stuckAfter {
		// Every running claim keeps outliving its lease and being
		// claimed again: give up, and let the audit say what it did.
		r.rep.GaveUp = true
		return true, nil
	}
	return false, nil
}

// skipIdle is a tick's step 6, idle: nothing running, nothing waiting and
// every claimed row settled. The ticks up to the next arrival or change
// change nothing but the timeline, so they are recorded without sweeping.
// It returns the last tick recorded.
func (r *policyRun) skipIdle(t int) int {
	if r.running == 0 && r.waitingTotal == 0 && r.settled == r.claimedTotal {
		next := r.w.nextArrival(t + 1)
		if r.nextChange < len(r.changeTicks) {
			next = min(next, r.changeTicks[r.nextChange])
		}
		if r.nextEvent < len(r.mem.events) {
			next = min(next, r.mem.events[r.nextEvent])
		}
		for _, d := range r.ds {
			if d != nil && d.nextChange(r.s.Tick) >= 0 {
				next = min(next, d.nextChange(r.s.Tick))
			}
		}
		for ; t+1 < next; t++ {
			r.measure()
		}
	}
	return t
}

// report fills in the report's totals once the ticks are over.
func (r *policyRun) report() {
	s, w, rep := r.s, r.w, r.rep
	rep.Settled = r.settled
	rep.Ticks = r.timeline.ticks
	rep.Makespan = time.Duration(max(r.lastSettle-w.firstTick, 0)) * s.Tick
	if rep.Makespan > 0 {
		rep.Throughput = float64(r.settled) / rep.Makespan.Seconds()
	}
	rep.FairnessTicks = r.jainTicks
	if r.jainTicks > 0 {
		rep.Fairness = r.jainSum / float64(r.jainTicks)
	}
	for i := range r.nt {
		st := summarise(r.waits[i])
		rep.Tenants[i].WaitP50, rep.Tenants[i].WaitP99, rep.Tenants[i].WaitMax = st.P50, st.P99, st.Max
		rep.Tenants[i].HeldAtEnd = r.waiting[i]
		rep.Tenants[i].StarvedMax = time.Duration(rep.Tenants[i].StarvedSweeps) * s.Tick
		rep.Tenants[i].PendingCap = s.pendingCap(i)
		if r.prioRows[i] != nil {
			rep.Tenants[i].ByPriority = priorityWaits(r.prioRows[i], r.prioWaits[i])
		}
		if r.meter != nil {
			rep.Tenants[i].Starts = r.meter.report(i, s.Tenants[i].Rate, ownersEver(r.history, s.Nodes))
		}
		if d := r.downstream(i); d != nil {
			rep.Tenants[i].Downstream = d.report(s)
		}
	}
	rep.Timeline = Timeline{Tick: time.Duration(r.timeline.stride) * s.Tick, Inflight: r.timeline.vals}
	if r.meter != nil {
		rep.Starts = Timeline{Tick: time.Duration(r.meter.series.stride) * s.Tick, Inflight: r.meter.series.vals}
		rep.startsPerTick = r.meter.perTick
	}

	// A row was held at the ceiling when, between its enqueue and its
	// claim (or the end, for a row never claimed), a sweep of the node
	// that owns its shard held its tenant at the ceiling.
	if r.p.dispatched() {
		for i, a := range w.arrivals {
			end := math.MaxInt
			if r.claimedKey[i] {
				end = r.claimTick[i]
			}
			if heldAtCeiling(r.nodes, r.history, backpressure.ShardFor(a.key, s.ShardCount), a.tenant, a.tick, end) {
				rep.Tenants[a.tenant].HeldAtCeiling++
			}
		}
	}
}
