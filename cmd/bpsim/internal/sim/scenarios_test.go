package sim

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"
)

// shrink makes a shipped scenario small enough for a test: a tenth of each
// burst, a tenth of the tenants beyond the first ten, and an arrival window
// of at most 10s (changes keep their times; a downstream's capacity
// changes move with the window, in proportion).
func shrink(s Scenario) Scenario {
	if s.Duration > 10*time.Second {
		scale := float64(10*time.Second) / float64(s.Duration)
		s.Duration = 10 * time.Second
		s.Tenants = append([]Tenant(nil), s.Tenants...)
		for i := range s.Tenants {
			if d := s.Tenants[i].Downstream; d != nil {
				dc := *d
				dc.Changes = append([]CapacityChange(nil), d.Changes...)
				for k := range dc.Changes {
					dc.Changes[k].At = (time.Duration(float64(dc.Changes[k].At)*scale) / s.Tick) * s.Tick
				}
				s.Tenants[i].Downstream = &dc
			}
		}
	}
	if len(s.Tenants) > 10 {
		s.Tenants = append(s.Tenants[:10:10], s.Tenants[10:10+(len(s.Tenants)-10)/10]...)
	}
	for i := range s.Tenants {
		arr := append([]Arrival(nil), s.Tenants[i].Arrivals...)
		for k := range arr {
			switch arr[k].Pattern {
			case PatternBurst:
				arr[k].Rows = max(1, arr[k].Rows/10)
				arr[k].At = min(arr[k].At, s.Duration-s.Tick)
			case PatternSteady:
				arr[k].From = min(arr[k].From, s.Duration-s.Tick)
				arr[k].Until = min(arr[k].Until, s.Duration)
			}
		}
		s.Tenants[i].Arrivals = arr
	}
	return s
}

// shippedElsewhere names, for a scenario of cmd/bpsim/scenarios, the test
// that runs it (whole, or at least as large as shrink makes it) under the
// policy TestShippedScenarios would, and applies checkShipped to that run:
// TestShippedScenarios does not run it again.
var shippedElsewhere = map[string]string{
	"downstream.json": "TestDownstreamArmsSQLite",
	"pendingcap.json": "TestPendingCapRejectsRunaway",
	"priority.json":   "TestPriorityInsideShare",
	"rates.json":      "TestRateBoundAcrossHandoff",
	"weights.json":    "TestWeightsShareTheBatch",
}

// TestShippedScenarios parses every scenario in cmd/bpsim/scenarios and
// runs a small variant of it under the backpressure policy (the e2e tests
// cover the other two), checking the verdict and what the scenario is
// there to show (checkShipped). A scenario another test runs already
// (shippedElsewhere) is parsed and validated here, and checked there.
func TestShippedScenarios(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	paths, err := filepath.Glob("../../scenarios/*.json")
	if err != nil || len(paths) < 5 {
		t.Fatalf("scenarios: %v, %v", paths, err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s, err := LoadScenario(path)
			if err != nil {
				t.Fatal(err)
			}
			s = shrink(s)
			if err := s.Validate(); err != nil {
				t.Fatalf("shrunk: %v", err)
			}
			if other := shippedElsewhere[filepath.Base(path)]; other != "" {
				t.Skipf("%s runs it and checks its verdict", other)
			}
			// A scenario with a downstream runs its static arm: the
			// backpressure policy with the downstream modelled.
			policy := Backpressure
			if s.hasDownstreams() {
				policy = Static
			}
			rep, err := Run(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir(), Policies: []Policy{policy}}, &bytes.Buffer{})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkShipped(t, s, rep.Policy(policy))
		})
	}
}

// checkShipped checks a run of scenario s under a policy that holds
// ceilings (backpressure, or a downstream arm built on it): paused tenants
// claim nothing and hold their rows, no tenant of a static scenario peaks
// over its cluster ceiling, no claim takes a tenant over its owners'
// ceilings, and the audit's held rows are the paused tenants'.
func checkShipped(t *testing.T, s Scenario, bp *PolicyReport) {
	t.Helper()
	for _, tr := range bp.Tenants {
		if tr.Paused && (tr.Claimed != 0 || tr.HeldAtEnd != tr.Rows) {
			t.Errorf("paused tenant %s: claimed %d, held at the end %d of %d", tr.Name, tr.Claimed, tr.HeldAtEnd, tr.Rows)
		}
		if tr.Quota >= 0 && len(s.Changes) == 0 && !s.dynamic() && tr.PeakInflight > tr.ClusterCeiling {
			t.Errorf("tenant %s: peak %d over its cluster ceiling %d", tr.Name, tr.PeakInflight, tr.ClusterCeiling)
		}
		if tr.OverAtClaim > 0 || tr.OverNodeCeiling > 0 {
			t.Errorf("tenant %s: a claim took it %d over the owners' ceilings; %d sweeps left a node over its ceiling", tr.Name, tr.OverAtClaim, tr.OverNodeCeiling)
		}
	}
	if bp.Audit.Held != heldRows(bp) {
		t.Errorf("audit held %d, paused tenants' rows %d", bp.Audit.Held, heldRows(bp))
	}
}

func heldRows(p *PolicyReport) int {
	n := 0
	for _, t := range p.Tenants {
		if t.Paused {
			n += t.HeldAtEnd
		}
	}
	return n
}

// TestWeightsShareTheBatch checks the weights scenario's point: with every
// tenant backlogged and unlimited, backpressure keeps in flight in
// proportion to the weights 1:2:4 while all three wait, within a row of
// rounding per node and weight.
func TestWeightsShareTheBatch(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s, err := LoadScenario("../../scenarios/weights.json")
	if err != nil {
		t.Fatal(err)
	}
	s = shrink(s)
	for i := range s.Tenants {
		s.Tenants[i].Arrivals[0].Rows = 200
	}
	rep, err := Run(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir(), Policies: []Policy{Backpressure}}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	checkShipped(t, s, rep.Policy(Backpressure)) // TestShippedScenarios leaves weights.json to this test
	tl := rep.Policy(Backpressure).Timeline
	if tl.Tick != s.Tick {
		t.Fatalf("timeline merged samples (tick %v): the test wants every tick", tl.Tick)
	}
	// Sample after the first service times end and long before anyone's
	// backlog can run out: 200 rows at 48 workers and 1.5s each last
	// over 6s for the weight-4 tenant.
	at := int(3 * time.Second / s.Tick)
	free, pro, ent := tl.Inflight[0][at], tl.Inflight[1][at], tl.Inflight[2][at]
	if free+pro+ent < 24 || abs(pro-2*free) > 2*s.Nodes || abs(ent-4*free) > 4*s.Nodes {
		t.Errorf("in flight at %v: free %d, pro %d, enterprise %d; want them split 1:2:4", time.Duration(at)*s.Tick, free, pro, ent)
	}
}

func abs(x int) int { return max(x, -x) }
