package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// The arms of a scenario with a downstream: each runs the backpressure
// policy's dispatcher nodes over the same workload, and differs in what
// the downstream does and how the dispatcher is told its capacity.
const (
	// NoSignals is the same scenario with no downstream limit: every call
	// succeeds at its drawn service time. It is the baseline of the other
	// tenants' waits (their run-to-run noise), and of what the overloaded
	// tenants would do unhindered.
	NoSignals Policy = "no-signals"
	// Static runs the tenants' quotas as the scenario gives them (above
	// the downstream's capacity): calls beyond the capacity get 429, the
	// rows are snoozed for the Retry-After, and the quota keeps claiming.
	Static Policy = "static"
	// Oracle sets each downstream tenant's quota to the downstream's
	// capacity and changes it when the capacity changes: the static quota
	// an operator who knew the capacity would set.
	Oracle Policy = "oracle"
	// Adaptive runs the static arm's quotas with the dispatchers'
	// adaptive ceilings on (dispatch.Options.Adaptive, from the
	// scenario's Adaptive, defaults where it says nothing): each node
	// lowers a tenant's ceiling on a 429 and raises it while calls
	// succeed (with holdClaims, a Retry-After also holds the tenant's
	// rows on that node).
	Adaptive Policy = "adaptive"
)

// DownstreamArms lists the arms in the order bpsim runs and reports them.
var DownstreamArms = []Policy{NoSignals, Static, Oracle, Adaptive}

// dispatched reports whether policy p runs dispatch.Dispatcher nodes: the
// backpressure policy and every downstream arm.
func (p Policy) dispatched() bool {
	return p == Backpressure || slices.Contains(DownstreamArms, p)
}

// arm reports whether p is one of the downstream arms.
func (p Policy) arm() bool { return slices.Contains(DownstreamArms, p) }

// maxCapacity bounds a downstream's capacity.
const maxCapacity = 100_000

// maxSlowdown bounds Downstream.Slowdown.
const maxSlowdown = 10

// Downstream is the API a tenant's handlers call, as bpsim models it: it
// serves at most Capacity calls at once, cluster-wide. A call that finds
// Capacity calls already served is answered 429 with Retry-After after
// RejectTime, and its handler returns dispatch.Overloaded(RetryAfter, …):
// the dispatcher snoozes the row (no attempt spent) for the Retry-After.
// A call that is served runs its drawn service time, stretched by
// 1 + Slowdown × min(1, u), u the share of the downstream's capacity its
// 429s took over the last second (429s answered then × RejectTime ÷
// (Capacity × 1 s)): shedding load costs the downstream work, so an
// overloaded downstream is a slower one. Every
// decision is the driver's, at the tick of the claim, in the order the
// sweeps claimed, so a run is reproducible from its seed.
type Downstream struct {
	// Capacity is the calls the downstream serves at once from time 0,
	// 1..100000.
	Capacity int
	// Changes give the capacity new values at simulated times inside the
	// arrival window, in time order.
	Changes []CapacityChange
	// RetryAfter is the Retry-After of a 429, 0..outbox.MaxDelay; 0 says
	// none (the dispatcher snoozes for its Options.OverloadSnooze).
	RetryAfter time.Duration
	// RejectTime is how long a 429 takes to come back, rounded up to whole
	// ticks; 0 means one tick. At most 1h.
	RejectTime time.Duration
	// Slowdown is how much an overloaded downstream slows the calls it
	// serves (see above), 0..10.
	Slowdown float64
}

// CapacityChange is a downstream's new capacity from simulated time At.
type CapacityChange struct {
	At       time.Duration
	Capacity int
}

type downstreamJSON struct {
	Capacity   *int                 `json:"capacity"`
	Changes    []capacityChangeJSON `json:"changes,omitempty"`
	RetryAfter *string              `json:"retryAfter,omitempty"`
	RejectTime *string              `json:"rejectTime,omitempty"`
	Slowdown   *float64             `json:"slowdown,omitempty"`
}

type capacityChangeJSON struct {
	At       *string `json:"at"`
	Capacity *int    `json:"capacity"`
}

// decodeDownstream decodes a tenant's "downstream".
func decodeDownstream(raw json.RawMessage, at string) (*downstreamJSON, error) {
	var d downstreamJSON
	err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
		"capacity": intField(&d.Capacity),
		"changes": arrayField(func(raw json.RawMessage, at string) error {
			var c capacityChangeJSON
			err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
				"at":       stringField(&c.At),
				"capacity": intField(&c.Capacity),
			})
			d.Changes = append(d.Changes, c)
			return err
		}, func() { d.Changes = []capacityChangeJSON{} }),
		"retryAfter": stringField(&d.RetryAfter),
		"rejectTime": stringField(&d.RejectTime),
		"slowdown":   floatField(&d.Slowdown),
	})
	return &d, err
}

// downstream is the Downstream dj describes, at its path at.
func (dj downstreamJSON) downstream(at string) (*Downstream, error) {
	if dj.Capacity == nil {
		return nil, &ScenarioError{Field: at + ".capacity", Problem: fmt.Sprintf("missing: want the calls the downstream serves at once, 1..%d", maxCapacity)}
	}
	d := &Downstream{Capacity: *dj.Capacity}
	var err error
	if d.RetryAfter, err = parseDuration(at+".retryAfter", dj.RetryAfter, 0); err != nil {
		return nil, err
	}
	if d.RejectTime, err = parseDuration(at+".rejectTime", dj.RejectTime, 0); err != nil {
		return nil, err
	}
	if dj.Slowdown != nil {
		d.Slowdown = *dj.Slowdown
	}
	for k, cj := range dj.Changes {
		cat := fmt.Sprintf("%s.changes[%d]", at, k)
		if cj.At == nil {
			return nil, &ScenarioError{Field: cat + ".at", Problem: "missing: want the simulated time of the change"}
		}
		if cj.Capacity == nil {
			return nil, &ScenarioError{Field: cat + ".capacity", Problem: fmt.Sprintf("missing: want the new capacity, 1..%d", maxCapacity)}
		}
		t, err := parseDuration(cat+".at", cj.At, 0)
		if err != nil {
			return nil, err
		}
		d.Changes = append(d.Changes, CapacityChange{At: t, Capacity: *cj.Capacity})
	}
	return d, nil
}

// json is d in the file format (nil for nil).
func (d *Downstream) json() *downstreamJSON {
	if d == nil {
		return nil
	}
	j := &downstreamJSON{Capacity: ptr(d.Capacity)}
	for _, c := range d.Changes {
		j.Changes = append(j.Changes, capacityChangeJSON{At: ptr(c.At.String()), Capacity: ptr(c.Capacity)})
	}
	if d.RetryAfter != 0 {
		j.RetryAfter = ptr(d.RetryAfter.String())
	}
	if d.RejectTime != 0 {
		j.RejectTime = ptr(d.RejectTime.String())
	}
	if d.Slowdown != 0 {
		j.Slowdown = ptr(d.Slowdown)
	}
	return j
}

// hasDownstreams reports whether some tenant of s has a downstream.
func (s Scenario) hasDownstreams() bool {
	return slices.ContainsFunc(s.Tenants, func(t Tenant) bool { return t.Downstream != nil })
}

// validateDownstreams checks the tenants' downstreams and the arms.
func (s Scenario) validateDownstreams() error {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	for i, t := range s.Tenants {
		d := t.Downstream
		if d == nil {
			continue
		}
		at := fmt.Sprintf("tenants[%d].downstream", i)
		switch {
		case d.Capacity < 1 || d.Capacity > maxCapacity:
			return bad(at+".capacity", "%d is out of range: want 1..%d", d.Capacity, maxCapacity)
		case d.RetryAfter < 0 || d.RetryAfter > outbox.MaxDelay:
			return bad(at+".retryAfter", "%v is out of range: want 0 (none given) to %v", d.RetryAfter, outbox.MaxDelay)
		case d.RejectTime < 0 || d.RejectTime > time.Hour:
			return bad(at+".rejectTime", "%v is out of range: want 0 (one tick) to 1h", d.RejectTime)
		case !(d.Slowdown >= 0) || d.Slowdown > maxSlowdown:
			return bad(at+".slowdown", "%v is out of range: want 0..%d", d.Slowdown, maxSlowdown)
		}
		for k, c := range d.Changes {
			cat := fmt.Sprintf("%s.changes[%d]", at, k)
			switch {
			case c.At <= 0 || c.At >= s.Duration:
				return bad(cat+".at", "%v is outside the arrival window (0, %v)", c.At, s.Duration)
			case k > 0 && c.At <= d.Changes[k-1].At:
				return bad(cat+".at", "%v is not after changes[%d] (%v): list changes in time order", c.At, k-1, d.Changes[k-1].At)
			case c.Capacity < 1 || c.Capacity > maxCapacity:
				return bad(cat+".capacity", "%d is out of range: want 1..%d", c.Capacity, maxCapacity)
			}
		}
	}
	if err := s.Adaptive.validate(); err != nil {
		return err
	}
	if s.Arms == nil {
		return nil
	}
	if !s.hasDownstreams() {
		return bad("arms", "no tenant has a downstream: the arms compare what a dispatcher does with one (leave \"arms\" out)")
	}
	if len(s.Arms) == 0 {
		return bad("arms", "empty: want some of %v, or leave it out for all", DownstreamArms)
	}
	for k, a := range s.Arms {
		if !a.arm() {
			return bad(fmt.Sprintf("arms[%d]", k), "%q is not an arm: want one of %v", a, DownstreamArms)
		}
		if j := slices.Index(s.Arms, a); j < k {
			return bad(fmt.Sprintf("arms[%d]", k), "%q is also arms[%d]", a, j)
		}
	}
	return nil
}

// longestDownstreamCall is the longest a call to a downstream can take:
// its tenant's longest service time, stretched by the slowdown at its
// most, or the reject time.
func (s Scenario) longestDownstreamCall() time.Duration {
	var longest time.Duration
	for _, t := range s.Tenants {
		d := t.Downstream
		if d == nil {
			continue
		}
		st := s.ServiceTime
		if t.ServiceTime != nil {
			st = *t.ServiceTime
		}
		longest = max(longest, time.Duration(math.Ceil(float64(ceilTicks(st.Max, s.Tick)*s.Tick)*(1+d.Slowdown))), d.RejectTime)
	}
	return longest
}

// CheckPolicies returns the policies a run of s compares: policies, or
// when it is empty the scenario's arms (every arm when it lists none) for
// a scenario with a downstream, and [Policies] for one without. A policy
// that does not fit the scenario is a *[ScenarioError]: an arm needs a
// downstream to compare, and the other policies do not model one.
func CheckPolicies(s Scenario, policies []Policy) ([]Policy, error) {
	ds := s.hasDownstreams()
	if len(policies) == 0 {
		switch {
		case !ds:
			return Policies, nil
		case len(s.Arms) > 0:
			return s.Arms, nil
		}
		return DownstreamArms, nil
	}
	for k, p := range policies {
		switch {
		case p.arm() && !ds:
			return nil, &ScenarioError{Field: "tenants", Problem: fmt.Sprintf("policy %q is an arm of a scenario with a downstream, and no tenant has one", p)}
		case !p.arm() && ds && slices.Contains(Policies, p):
			return nil, &ScenarioError{Field: "tenants", Problem: fmt.Sprintf("policy %q does not model the tenants' downstreams: want one of the arms %v", p, DownstreamArms)}
		case !p.arm() && !slices.Contains(Policies, p):
			return nil, &ScenarioError{Field: "policies", Problem: fmt.Sprintf("%q is not a policy: want one of %v, or for a scenario with a downstream one of %v", p, Policies, DownstreamArms)}
		}
		if j := slices.Index(policies, p); j < k {
			return nil, &ScenarioError{Field: "policies", Problem: fmt.Sprintf("%q is named twice", p)}
		}
	}
	return policies, nil
}

// armScenario is s as arm p runs it: for the oracle, each downstream
// tenant's quota is its downstream's capacity, changed with it; every
// other arm runs s as it is.
func armScenario(s Scenario, p Policy) Scenario {
	if p != Oracle {
		return s
	}
	s.Tenants = slices.Clone(s.Tenants)
	changes := slices.Clone(s.Changes)
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if t.Downstream == nil {
			continue
		}
		t.Quota = t.Downstream.Capacity
		for _, c := range t.Downstream.Changes {
			changes = append(changes, Change{At: c.At, Quotas: map[string]int{t.Name: c.Capacity}})
		}
	}
	slices.SortStableFunc(changes, func(a, b Change) int { return int(a.At - b.At) })
	s.Changes = changes
	return s
}

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

// DownstreamReport is one tenant's downstream under one arm. Times are
// simulated; the figures that are rates count the arrival window.
type DownstreamReport struct {
	Capacity int              // at the start
	Changes  []CapacityChange // the capacity's changes
	// Calls is the calls made (claims of the tenant's rows), Succeeded
	// those served, Rejected those answered 429.
	Calls, Succeeded, Rejected int
	// Goodput is the calls served and settled inside the arrival window,
	// per second of it. VsOracle is Goodput over the oracle arm's, when
	// the run has one (0: it has none).
	Goodput  float64
	VsOracle float64
	// RejectedPer1000 is 429s per 1,000 calls over the run.
	// SteadyRejectedPer1000 is the same over the steady windows, from 5 s
	// after the start and after each capacity change to the next change
	// (or the end of the arrival window): "after convergence", the same
	// windows for every arm. SteadyCalls counts the calls in them.
	RejectedPer1000       float64
	SteadyCalls           int
	SteadyRejectedPer1000 float64
	// Convergence is, for the start and each capacity change, how long
	// the tenant's rows in flight took to converge on the capacity.
	Convergence []Convergence
	// Ceilings is, under the adaptive arm, the sum over the nodes of the
	// tenant's ceiling (adaptive where a node's controller holds one,
	// else static) after each tick's sweeps, sampled as the timeline is
	// (the peak over Ceilings.Tick); empty under the other arms.
	Ceilings Timeline
}

// Convergence is the time from a capacity change At (0: the start) to the
// first tick from which the tenant's rows in flight (claimed, not yet
// settled, cluster-wide) stay within ±10% of the capacity for 2 s, inside
// the phase (before the next change or the end of the arrival window).
// Converged is false when no such tick exists.
type Convergence struct {
	At        time.Duration
	Capacity  int
	Converged bool
	After     time.Duration
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

// MarshalJSON writes durations as milliseconds, and a convergence that
// never came as null.
func (r *DownstreamReport) MarshalJSON() ([]byte, error) {
	type change struct {
		AtMs     float64 `json:"atMs"`
		Capacity int     `json:"capacity"`
	}
	type conv struct {
		AtMs     float64  `json:"atMs"`
		Capacity int      `json:"capacity"`
		AfterMs  *float64 `json:"convergedAfterMs"` // null: never within the phase
	}
	j := struct {
		Capacity        int      `json:"capacity"`
		Changes         []change `json:"changes,omitempty"`
		Calls           int      `json:"calls"`
		Succeeded       int      `json:"succeeded"`
		Rejected        int      `json:"rejected429"`
		Goodput         float64  `json:"goodputPerSecond"`
		VsOracle        *float64 `json:"goodputVsOracle,omitempty"`
		Per1000         float64  `json:"rejectedPer1000Calls"`
		SteadyCalls     int      `json:"steadyCalls"`
		SteadyPer1000   float64  `json:"steadyRejectedPer1000Calls"`
		Convergence     []conv   `json:"convergence"`
		ConvergeBand    float64  `json:"convergenceBand"`
		ConvergeHoldMs  float64  `json:"convergenceHoldMs"`
		SteadyAfterMsec float64  `json:"steadyFromMsAfterChange"`
		CeilingTickMs   float64  `json:"ceilingTimelineTickMs,omitempty"`
		Ceilings        []int    `json:"ceilingTimeline,omitempty"`
	}{Capacity: r.Capacity, Calls: r.Calls, Succeeded: r.Succeeded, Rejected: r.Rejected, Goodput: round3(r.Goodput),
		Per1000: round3(r.RejectedPer1000), SteadyCalls: r.SteadyCalls, SteadyPer1000: round3(r.SteadyRejectedPer1000),
		ConvergeBand: convergeBand, ConvergeHoldMs: ms(convergeHold), SteadyAfterMsec: ms(steadyAfter)}
	if r.VsOracle > 0 {
		j.VsOracle = ptr(round3(r.VsOracle))
	}
	if len(r.Ceilings.Inflight) > 0 {
		j.CeilingTickMs, j.Ceilings = ms(r.Ceilings.Tick), r.Ceilings.Inflight[0]
	}
	for _, c := range r.Changes {
		j.Changes = append(j.Changes, change{ms(c.At), c.Capacity})
	}
	for _, c := range r.Convergence {
		cv := conv{AtMs: ms(c.At), Capacity: c.Capacity}
		if c.Converged {
			cv.AfterMs = ptr(ms(c.After))
		}
		j.Convergence = append(j.Convergence, cv)
	}
	return json.Marshal(j)
}

// compareArms fills in each downstream's goodput against the oracle arm's.
func (r *Report) compareArms() {
	oracle := r.Policy(Oracle)
	if oracle == nil {
		return
	}
	for _, p := range r.Policies {
		for i, t := range p.Tenants {
			o := oracle.Tenants[i].Downstream
			if t.Downstream != nil && o != nil && o.Goodput > 0 {
				t.Downstream.VsOracle = t.Downstream.Goodput / o.Goodput
			}
		}
	}
}

// downstreamJSONOf is r for report.json (nil when r is).
func downstreamJSONOf(r *DownstreamReport) any {
	if r == nil {
		return nil
	}
	return r
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

// armOptions sets the dispatcher options of arm p (nil: none beyond the
// lockstep's): the adaptive arm's controller, on the simulated clock.
func armOptions(p Policy, s Scenario, clock *simClock) func(*dispatch.Options) {
	if p != Adaptive {
		return nil
	}
	return func(o *dispatch.Options) {
		a := s.Adaptive
		o.Adaptive = &dispatch.AdaptiveCeilings{Floor: a.Floor, Increase: a.Increase, Decrease: a.Decrease, Window: a.Window,
			HoldClaims: a.HoldClaims, Timeouts: a.Timeouts, Now: clock.Now}
	}
}

// AdaptiveSpec is the adaptive arm's controller (dispatch.AdaptiveCeilings
// without its clock, which is the simulated one); every zero field takes
// dispatch's default.
type AdaptiveSpec struct {
	Floor    int           // 0..dispatch.MaxAdaptiveStep (0: 1)
	Increase int           // 0..dispatch.MaxAdaptiveStep (0: 1)
	Decrease float64       // [0, 1] (0: 0.9)
	Window   time.Duration // 0 (6s), or dispatch.MinAdaptiveWindow..outbox.MaxDelay
	// HoldClaims: a Retry-After holds the tenant's claims on the node
	// (dispatch.AdaptiveCeilings.HoldClaims).
	HoldClaims bool
	Timeouts   bool
}

type adaptiveJSON struct {
	Floor    *int     `json:"floor,omitempty"`
	Increase *int     `json:"increase,omitempty"`
	Decrease *float64 `json:"decrease,omitempty"`
	Window   *string  `json:"window,omitempty"`
	Timeouts *bool    `json:"timeouts,omitempty"`
	Hold     *bool    `json:"holdClaims,omitempty"`
}

// boolField decodes a JSON boolean into *dst.
func boolField(dst **bool) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return &ScenarioError{Field: at, Problem: "want true or false, got " + describe(raw)}
		}
		*dst = &b
		return nil
	}
}

// decodeAdaptive decodes the scenario's "adaptive" into *dst.
func decodeAdaptive(dst *AdaptiveSpec) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var j adaptiveJSON
		if err := decodeObject(raw, at, map[string]func(json.RawMessage, string) error{
			"floor":      intField(&j.Floor),
			"increase":   intField(&j.Increase),
			"decrease":   floatField(&j.Decrease),
			"window":     stringField(&j.Window),
			"timeouts":   boolField(&j.Timeouts),
			"holdClaims": boolField(&j.Hold),
		}); err != nil {
			return err
		}
		a := AdaptiveSpec{Floor: orInt(j.Floor, 0), Increase: orInt(j.Increase, 0)}
		if j.Decrease != nil {
			a.Decrease = *j.Decrease
		}
		if j.Timeouts != nil {
			a.Timeouts = *j.Timeouts
		}
		if j.Hold != nil {
			a.HoldClaims = *j.Hold
		}
		var err error
		if a.Window, err = parseDuration(at+".window", j.Window, 0); err != nil {
			return err
		}
		*dst = a
		return nil
	}
}

// json is a in the file format (nil for the zero value).
func (a AdaptiveSpec) json() *adaptiveJSON {
	if a == (AdaptiveSpec{}) {
		return nil
	}
	j := &adaptiveJSON{}
	if a.Floor != 0 {
		j.Floor = ptr(a.Floor)
	}
	if a.Increase != 0 {
		j.Increase = ptr(a.Increase)
	}
	if a.Decrease != 0 {
		j.Decrease = ptr(a.Decrease)
	}
	if a.Window != 0 {
		j.Window = ptr(a.Window.String())
	}
	if a.Timeouts {
		j.Timeouts = ptr(true)
	}
	if a.HoldClaims {
		j.Hold = ptr(true)
	}
	return j
}

// validate checks a against dispatch's bounds.
func (a AdaptiveSpec) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ScenarioError{Field: "adaptive." + field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case a.Floor < 0 || a.Floor > dispatch.MaxAdaptiveStep:
		return bad("floor", "%d is out of range: want 1..%d (0 or left out: 1)", a.Floor, dispatch.MaxAdaptiveStep)
	case a.Increase < 0 || a.Increase > dispatch.MaxAdaptiveStep:
		return bad("increase", "%d is out of range: want 1..%d (0 or left out: 1)", a.Increase, dispatch.MaxAdaptiveStep)
	case math.IsNaN(a.Decrease) || a.Decrease < 0 || a.Decrease > 1:
		return bad("decrease", "%v is out of range: want (0, 1] (0 or left out: 0.9)", a.Decrease)
	case a.Window < 0 || a.Window > 0 && a.Window < dispatch.MinAdaptiveWindow || a.Window > outbox.MaxDelay:
		return bad("window", "%v is out of range: want %v..%v (0 or left out: 6s)", a.Window, dispatch.MinAdaptiveWindow, outbox.MaxDelay)
	}
	return nil
}

// writeDownstreams writes the arms' comparison: per arm and downstream
// tenant goodput, 429s and convergence, then the other tenants' waits
// against the no-signals arm's. A report without downstreams writes
// nothing.
func (r *Report) writeDownstreams(w io.Writer) error {
	if !r.Scenario.hasDownstreams() {
		return nil
	}
	fmt.Fprintf(w, "downstreams: a call beyond capacity C is answered 429 with Retry-After; goodput = calls served within the %v window per second;\n", r.Scenario.Duration)
	fmt.Fprintf(w, "steady = from %v after the start and each change of C to the next; converged = first time from which rows in flight stay within ±%.0f%% of C for %v.\n",
		steadyAfter, convergeBand*100, convergeHold)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  arm\ttenant\tcalls\tserved\tgoodput\t×oracle\t429/1000\tsteady 429/1000\tconverged after (C at time)\t")
	for _, p := range r.Policies {
		for _, t := range p.Tenants {
			d := t.Downstream
			if d == nil {
				continue
			}
			vs := "-"
			if d.VsOracle > 0 {
				vs = strconv.FormatFloat(d.VsOracle, 'f', 3, 64)
			}
			var conv []string
			for _, c := range d.Convergence {
				after := "never"
				if c.Converged {
					after = fmtWait(c.After)
				}
				conv = append(conv, fmt.Sprintf("%s (C %d at %v)", after, c.Capacity, c.At))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%.1f/s\t%s\t%.1f\t%.1f\t%s\t\n", p.Policy, t.Name, d.Calls, d.Succeeded, d.Goodput, vs,
				d.RejectedPer1000, d.SteadyRejectedPer1000, strings.Join(conv, ", "))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	base := r.Policy(NoSignals)
	if base == nil {
		return nil
	}
	fmt.Fprintln(w, "the other tenants' waits, p50 / p99, against the no-signals arm's:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  arm\ttenant\twait p50\tno-signals\twait p99\tno-signals\t")
	for _, p := range r.Policies {
		if p == base {
			continue
		}
		for i, t := range p.Tenants {
			if t.Downstream != nil {
				continue
			}
			b := base.Tenants[i]
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", p.Policy, t.Name, fmtWait(t.WaitP50), fmtWait(b.WaitP50), fmtWait(t.WaitP99), fmtWait(b.WaitP99))
		}
	}
	return tw.Flush()
}

// WriteSeedSummary writes the arms' figures across the runs reps of one
// scenario with different seeds (on one database): per arm and downstream
// tenant the range of goodput against the oracle's, the most 429s per
// 1,000 calls (overall and steady) and the longest convergence after each
// change of capacity ("never" counted apart); then per other tenant the
// no-signals arm's run-to-run noise (the range of its waits over the
// seeds) and each arm's largest difference from the same seed's
// no-signals waits. A scenario without a downstream writes nothing.
func WriteSeedSummary(w io.Writer, reps []*Report) error {
	if len(reps) == 0 || !reps[0].Scenario.hasDownstreams() {
		return nil
	}
	s := reps[0].Scenario
	var seeds []string
	for _, r := range reps {
		seeds = append(seeds, strconv.FormatInt(r.Seed, 10))
	}
	fmt.Fprintf(w, "across seeds %s (%s):\n", strings.Join(seeds, ", "), reps[0].Database)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  arm\ttenant\tgoodput ×oracle\t429/1000 max\tsteady 429/1000 max\tconverged after, worst seed\t")
	for k, p := range reps[0].Policies {
		for i, t := range s.Tenants {
			if t.Downstream == nil {
				continue
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			var per, steady float64
			conv := make([]time.Duration, len(t.Downstream.Changes)+1)
			never := make([]int, len(conv))
			for _, r := range reps {
				d := r.Policies[k].Tenants[i].Downstream
				lo, hi = min(lo, d.VsOracle), max(hi, d.VsOracle)
				per, steady = max(per, d.RejectedPer1000), max(steady, d.SteadyRejectedPer1000)
				for c, cv := range d.Convergence {
					if cv.Converged {
						conv[c] = max(conv[c], cv.After)
					} else {
						never[c]++
					}
				}
			}
			var cs []string
			prev := t.Downstream.Capacity
			for c := range conv {
				label := fmt.Sprintf("start (C %d)", prev)
				if c > 0 {
					ch := t.Downstream.Changes[c-1]
					label = fmt.Sprintf("C %d→%d at %v", prev, ch.Capacity, ch.At)
					prev = ch.Capacity
				}
				v := fmtWait(conv[c])
				if never[c] > 0 {
					v = fmt.Sprintf("never in %d of %d", never[c], len(reps))
				}
				cs = append(cs, label+": "+v)
			}
			vs := "-"
			if hi > 0 {
				vs = fmt.Sprintf("%.3f–%.3f", lo, hi)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.1f\t%.1f\t%s\t\n", p.Policy, t.Name, vs, per, steady, strings.Join(cs, ", "))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	base := slices.IndexFunc(reps[0].Policies, func(p *PolicyReport) bool { return p.Policy == NoSignals })
	if base < 0 {
		return nil
	}
	fmt.Fprintln(w, "the other tenants' waits: the no-signals arm's range over the seeds (its run-to-run noise), and each arm's largest |Δ| from the same seed's no-signals:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  tenant\tno-signals p50\tno-signals p99\tarm\tmax |Δ p50|\tmax |Δ p99|\twithin noise\t")
	for i, t := range s.Tenants {
		if t.Downstream != nil {
			continue
		}
		p50lo, p50hi, p99lo, p99hi := time.Duration(math.MaxInt64), time.Duration(0), time.Duration(math.MaxInt64), time.Duration(0)
		for _, r := range reps {
			b := r.Policies[base].Tenants[i]
			p50lo, p50hi, p99lo, p99hi = min(p50lo, b.WaitP50), max(p50hi, b.WaitP50), min(p99lo, b.WaitP99), max(p99hi, b.WaitP99)
		}
		// Waits are whole ticks: a spread under a tick is a tick.
		noise50, noise99 := max(p50hi-p50lo, s.Tick), max(p99hi-p99lo, s.Tick)
		for k, p := range reps[0].Policies {
			if k == base {
				continue
			}
			var d50, d99 time.Duration
			for _, r := range reps {
				a, b := r.Policies[k].Tenants[i], r.Policies[base].Tenants[i]
				d50, d99 = max(d50, (a.WaitP50-b.WaitP50).Abs()), max(d99, (a.WaitP99-b.WaitP99).Abs())
			}
			ok := "yes"
			if d50 > noise50 || d99 > noise99 {
				ok = "NO"
			}
			fmt.Fprintf(tw, "  %s\t%s–%s\t%s–%s\t%s\t%s\t%s\t%s\t\n", t.Name, fmtWait(p50lo), fmtWait(p50hi), fmtWait(p99lo), fmtWait(p99hi), p.Policy, fmtWait(d50), fmtWait(d99), ok)
		}
	}
	return tw.Flush()
}
