package sim

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// runScenario runs s on SQLite under policies and fails the test on an
// error or a failed exactly-once audit.
func runScenario(t *testing.T, s Scenario, policies ...Policy) *Report {
	t.Helper()
	rep, err := Run(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir(), Policies: policies}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, p := range rep.Policies {
		if !p.Audit.OK() {
			t.Errorf("%s: %v", p.Policy, p.Audit)
		}
	}
	return rep
}

// worstExcess is the naive reference for the rate bound: over every window
// [t1, t2] of ticks, the most rows started in it beyond r × its length, and
// that window's starts and length in ticks.
func worstExcess(starts []int, rho float64) (excess float64, started, span int) {
	excess = math.Inf(-1)
	for t1 := range starts {
		n := 0
		for t2 := t1; t2 < len(starts); t2++ {
			n += starts[t2]
			if e := float64(n) - rho*float64(t2-t1); e > excess {
				excess, started, span = e, n, t2-t1
			}
		}
	}
	return excess, started, span
}

// TestRateBoundAcrossHandoff runs rates.json: a rate-limited tenant on 3
// nodes, one joining and one failing, its shards handed over. Under
// backpressure its rows started over any window of length T stay within
// PerSecond·T + Burst + (nodes − 1), checked window by window against the
// naive reference; the sweeps held it for its rate; and unscoped, which
// knows no rate, breaks the bound, so the check can fail.
func TestRateBoundAcrossHandoff(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s, err := LoadScenario("../../scenarios/rates.json")
	if err != nil {
		t.Fatal(err)
	}
	rep := runScenario(t, s, Backpressure, Unscoped)
	ti := slices.IndexFunc(s.Tenants, func(tn Tenant) bool { return tn.Rate.PerSecond > 0 })
	r := s.Tenants[ti].Rate
	rho := r.PerSecond * s.Tick.Seconds()
	allowed := float64(r.Burst) + float64(s.Nodes-1)

	bp := rep.Policy(Backpressure)
	checkShipped(t, s, bp) // TestShippedScenarios leaves rates.json to this test
	for _, w := range []string{"10s node-2: 0 → ", "20s node-1 fails", "35s node-1: "} {
		if !slices.ContainsFunc(bp.Events, func(e string) bool { return strings.HasPrefix(e, w) }) {
			t.Errorf("events %q lack %q: the scenario makes no hand-off", bp.Events, w)
		}
	}
	starts := bp.startsPerTick[ti]
	total := 0
	for _, n := range starts {
		total += n
	}
	if tr := bp.Tenants[ti]; total != tr.Claimed || tr.Claimed < tr.Rows {
		t.Fatalf("starts recorded %d, claims %d, rows %d", total, tr.Claimed, tr.Rows)
	}
	excess, started, span := worstExcess(starts, rho)
	if excess > allowed+1e-9 {
		t.Errorf("backpressure: %d rows started over %v, over r·T + b + (nodes−1) = %.1f", started, time.Duration(span)*s.Tick, rho*float64(span)+allowed)
	}
	tr := bp.Tenants[ti]
	if w := tr.Starts.Worst; w == nil || w.Started != started || w.Span != time.Duration(span)*s.Tick || !w.Held() {
		t.Errorf("report's worst window %+v, the reference's %d rows over %d ticks", tr.Starts.Worst, started, span)
	}
	if tr.SweepsAtRate == 0 {
		t.Errorf("no sweep held %s for its rate: the scenario does not load the rate", tr.Name)
	}
	if tr.Starts.MaxPerSecond > r.PerSecond+allowed || tr.Starts.MeanPerSecond > r.PerSecond {
		t.Errorf("starts per second: max over 1s %.1f, mean %.1f, against rate %v", tr.Starts.MaxPerSecond, tr.Starts.MeanPerSecond, r)
	}

	un := rep.Policy(Unscoped)
	if e, _, _ := worstExcess(un.startsPerTick[ti], rho); e <= allowed {
		t.Errorf("unscoped kept the rate bound too (excess %.1f ≤ %.1f): the check cannot fail", e, allowed)
	}
	if un.Tenants[ti].Starts.Worst.Held() {
		t.Errorf("unscoped: the report says the bound held")
	}
}

// withoutPriorities returns s with every tenant's priorities removed.
func withoutPriorities(s Scenario) Scenario {
	s.Tenants = slices.Clone(s.Tenants)
	for i := range s.Tenants {
		s.Tenants[i].Priorities = nil
	}
	return s
}

// TestPriorityInsideShare runs priority.json with and without its
// priorities: the noisy tenant's urgent rows wait less than its normal
// ones, and priorities change no tenant's share: every tenant's rows in
// flight, tick by tick, and the quiet tenants' waits are the same in both
// runs.
func TestPriorityInsideShare(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s, err := LoadScenario("../../scenarios/priority.json")
	if err != nil {
		t.Fatal(err)
	}
	with := runScenario(t, s, Backpressure).Policy(Backpressure)
	checkShipped(t, s, with) // TestShippedScenarios leaves priority.json to this test
	without := runScenario(t, withoutPriorities(s), Backpressure).Policy(Backpressure)

	noisy := with.Tenants[0]
	if len(noisy.ByPriority) != 2 {
		t.Fatalf("noisy's classes: %+v", noisy.ByPriority)
	}
	urgent, normal := noisy.ByPriority[0], noisy.ByPriority[1]
	if urgent.Priority != 100 || normal.Priority != 0 || urgent.Rows+normal.Rows != noisy.Rows || urgent.Rows == 0 {
		t.Fatalf("classes %+v of %d rows", noisy.ByPriority, noisy.Rows)
	}
	if urgent.WaitP50 >= normal.WaitP50 || urgent.WaitP99 >= normal.WaitP99 {
		t.Errorf("urgent rows wait p50 %v p99 %v, normal rows p50 %v p99 %v: want urgent less", urgent.WaitP50, urgent.WaitP99, normal.WaitP50, normal.WaitP99)
	}
	if len(without.Tenants[0].ByPriority) != 0 {
		t.Errorf("a run without priorities reports classes %+v", without.Tenants[0].ByPriority)
	}
	for i := range with.Tenants {
		a, b := with.Tenants[i], without.Tenants[i]
		if !slices.Equal(with.Timeline.Inflight[i], without.Timeline.Inflight[i]) {
			t.Errorf("%s: rows in flight differ with priorities", a.Name)
		}
		if i > 0 && (a.WaitP50 != b.WaitP50 || a.WaitP99 != b.WaitP99 || a.WaitMax != b.WaitMax || a.Claimed != b.Claimed) {
			t.Errorf("%s: waits %v/%v/%v with priorities, %v/%v/%v without", a.Name, a.WaitP50, a.WaitP99, a.WaitMax, b.WaitP50, b.WaitP99, b.WaitMax)
		}
	}
	// Priorities reorder the noisy tenant's rows: its urgent rows came
	// ahead of where they were without priorities.
	if with.Tenants[0].WaitP50 == urgent.WaitP50 {
		t.Errorf("the noisy tenant's p50 is its urgent rows': the classes are not apart")
	}
}

// TestPendingCapRejectsRunaway runs pendingcap.json: the runaway producer
// is refused beyond its cap (its unfinished rows reach the cap and never
// pass it), nobody else is refused, the audit counts the refused rows as
// rejected, not lost, and the other tenants' p99 waits are no longer than
// in the same run without the runaway tenant (under unscoped they are
// longer, so the comparison can fail).
func TestPendingCapRejectsRunaway(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s, err := LoadScenario("../../scenarios/pendingcap.json")
	if err != nil {
		t.Fatal(err)
	}
	// Its first 15 s: the runaway reaches its cap within seconds, and
	// stays there while its rows keep arriving.
	s.Duration = 15 * time.Second
	full := runScenario(t, s, Backpressure, Unscoped)
	bp := full.Policy(Backpressure)
	checkShipped(t, s, bp) // TestShippedScenarios leaves pendingcap.json to this test
	// The runaway is the last tenant, so that without it the others draw
	// the same arrivals.
	last := len(s.Tenants) - 1
	calm := s
	calm.Tenants = slices.Clone(s.Tenants[:last])
	calmRep := runScenario(t, calm, Backpressure, Unscoped)
	base := calmRep.Policy(Backpressure)

	run := bp.Tenants[last]
	if run.PendingCap != s.Tenants[last].PendingCap || run.Rejected == 0 || run.PeakUnfinished != run.PendingCap {
		t.Errorf("runaway: cap %d, %d of %d rows rejected, peak unfinished %d: want rejections, the peak at the cap", run.PendingCap, run.Rejected, run.Rows, run.PeakUnfinished)
	}
	if run.Claimed != run.Rows-run.Rejected {
		t.Errorf("runaway: %d claimed, %d rows, %d rejected", run.Claimed, run.Rows, run.Rejected)
	}
	if bp.Audit.Rejected != run.Rejected || bp.Audit.RejectedFound != 0 || bp.Audit.Lost != 0 {
		t.Errorf("audit: %v", bp.Audit)
	}
	for i, tr := range bp.Tenants[:last] {
		b := base.Tenants[i]
		if tr.Rows != b.Rows {
			t.Fatalf("%s: %d rows beside the runaway, %d without it: not the same arrivals", tr.Name, tr.Rows, b.Rows)
		}
		if tr.Rejected != 0 || tr.PendingCap != s.PendingCap || tr.PeakUnfinished > tr.PendingCap {
			t.Errorf("%s: %d rejected under cap %d (peak %d)", tr.Name, tr.Rejected, tr.PendingCap, tr.PeakUnfinished)
		}
		if tr.WaitP99 > b.WaitP99 {
			t.Errorf("%s: p99 wait %v beside the runaway, %v without it", tr.Name, tr.WaitP99, b.WaitP99)
		}
	}
	// The check has teeth: unscoped, oldest first, makes the others wait
	// behind the runaway's capped backlog.
	if un, unBase := full.Policy(Unscoped).Tenants[0], calmRep.Policy(Unscoped).Tenants[0]; un.WaitP99 <= unBase.WaitP99 {
		t.Errorf("unscoped: %s p99 wait %v beside the runaway, %v without it: the comparison cannot fail", un.Name, un.WaitP99, unBase.WaitP99)
	}
}

// TestRejectedAudit checks the audit's accounting of refused rows: a key
// marked rejected and absent counts as rejected, not lost; one marked
// rejected but in the database is reported.
func TestRejectedAudit(t *testing.T) {
	s := DefaultScenario()
	s.Tenants = s.Tenants[:1]
	s.Tenants[0].Arrivals = []Arrival{{Pattern: PatternBurst, Rows: 3}}
	w := newWorkload(s, 1)
	ob := &fakeOutbox{states: map[string]rowState{
		w.arrivals[0].key: {Found: true, Settled: true, State: "settled", Attempts: 1},
		w.arrivals[2].key: {Found: true, State: "pending"},
	}}
	var a Audit
	if err := audit(context.Background(), ob, s, w, []bool{false}, []bool{false, true, true}, nil, &a); err != nil {
		t.Fatal(err)
	}
	if a.Rejected != 2 || a.RejectedFound != 1 || a.Lost != 0 || a.SettledOnce != 1 || a.OK() || a.Redelivered != 1 {
		t.Errorf("audit = %+v: want 2 rejected, 1 of them found, 1 settled, 1 redelivered, not OK", a)
	}
	delete(ob.states, w.arrivals[2].key)
	a = Audit{}
	if err := audit(context.Background(), ob, s, w, []bool{false}, []bool{false, true, true}, nil, &a); err != nil {
		t.Fatal(err)
	}
	if !a.OK() || a.Rejected != 2 || !strings.Contains(a.String(), "2 refused at enqueue") {
		t.Errorf("audit = %v: want OK with 2 rejected", a)
	}
}
