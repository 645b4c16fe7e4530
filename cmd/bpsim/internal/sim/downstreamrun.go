package sim

import (
	"errors"
	"math"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// Convergence windows: the in-flight band around the capacity, and how
// long in-flight must stay in it.
const (
	convergeBand = 0.10
	convergeHold = 2 * time.Second
	// steadyAfter is how long after a capacity change a call counts as
	// "after convergence" for the 429 rate (the target's re-convergence
	// bound): the same window for every arm.
	steadyAfter = 5 * time.Second
)

// downstreamRun is one tenant's downstream during one arm's run: its
// state, decided by the driver, and what is measured of it.
type downstreamRun struct {
	spec     *Downstream
	limited  bool // false under NoSignals: every call is served at its drawn time
	capacity int
	next     int // index into spec.Changes

	accepted  int // calls being served
	rejecting int // 429s being answered
	// recent is a ring of the 429s answered in each of the last second's
	// ticks; recentSum their sum, recentAt the tick of the ring's head.
	recent    []int
	recentSum int
	recentAt  int
	// slowCarry is the fraction of a tick of slowdown owed to the next
	// served call (in [0, 1)).
	slowCarry float64

	calls, succeeded, rejected int
	goodInWindow               int // calls served and settled inside the arrival window
	steadyCalls, steadyRej     int
	// inflight and capacities are, per tick of the arrival window, the
	// tenant's rows in flight after the sweeps and the capacity then.
	inflight, capacities []int
	// ceilings is, under the adaptive arm, the sum over the nodes of the
	// tenant's ceiling after each tick's sweeps (adaptive where a node's
	// controller has one, else static), sampled as the timeline is.
	ceilings *sampler
}

// newDownstreams makes the run's downstreams, per tenant (nil: none).
func newDownstreams(s Scenario, p Policy) []*downstreamRun {
	if !s.hasDownstreams() {
		return nil
	}
	out := make([]*downstreamRun, len(s.Tenants))
	for i, t := range s.Tenants {
		if t.Downstream != nil {
			out[i] = &downstreamRun{spec: t.Downstream, limited: p != NoSignals, capacity: t.Downstream.Capacity,
				recent: make([]int, max(1, int(time.Second/s.Tick)))}
			if p == Adaptive {
				out[i].ceilings = newSampler(1)
			}
		}
	}
	return out
}

// advance applies the capacity changes due by tick t.
func (d *downstreamRun) advance(t int, tick time.Duration) {
	for d.next < len(d.spec.Changes) && int(d.spec.Changes[d.next].At/tick) <= t {
		d.capacity = d.spec.Changes[d.next].Capacity
		d.next++
	}
}

// nextChange is the tick of the next capacity change, or -1.
func (d *downstreamRun) nextChange(tick time.Duration) int {
	if d.next < len(d.spec.Changes) {
		return int(d.spec.Changes[d.next].At / tick)
	}
	return -1
}

// phaseStart is the tick of the last capacity change at or before t (0
// before the first).
func (d *downstreamRun) phaseStart(t int, tick time.Duration) int {
	start := 0
	for _, c := range d.spec.Changes {
		if ct := int(c.At / tick); ct <= t {
			start = ct
		}
	}
	return start
}

// call is a call to the downstream at tick t for a row whose drawn
// service is base ticks: it returns how many ticks the call takes and
// whether it is answered 429. window is the arrival window in ticks.
func (d *downstreamRun) call(t, base int, s Scenario) (service int, rejected bool) {
	d.calls++
	steady := t < int(s.Duration/s.Tick) && t >= d.phaseStart(t, s.Tick)+int(ceilTicks(steadyAfter, s.Tick))
	if steady {
		d.steadyCalls++
	}
	if !d.limited {
		d.accepted++
		return base, false
	}
	// Move the ring of recent 429s on to tick t.
	for ; d.recentAt < t; d.recentAt++ {
		k := (d.recentAt + 1) % len(d.recent)
		d.recentSum -= d.recent[k]
		d.recent[k] = 0
	}
	rejectTicks := max(1, int(ceilTicks(d.spec.RejectTime, s.Tick)))
	if d.accepted >= d.capacity {
		d.rejecting++
		d.rejected++
		d.recent[t%len(d.recent)]++
		d.recentSum++
		if steady {
			d.steadyRej++
		}
		return rejectTicks, true
	}
	d.accepted++
	if d.recentSum == 0 || d.spec.Slowdown == 0 {
		return base, false
	}
	// The 429s' share of the last second's capacity, in slot-ticks. The
	// slowdown's fraction of a tick is carried to the next call rather
	// than rounded up: rounded up, a single 429 (u = 1/240 at C = 24)
	// made every call of the next second a whole tick (~20%) slower.
	u := float64(d.recentSum*rejectTicks) / float64(d.capacity*len(d.recent))
	d.slowCarry += float64(base) * d.spec.Slowdown * min(1, u)
	extra := int(d.slowCarry)
	d.slowCarry -= float64(extra)
	return base + extra, false
}

// done ends a call at tick t.
func (d *downstreamRun) done(t int, rejected bool, window int) {
	if rejected {
		d.rejecting--
		return
	}
	d.accepted--
	d.succeeded++
	if t < window {
		d.goodInWindow++
	}
}

// record records tick t's rows in flight, inside the window.
func (d *downstreamRun) record(t, inflight, window int) {
	if t < window {
		d.inflight = append(d.inflight, inflight)
		d.capacities = append(d.capacities, d.capacity)
	}
}

// report is d's figures.
func (d *downstreamRun) report(s Scenario) *DownstreamReport {
	window := int(s.Duration / s.Tick)
	r := &DownstreamReport{Capacity: d.spec.Capacity, Changes: d.spec.Changes, Calls: d.calls, Succeeded: d.succeeded, Rejected: d.rejected,
		Goodput: float64(d.goodInWindow) / s.Duration.Seconds(), SteadyCalls: d.steadyCalls}
	if d.calls > 0 {
		r.RejectedPer1000 = 1000 * float64(d.rejected) / float64(d.calls)
	}
	if d.steadyCalls > 0 {
		r.SteadyRejectedPer1000 = 1000 * float64(d.steadyRej) / float64(d.steadyCalls)
	}
	if d.ceilings != nil {
		r.Ceilings = Timeline{Tick: time.Duration(d.ceilings.stride) * s.Tick, Inflight: d.ceilings.vals}
	}
	starts := []CapacityChange{{At: 0, Capacity: d.spec.Capacity}}
	starts = append(starts, d.spec.Changes...)
	hold := int(ceilTicks(convergeHold, s.Tick))
	for k, c := range starts {
		from := int(c.At / s.Tick)
		end := min(window, len(d.inflight))
		if k+1 < len(starts) {
			end = min(end, int(starts[k+1].At/s.Tick))
		}
		cv := Convergence{At: c.At, Capacity: c.Capacity}
		if t, ok := converged(d.inflight, d.capacities, from, end, hold); ok {
			cv.Converged, cv.After = true, time.Duration(t-from)*s.Tick
		}
		r.Convergence = append(r.Convergence, cv)
	}
	return r
}

// converged returns the first tick t in [from, end−hold] from which
// inflight stays within ±convergeBand of capacity for hold ticks.
func converged(inflight, capacity []int, from, end, hold int) (int, bool) {
	run := 0
	for u := from; u < end; u++ {
		c := float64(capacity[u])
		if math.Abs(float64(inflight[u])-c) <= convergeBand*c {
			run++
		} else {
			run = 0
		}
		if run == hold {
			return u - hold + 1, true
		}
	}
	return 0, false
}

// result is what the handler of job j returns: dispatch.Overloaded with
// the downstream's Retry-After for a call answered 429, else nil.
func (j job) result(s Scenario) error {
	if !j.rejected {
		return nil
	}
	return dispatch.Overloaded(s.Tenants[j.tenant].Downstream.RetryAfter, errTooManyRequests)
}

// errTooManyRequests is the reason of a 429.
var errTooManyRequests = errors.New("HTTP 429 Too Many Requests")

// outcome is the completion the dispatcher writes for job j.
func (j job) outcome() outbox.Outcome {
	if j.rejected {
		return outbox.Snooze
	}
	return outbox.Settle
}
