package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
