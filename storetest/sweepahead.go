package storetest

import (
	"fmt"
	"hash/fnv"
	"maps"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testSweepAhead checks the store under [backpressure.SweepAhead]. With a
// [backpressure.Counter] that is not a [backpressure.TxSweeper], a full
// sweep reads the next sweep's counts on the store while its claim runs
// (and while the caller settles rows after it returns), and the next sweep
// plans from them corrected by the claim's grants; otherwise SweepAhead is
// SweepN. A backlog over several namespaces and task queues, under finite
// quotas and an unlimited one, is drained by full-budget sweeps, settling
// a deterministic part of the rows held between sweeps, until every row is
// settled. Every row must be claimed exactly once (never while its lease
// is live, as the clock stands still) and settled exactly once, none lost;
// a sweep returns at most the budget, and no more rows of a route than its
// plan granted; and after every sweep the store's CountClaimedOutboxRows
// must be exactly the rows held, each namespace's at most its ceiling.
func testSweepAhead[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	for _, c := range []struct {
		name                         string
		format                       string // a namespace's name from its number
		namespaces, queues, perRoute int
		cfg                          backpressure.Config
	}{
		// Fewer namespaces than a window holds: full counts, deeper
		// than 1, with every kind of quota binding.
		{"FewNamespaces", "n%d", 5, 3, 8, backpressure.Config{
			BatchSize: 6, DefaultQuota: 3,
			Quotas: map[string]int{"n1": 1, "n2": 5, "n3": backpressure.Unlimited},
		}},
		// More namespaces than a window of B + k + 1 holds: windowed
		// counts at cap 1, when the store's Counter serves them.
		{"ManyNamespaces", "m%02d", 14, 2, 3, backpressure.Config{
			BatchSize: 3, DefaultQuota: 2,
			Quotas: map[string]int{"m01": 1, "m04": backpressure.Unlimited},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t, newHarness)
			var ms []outbox.Message
			for n := 0; n < c.namespaces; n++ {
				ns := fmt.Sprintf(c.format, n)
				for q := 0; q < c.queues; q++ {
					tq := fmt.Sprintf("q%d", q)
					ms = append(ms, msgs(ns, tq, ns+"/"+tq, c.perRoute)...)
				}
			}
			if n := e.enqueue(ms...); n != len(ms) {
				t.Fatalf("Enqueue(%d messages) inserted %d", len(ms), n)
			}
			e.drainAhead(ms, c.cfg)
		})
	}
}

// drainAhead drains the rows of ms, just enqueued, with SweepAhead under
// cfg on every shard, checking each sweep (see testSweepAhead).
func (e *env[R]) drainAhead(ms []outbox.Message, cfg backpressure.Config) {
	e.t.Helper()
	b, err := backpressure.New(cfg, e.all)
	if err != nil {
		e.t.Fatalf("backpressure.New(%+v): %v", cfg, err)
	}
	d := &drain[R]{e: e, b: b, budget: cfg.BatchSize, routeOf: make(map[string]backpressure.Route, len(ms)),
		held: map[string]R{}, settled: map[string]bool{}}
	for _, m := range ms {
		d.routeOf[m.DispatchKey] = route(m.Namespace, m.TaskQueue)
	}
	bound := 3*len(ms) + 10
	for d.sweep = 1; len(d.settled) < len(ms); d.sweep++ {
		if d.sweep > bound {
			e.t.Fatalf("after %d sweeps %d of %d rows settled, %d held", d.sweep-1, len(d.settled), len(ms), len(d.held))
		}
		rows, plan, err := backpressure.SweepAhead(e.ctx, b, e.h.Store, d.budget)
		if err != nil {
			e.t.Fatalf("sweep %d: SweepAhead: %v", d.sweep, err)
		}
		d.claimed(rows, plan)
		d.checkHeld(plan)

		// Only a sweep that claims its whole budget leaves counts read
		// ahead; after any other the next sweep counts afresh, and with
		// rows pending, none held and every quota above 0, it must claim.
		// (After a full one, counts read before the settles may still
		// show every namespace at its ceiling.)
		if len(rows) == 0 && len(d.held) == 0 && !d.full {
			e.t.Fatalf("sweep %d, counting afresh, claimed nothing with nothing held and %d of %d rows unsettled: rows lost", d.sweep, len(ms)-len(d.settled), len(ms))
		}
		d.full = len(rows) == d.budget
		d.settleSome(len(rows) > 0)
	}
	d.drained(ms)
}

// drain is the state of one drainAhead: the rows claimed and not yet
// settled, by key, and those settled.
type drain[R any] struct {
	e       *env[R]
	b       *backpressure.Backpressure
	budget  int
	routeOf map[string]backpressure.Route // every row's route, by key
	held    map[string]R
	settled map[string]bool
	sweep   int  // the sweep's number, from 1
	full    bool // whether the last sweep claimed its whole budget
}

// claimed checks and records the rows a sweep that planned plan claimed:
// at most the budget, each enqueued, not settled and not held, and no
// more of a route than the plan granted.
func (d *drain[R]) claimed(rows []R, plan backpressure.Plan) {
	d.e.t.Helper()
	e := d.e
	if len(rows) > d.budget {
		e.t.Fatalf("sweep %d returned %d rows, above the budget %d", d.sweep, len(rows), d.budget)
	}
	granted := map[backpressure.Route]int{}
	for _, c := range plan.Claims {
		granted[c.Route] += c.Limit
	}
	got := map[backpressure.Route]int{}
	for _, r := range rows {
		k := e.h.Key(r)
		rt, ok := d.routeOf[k]
		switch _, live := d.held[k]; {
		case !ok:
			e.t.Fatalf("sweep %d claimed %q, which was never enqueued", d.sweep, k)
		case d.settled[k]:
			e.t.Fatalf("sweep %d claimed %q again after it was settled", d.sweep, k)
		case live:
			e.t.Fatalf("sweep %d claimed %q while an earlier claim's lease on it is live", d.sweep, k)
		}
		d.held[k] = r
		got[rt]++
	}
	for rt, n := range got {
		if n > granted[rt] {
			e.t.Fatalf("sweep %d claimed %d rows of %v, but its plan granted %d (claims %v)", d.sweep, n, rt, granted[rt], plan.Claims)
		}
	}
}

// checkHeld checks that the store's live claimed rows are the rows held
// (the clock stands still, so no lease expires), each namespace's within
// its ceiling.
func (d *drain[R]) checkHeld(plan backpressure.Plan) {
	d.e.t.Helper()
	e := d.e
	heldBy := map[string]int{}
	for k := range d.held {
		heldBy[d.routeOf[k].Namespace]++
	}
	claimed := e.countClaimed(e.all)
	if !maps.Equal(claimed, heldBy) {
		e.t.Fatalf("after sweep %d CountClaimedOutboxRows = %v, but the rows claimed and not settled are %v", d.sweep, claimed, heldBy)
	}
	for ns, n := range claimed {
		if c := d.b.Ceiling(ns); c != backpressure.Unlimited && n > c {
			e.t.Fatalf("after sweep %d namespace %q has %d live claimed rows, above its ceiling %d (plan %+v)", d.sweep, ns, n, c, plan.Namespaces)
		}
	}
}

// settleSome settles about two thirds of the rows held, chosen by key and
// sweep; all of them when that chooses none, or the sweep claimed nothing
// (claimedAny false), so that the drain always moves on.
func (d *drain[R]) settleSome(claimedAny bool) {
	d.e.t.Helper()
	var done []R
	for _, k := range sortedKeys(d.held) {
		if claimedAny && spread(k, d.sweep)%3 == 0 {
			continue
		}
		done = append(done, d.held[k])
	}
	if len(done) == 0 {
		for _, k := range sortedKeys(d.held) {
			done = append(done, d.held[k])
		}
	}
	d.e.settleRows(done)
	for _, r := range done {
		k := d.e.h.Key(r)
		delete(d.held, k)
		d.settled[k] = true
	}
}

// drained checks the end of the drain: nothing claimed, nothing pending,
// every row of ms settled after one attempt, and one more sweep claims
// nothing.
func (d *drain[R]) drained(ms []outbox.Message) {
	d.e.t.Helper()
	e := d.e
	if rows, _, err := backpressure.SweepAhead(e.ctx, d.b, e.h.Store, d.budget); err != nil || len(rows) != 0 {
		e.t.Fatalf("SweepAhead after the drain = %v, %v; want no rows", e.keys(rows), err)
	}
	if claimed := e.countClaimed(e.all); len(claimed) != 0 {
		e.t.Errorf("after the drain CountClaimedOutboxRows = %v, want none", claimed)
	}
	if pending := e.countPending(e.all, 1000); len(pending) != 0 {
		e.t.Errorf("after the drain CountPendingOutboxRows = %v, want none", pending)
	}
	for _, m := range ms {
		if s := e.inspect(m.DispatchKey); s.State != outbox.StateSettled || s.Attempts != 1 {
			e.t.Errorf("after the drain row %q is %s after %d attempts, want settled after 1", m.DispatchKey, s.State, s.Attempts)
		}
	}
}

// settleRows settles rows: in one Complete for an [outbox.Store] (one
// round trip, as a dispatcher's batch), else one Settle each.
func (e *env[R]) settleRows(rows []R) {
	e.t.Helper()
	s, ok := any(e.h.Store).(outbox.Store)
	if !ok {
		for _, r := range rows {
			e.settle(r)
		}
		return
	}
	cs := make([]outbox.Completion, len(rows))
	for i, r := range rows {
		// An outbox.Store is an OutboxStore[outbox.Row]: R is outbox.Row.
		cs[i] = outbox.SettleRow(any(r).(outbox.Row))
	}
	res, err := s.Complete(e.ctx, cs)
	if err != nil {
		e.t.Fatalf("Complete(%d settles): %v", len(cs), err)
	}
	if len(res) != len(cs) {
		e.t.Fatalf("Complete(%d settles) returned %d results", len(cs), len(res))
	}
	for i, r := range res {
		if r.Err != nil {
			e.t.Fatalf("Complete: settling %q: %v", cs[i].DispatchKey, r.Err)
		}
	}
}

// spread hashes a key and a sweep number, to choose rows deterministically
// but without regard to their order.
func spread(key string, sweep int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s#%d", key, sweep)
	return h.Sum32()
}
