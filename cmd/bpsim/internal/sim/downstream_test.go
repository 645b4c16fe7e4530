package sim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// shortDownstream is scenarios/downstream.json in a 24 s window, its
// capacity changes moved in proportion (20 s → 8 s, 40 s → 16 s), so that
// each phase still has steady time after the 5 s the targets allow for
// convergence, and the adaptive controller's Window with them (its
// default 6 s → 2.4 s: the quiet time before a probe bounds how soon a
// grown downstream is found).
func shortDownstream(t *testing.T) Scenario {
	t.Helper()
	s, err := LoadScenario("../../scenarios/downstream.json")
	if err != nil {
		t.Fatal(err)
	}
	scale := 24.0 / s.Duration.Seconds()
	s.Duration = 24 * time.Second
	for i := range s.Tenants {
		if d := s.Tenants[i].Downstream; d != nil {
			for k := range d.Changes {
				d.Changes[k].At = time.Duration(d.Changes[k].At.Seconds()*scale) * time.Second
			}
		}
	}
	if s.Adaptive.Window == 0 {
		s.Adaptive.Window = time.Duration(float64(6*time.Second) * scale)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDownstreamArmsSQLite runs the arms of the downstream scenario on
// SQLite and checks what the comparison rests on.
func TestDownstreamArmsSQLite(t *testing.T) {
	t.Parallel() // simulated time, its own files or schemas: independent of every other test
	checkDownstreamArms(t, Config{Scenario: shortDownstream(t), Seed: 1, TempDir: t.TempDir()})
}

// TestDownstreamArmsPostgres runs the same on PostgreSQL, when one is
// reachable, under BACKPRESSURE_LONG=1 (make test-long) only: make test
// runs the arms on SQLite, and the simulation on PostgreSQL in
// TestRunPostgres.
func TestDownstreamArmsPostgres(t *testing.T) {
	if os.Getenv("BACKPRESSURE_LONG") != "1" {
		t.Skip("TestDownstreamArmsSQLite runs the arms; BACKPRESSURE_LONG=1 (make test-long) runs them on PostgreSQL too")
	}
	t.Parallel() // simulated time, its own files or schemas: independent of every other test
	checkDownstreamArms(t, Config{Scenario: shortDownstream(t), Seed: 1, DSN: testDatabaseURL(t)})
}

func checkDownstreamArms(t *testing.T, cfg Config) {
	t.Helper()
	var stdout bytes.Buffer
	rep, err := Run(context.Background(), cfg, &stdout)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stdout.String())
	}
	if testing.Verbose() {
		t.Log("\n" + stdout.String())
	}
	if len(rep.Policies) != len(DownstreamArms) {
		t.Fatalf("report has %d arms, want %d", len(rep.Policies), len(DownstreamArms))
	}
	s := cfg.Scenario
	for _, p := range rep.Policies {
		// No row lost or settled twice; every snooze claimed again.
		if !p.Audit.OK() || p.Audit.SettledOnce != rep.Rows || p.Settled != rep.Rows {
			t.Errorf("%s: audit %+v, settled %d; want all %d rows settled once", p.Policy, p.Audit, p.Settled, rep.Rows)
		}
		for i, tn := range p.Tenants {
			d := tn.Downstream
			if s.Tenants[i].Downstream == nil {
				if d != nil || tn.Snoozed != 0 || tn.Claimed != tn.Rows {
					t.Errorf("%s: %s, with no downstream, snoozed %d and claimed %d of %d rows", p.Policy, tn.Name, tn.Snoozed, tn.Claimed, tn.Rows)
				}
				continue
			}
			if d == nil || d.Calls != tn.Claimed || d.Rejected != tn.Snoozed || tn.Claimed != tn.Rows+tn.Snoozed || d.Succeeded != tn.Rows {
				t.Errorf("%s: %s: downstream %+v, claimed %d, snoozed %d, rows %d: want a call per claim, a snooze per 429, one success per row",
					p.Policy, tn.Name, d, tn.Claimed, tn.Snoozed, tn.Rows)
			}
		}
	}
	base, static, oracle, adaptive := rep.Policy(NoSignals), rep.Policy(Static), rep.Policy(Oracle), rep.Policy(Adaptive)
	checkShipped(t, cfg.Scenario, static) // TestShippedScenarios leaves downstream.json to this check
	for i, st := range s.Tenants {
		if st.Downstream == nil {
			// Other tenants: their waits are the no-signals arm's, to a tick
			// or two of batching.
			for _, p := range []*PolicyReport{static, oracle, adaptive} {
				got, want := p.Tenants[i], base.Tenants[i]
				if d := got.WaitP99 - want.WaitP99; d > 2*s.Tick || d < -2*s.Tick {
					t.Errorf("%s: %s waits p99 %v, no-signals %v", p.Policy, st.Name, got.WaitP99, want.WaitP99)
				}
			}
			continue
		}
		sd, od, bd := static.Tenants[i].Downstream, oracle.Tenants[i].Downstream, base.Tenants[i].Downstream
		if bd.Rejected != 0 {
			t.Errorf("no-signals: %s got %d 429s with no limit", st.Name, bd.Rejected)
		}
		// The static quota above C keeps hammering: 429s, and after
		// convergence too; the oracle's quota = C never gets one.
		if sd.Rejected == 0 || sd.SteadyRejectedPer1000 < 100 {
			t.Errorf("static: %s: %d 429s, %.1f per 1,000 steady calls; want many", st.Name, sd.Rejected, sd.SteadyRejectedPer1000)
		}
		// (Right after C is cut a node whose own rows finished first may
		// claim under its new ceiling while another is still over its
		// own: the per-node ceilings bound the sum only once every node is
		// under its ceiling. So "about none", and none when steady.)
		if od.RejectedPer1000 > 2 || od.SteadyRejectedPer1000 != 0 {
			t.Errorf("oracle: %s: %d 429s (%.1f per 1,000 calls, %.1f steady); want about none, none steady", st.Name, od.Rejected, od.RejectedPer1000, od.SteadyRejectedPer1000)
		}
		// The overloaded downstream serves less: static's goodput is below
		// the oracle's; without a limit, at least the oracle's.
		if !(sd.VsOracle > 0 && sd.VsOracle < 0.95) || bd.VsOracle < 1 {
			t.Errorf("%s: goodput ×oracle static %.3f, no-signals %.3f; want static < 0.95, no-signals ≥ 1", st.Name, sd.VsOracle, bd.VsOracle)
		}
		// Adaptive ceilings turn the 429s into a bound: some (probes), at
		// most 60 per 1,000 steady calls (static: hundreds; the short
		// Window probes more often than the default's 6 s), most of the
		// oracle's goodput kept, and in-flight converged on C in every
		// phase. (The bounds leave room for one seed of a short run: the
		// figures against the targets are the -seeds run's.)
		ad := adaptive.Tenants[i].Downstream
		if ad.Rejected == 0 || ad.SteadyRejectedPer1000 > 60 || ad.RejectedPer1000 > sd.RejectedPer1000/10 {
			t.Errorf("adaptive: %s: %.1f 429s per 1,000 calls (%.1f steady); static %.1f (%.1f); want some, ≤ 60 steady, under a tenth of static's",
				st.Name, ad.RejectedPer1000, ad.SteadyRejectedPer1000, sd.RejectedPer1000, sd.SteadyRejectedPer1000)
		}
		if ad.VsOracle < 0.8 {
			t.Errorf("adaptive: %s: goodput %.3f× the oracle's, want ≥ 0.8", st.Name, ad.VsOracle)
		}
		for k, c := range ad.Convergence {
			if !c.Converged {
				t.Errorf("adaptive: %s: change %d (C %d at %v): never converged", st.Name, k, c.Capacity, c.At)
			}
		}
		if len(ad.Ceilings.Inflight) != 1 || len(ad.Ceilings.Inflight[0]) == 0 || slices.Min(ad.Ceilings.Inflight[0]) >= st.Quota {
			t.Errorf("adaptive: %s: ceilings timeline %v never went below the quota %d", st.Name, ad.Ceilings.Inflight, st.Quota)
		}
		// The oracle follows every change of C within the targets' 5 s;
		// static never comes within ±10% of a halved C.
		for k, c := range od.Convergence {
			if !c.Converged || c.After > 5*time.Second {
				t.Errorf("oracle: %s: change %d (C %d at %v): converged %v after %v", st.Name, k, c.Capacity, c.At, c.Converged, c.After)
			}
		}
		for k, c := range sd.Convergence {
			if k > 0 && c.Capacity < st.Downstream.Capacity && c.Converged {
				t.Errorf("static: %s: converged on the halved C %d after %v", st.Name, c.Capacity, c.After)
			}
		}
	}
	for _, want := range []string{"downstreams:", "×oracle", "against the no-signals arm's"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestConvergedMatchesNaive checks converged against a direct reading of
// the definition: the first t from which every tick of [t, t+hold) is in
// the band, inside [from, end).
func TestConvergedMatchesNaive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 60).Draw(rt, "n")
		inflight := rapid.SliceOfN(rapid.IntRange(0, 30), n, n).Draw(rt, "inflight")
		capacity := rapid.SliceOfN(rapid.IntRange(1, 25), n, n).Draw(rt, "capacity")
		from := rapid.IntRange(0, n-1).Draw(rt, "from")
		end := rapid.IntRange(from, n).Draw(rt, "end")
		hold := rapid.IntRange(1, 10).Draw(rt, "hold")
		in := func(u int) bool {
			c := float64(capacity[u])
			d := float64(inflight[u]) - c
			return d <= 0.1*c && -d <= 0.1*c
		}
		want, found := 0, false
		for t0 := from; t0+hold <= end && !found; t0++ {
			ok := true
			for u := t0; u < t0+hold; u++ {
				ok = ok && in(u)
			}
			if ok {
				want, found = t0, true
			}
		}
		got, ok := converged(inflight, capacity, from, end, hold)
		if ok != found || (ok && got != want) {
			rt.Fatalf("converged = %d, %v; naive %d, %v", got, ok, want, found)
		}
	})
}

// TestDownstreamCall checks the model: calls beyond the capacity get 429s
// for RejectTime, served calls slow down with the last second's 429s, and
// no-signals serves everything at its drawn time.
func TestDownstreamCall(t *testing.T) {
	s := Scenario{Tick: 100 * time.Millisecond, Duration: 10 * time.Second}
	spec := &Downstream{Capacity: 2, RejectTime: 200 * time.Millisecond, Slowdown: 1}
	d := &downstreamRun{spec: spec, limited: true, capacity: 2, recent: make([]int, 10)}
	if svc, rej := d.call(0, 5, s); rej || svc != 5 {
		t.Fatalf("first call: %d ticks, 429 %v", svc, rej)
	}
	if svc, rej := d.call(0, 5, s); rej || svc != 5 {
		t.Fatalf("second call: %d ticks, 429 %v", svc, rej)
	}
	if svc, rej := d.call(0, 5, s); !rej || svc != 2 {
		t.Fatalf("third call at capacity 2: %d ticks, 429 %v; want a 429 in 2 ticks", svc, rej)
	}
	d.done(2, true, 100)
	d.done(5, false, 100)
	// One 429 of 2 ticks over a second of capacity 2 (20 slot-ticks):
	// u = 0.1, so 5 ticks × 1.1 = 5.5: the half tick is carried, the
	// next call pays it (5, then 6: the mean is exact, not rounded up).
	if svc, rej := d.call(5, 5, s); rej || svc != 5 {
		t.Fatalf("call after a 429: %d ticks, 429 %v; want 5 (half a tick carried)", svc, rej)
	}
	d.done(6, false, 100)
	if svc, rej := d.call(6, 5, s); rej || svc != 6 {
		t.Fatalf("second call after a 429: %d ticks, 429 %v; want 6 (the carried half plus its own)", svc, rej)
	}
	// A second later the 429 is forgotten.
	d.done(12, false, 100)
	if svc, rej := d.call(16, 5, s); rej || svc != 5 {
		t.Fatalf("call a second later: %d ticks, 429 %v; want 5", svc, rej)
	}
	free := &downstreamRun{spec: spec, capacity: 2, recent: make([]int, 10)}
	for range 5 {
		if _, rej := free.call(0, 5, s); rej {
			t.Fatal("no-signals answered 429")
		}
	}
}

// TestDownstreamScenarioErrors checks the downstream fields' and arms'
// validation, and which policies fit which scenario.
func TestDownstreamScenarioErrors(t *testing.T) {
	base := `{"duration": "10s", "tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "steady", "perSecond": 1}]%s}]%s}`
	tests := []struct{ tenant, top, field string }{
		{`, "downstream": {}`, ``, "tenants[0].downstream.capacity"},
		{`, "downstream": {"capacity": 0}`, ``, "tenants[0].downstream.capacity"},
		{`, "downstream": {"capacity": 3, "slowdown": 11}`, ``, "tenants[0].downstream.slowdown"},
		{`, "downstream": {"capacity": 3, "retryAfter": "-1s"}`, ``, "tenants[0].downstream.retryAfter"},
		{`, "downstream": {"capacity": 3, "changes": [{"at": "10s", "capacity": 2}]}`, ``, "tenants[0].downstream.changes[0].at"},
		{`, "downstream": {"capacity": 3, "changes": [{"at": "5s", "capacity": 2}, {"at": "5s", "capacity": 1}]}`, ``, "tenants[0].downstream.changes[1].at"},
		{`, "downstream": {"capacity": 3, "nonsense": 1}`, ``, "tenants[0].downstream.nonsense"},
		{``, `, "arms": ["static"]`, "arms"},
		{`, "downstream": {"capacity": 3}`, `, "arms": ["static", "unscoped"]`, "arms[1]"},
		{`, "downstream": {"capacity": 3}`, `, "arms": ["static", "static"]`, "arms[1]"},
		{`, "downstream": {"capacity": 3}`, `, "adaptive": {"decrease": 1.5}`, "adaptive.decrease"},
		{`, "downstream": {"capacity": 3}`, `, "adaptive": {"window": "-1s"}`, "adaptive.window"},
		{`, "downstream": {"capacity": 3}`, `, "adaptive": {"holdClaims": "yes"}`, "adaptive.holdClaims"},
	}
	for _, tt := range tests {
		_, err := ParseScenario([]byte(strings.Replace(strings.Replace(base, "%s", tt.tenant, 1), "%s", tt.top, 1)))
		var se *ScenarioError
		if !errors.As(err, &se) || se.Field != tt.field {
			t.Errorf("%s %s: %v; want an error on %s", tt.tenant, tt.top, err, tt.field)
		}
	}
	ds, err := ParseScenario([]byte(strings.Replace(strings.Replace(base, "%s", `, "downstream": {"capacity": 3}`, 1), "%s",
		`, "arms": ["oracle", "static"], "adaptive": {"decrease": 1, "window": "6s", "holdClaims": true}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := CheckPolicies(ds, nil); err != nil || len(got) != 2 || got[0] != Oracle {
		t.Errorf("CheckPolicies(downstream scenario, nil) = %v, %v; want its arms", got, err)
	}
	for _, ps := range [][]Policy{{Backpressure}, {Unscoped}, {Static, Static}, {"nope"}} {
		if _, err := CheckPolicies(ds, ps); !errors.Is(err, ErrScenario) {
			t.Errorf("CheckPolicies(downstream scenario, %v) = %v; want ErrScenario", ps, err)
		}
	}
	if _, err := CheckPolicies(DefaultScenario(), []Policy{Static}); !errors.Is(err, ErrScenario) {
		t.Errorf("CheckPolicies(no downstream, static) = %v; want ErrScenario", err)
	}
	// The file format round-trips.
	b, err := ds.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseScenario(b)
	want := AdaptiveSpec{Decrease: 1, Window: 6 * time.Second, HoldClaims: true}
	if err != nil || again.Tenants[0].Downstream == nil || again.Tenants[0].Downstream.Capacity != 3 || len(again.Arms) != 2 || again.Adaptive != want {
		t.Errorf("round trip: %v, %+v", err, again)
	}
}

// TestSweepOrderRotates: in a scenario with downstreams, every node sweeps
// first (and last) once in any len(nodes) consecutive ticks, each tick's
// order a rotation of the nodes; without downstreams the order is fixed.
func TestSweepOrderRotates(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "nodes")
		from := rapid.IntRange(0, 1000).Draw(rt, "from")
		r := &policyRun{}
		for i := range n {
			r.nodes = append(r.nodes, &node{id: i})
		}
		if got := r.sweepOrder(from); !slices.Equal(got, r.nodes) {
			rt.Fatalf("no downstreams: order %v at tick %d, want the nodes' own", ids(got), from)
		}
		r.ds = []*downstreamRun{nil}
		first, last := map[int]int{}, map[int]int{}
		for tick := from; tick < from+n; tick++ {
			got := r.sweepOrder(tick)
			k := slices.Index(r.nodes, got[0])
			if len(got) != n || k < 0 || !slices.Equal(got, append(slices.Clone(r.nodes[k:]), r.nodes[:k]...)) {
				rt.Fatalf("tick %d: order %v is not a rotation of %v", tick, ids(got), ids(r.nodes))
			}
			first[got[0].id]++
			last[got[n-1].id]++
		}
		for _, nd := range r.nodes {
			if first[nd.id] != 1 || last[nd.id] != 1 {
				rt.Fatalf("over %d ticks from %d node %d swept first %d and last %d times, want once each", n, from, nd.id, first[nd.id], last[nd.id])
			}
		}
	})
}

func ids(ns []*node) []int {
	out := make([]int, len(ns))
	for i, n := range ns {
		out[i] = n.id
	}
	return out
}
