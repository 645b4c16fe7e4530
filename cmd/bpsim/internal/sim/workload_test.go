package sim

import (
	"reflect"
	"testing"
	"time"
)

func TestWorkloadIsDeterministic(t *testing.T) {
	s := DefaultScenario()
	a, b := newWorkload(s, 7), newWorkload(s, 7)
	if !reflect.DeepEqual(a.arrivals, b.arrivals) {
		t.Fatal("two workloads from seed 7 differ")
	}
	c := newWorkload(s, 8)
	if reflect.DeepEqual(a.arrivals, c.arrivals) {
		t.Fatal("seeds 7 and 8 drew the same workload")
	}
}

func TestWorkloadFollowsTheScenario(t *testing.T) {
	s := DefaultScenario()
	s.Tenants[1].ServiceTime = &ServiceTime{Min: 250 * time.Millisecond, Max: 250 * time.Millisecond}
	s.Tenants[2].Arrivals = []Arrival{{Pattern: PatternSteady, PerSecond: 5, From: 10 * time.Second, Until: 20 * time.Second}}
	w := newWorkload(s, 1)

	if got := w.perTenant[0]; got != 2000 {
		t.Errorf("bursty rows = %d, want the burst's 2000", got)
	}
	perQueue := map[string]int{}
	keys := map[string]bool{}
	last := 0
	windowTicks := int(s.Duration / s.Tick)
	for i, a := range w.arrivals {
		if keys[a.key] {
			t.Fatalf("arrival %d: key %q drawn twice", i, a.key)
		}
		keys[a.key] = true
		if a.tick < last {
			t.Fatalf("arrival %d: tick %d after tick %d: not in time order", i, a.tick, last)
		}
		last = a.tick
		if a.tick < 0 || a.tick >= windowTicks {
			t.Errorf("arrival %d: tick %d outside the window [0, %d)", i, a.tick, windowTicks)
		}
		st := s.ServiceTime
		if a.tenant == 1 {
			st = *s.Tenants[1].ServiceTime
		}
		lo, hi := int(ceilTicks(st.Min, s.Tick)), int(ceilTicks(st.Max, s.Tick))
		if a.service < lo || a.service > hi || a.service < 1 {
			t.Errorf("arrival %d (tenant %d): service %d ticks outside [%d, %d]", i, a.tenant, a.service, lo, hi)
		}
		switch a.tenant {
		case 0:
			perQueue[a.queue]++
			if a.tick != 0 {
				t.Errorf("arrival %d: burst row at tick %d, want 0", i, a.tick)
			}
		case 2:
			if a.tick < 100 || a.tick >= 200 {
				t.Errorf("arrival %d: steady row of [10s, 20s) at tick %d", i, a.tick)
			}
		}
		if w.arrivals[w.byKey[a.key]].key != a.key {
			t.Errorf("byKey[%q] points elsewhere", a.key)
		}
	}
	if len(perQueue) != 20 {
		t.Errorf("burst over %d queues, want 20", len(perQueue))
	}
	for q, n := range perQueue {
		if n != 100 {
			t.Errorf("queue %s got %d of the burst, want 2000/20 = 100", q, n)
		}
	}
	// A Poisson stream of 5/s over 10s: 50 expected; far outside that means
	// the rate is wrong, not bad luck (P(|N−50| > 25) < 1e-3).
	if n := w.perTenant[2]; n < 25 || n > 75 {
		t.Errorf("steady 5/s over 10s drew %d rows, want about 50", n)
	}
	total := 0
	for tick, rows := range w.perTick {
		for _, a := range rows {
			if a.tick != tick {
				t.Errorf("perTick[%d] holds a row of tick %d", tick, a.tick)
			}
		}
		total += len(rows)
	}
	if total != len(w.arrivals) {
		t.Errorf("perTick holds %d rows, want %d", total, len(w.arrivals))
	}
}
