package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/backpressure"
)

// AdaptiveCeiling is one namespace's adaptive ceiling on this node, as
// [Dispatcher.AdaptiveCeilings] reports it.
type AdaptiveCeiling struct {
	// Ceiling is the ceiling the planner applies: Pinned when set, else
	// Learned (the planner never lets it exceed the static ceiling).
	Ceiling int
	// Learned is the controller's ceiling, in [min(Floor, Static), Static].
	Learned int
	// Static is the static per-node ceiling it is held under
	// (Backpressure.Ceiling, counted as Workers + Queue when Unlimited or
	// above that).
	Static int
	// HoldUntil is when the downstream's Retry-After lets the namespace's
	// rows be claimed again, with AdaptiveCeilings.HoldClaims; zero when
	// no hold is to come (or Pinned, or without HoldClaims: the Retry-After
	// then only keeps the ceiling from rising).
	HoldUntil time.Time
	// Pinned is the operator's pin ([Dispatcher.PinAdaptiveCeiling]); 0
	// when the controller steers.
	Pinned int
	// Signals counts the downstream's signals received for the namespace
	// since the controller first saw it (or since a reset).
	Signals int
	// Breaches counts the gate self-check's breaches (see docs/adaptive.md):
	// times the dispatcher held more rows of the namespace than the
	// downstream had asked for, after it asked.
	Breaches int
}

// AdaptEvent describes one step of the adaptive controller that changed
// a namespace's ceiling or hold, or a signal received ([Metrics.Adapted]).
type AdaptEvent struct {
	Namespace string
	Signal    bool // a downstream's signal (Overloaded, or a timeout with AdaptiveCeilings.Timeouts)
	Cut       bool // the signal cut the ceiling (false within Window of the last cut)
	// Ceiling, Learned, Static, HoldUntil and Pinned are the namespace's
	// state after the step, as in [AdaptiveCeiling].
	Ceiling   int
	Learned   int
	Static    int
	HoldUntil time.Time
	Pinned    int
	// Breach is set when the step is a gate self-check's breach: a
	// signal that found more rows held than the downstream last asked for.
	Breach bool
	// Held is the namespace's rows this node held at the step; for a
	// breach, the rows claimed (the plan's claimed rows plus the sweep's).
	Held int
}

// adaptive is a Dispatcher's adaptive-ceiling controller: per namespace
// its AIMD state and the operator's pin, and the Backpressure it steers.
type adaptive struct {
	p        AdaptiveCeilings // defaulted, Now set
	bp       *backpressure.Backpressure
	capacity int // Workers + Queue: the most rows of a namespace the node holds
	m        Metrics
	log      *slog.Logger

	mu sync.Mutex
	ns map[string]*nsAdapt // namespaces away from their static ceiling, or pinned
}

// nsAdapt is one namespace's entry.
type nsAdapt struct {
	s         aimdState
	pinned    int // 0: auto
	signals   int
	breaches  int
	breaching bool      // the self-check's episode is open: its alert was logged
	preCut    int       // the learned ceiling before the last cut
	holdSet   time.Time // when the hold to come began
}

func newAdaptive(bp *backpressure.Backpressure, o *Options) *adaptive {
	p := *o.Adaptive
	if p.Now == nil {
		p.Now = bp.Config().Clock
		if p.Now == nil {
			p.Now = time.Now
		}
	}
	return &adaptive{p: p, bp: bp, capacity: o.Workers + o.Queue, m: o.Metrics, log: o.Logger, ns: make(map[string]*nsAdapt)}
}

// static returns namespace's static ceiling as the controller holds it:
// Backpressure.Ceiling, at most the node's capacity.
func (a *adaptive) static(namespace string) int {
	c := a.bp.Ceiling(namespace)
	if c == backpressure.Unlimited || c > a.capacity {
		return a.capacity
	}
	return max(c, 0)
}

// observe takes a handler's result for a row of namespace, with held the
// namespace's rows this node held (the row among them).
func (a *adaptive) observe(namespace string, err error, held int) {
	var (
		signal     bool
		retryAfter time.Duration
		oe         *OverloadedError
	)
	switch {
	case err == nil:
	case errors.As(err, &oe):
		signal, retryAfter = true, oe.RetryAfter
	case a.p.Timeouts && errors.Is(err, context.DeadlineExceeded):
		signal = true
	default:
		return
	}
	now := a.p.Now()
	static := a.static(namespace)
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.ns[namespace]
	if !ok {
		if !signal {
			return // at its static ceiling: a success teaches nothing
		}
		e = &nsAdapt{s: a.p.start(static)}
		a.ns[namespace] = e
	}
	before := e.s
	e.s = a.p.clamp(e.s, static)
	ev := AdaptEvent{Namespace: namespace, Signal: signal, Held: held}
	if signal {
		e.signals++
		e.s = a.p.signal(e.s, now, held, retryAfter)
		if ev.Cut = !e.s.cutAt.Equal(before.cutAt); ev.Cut {
			e.preCut = before.ceiling
		}
		if h := a.p.claimsHeld(e.s); h.After(now) && !a.p.claimsHeld(before).After(now) {
			e.holdSet = now
		}
	} else {
		e.s = a.p.success(e.s, now, held >= e.s.ceiling)
	}
	if !signal && e.s == before {
		return
	}
	a.install(namespace, e, now, &ev)
	a.m.Adapted(ev)
}

// settle re-clamps every entry whose static ceiling plan reports changed
// (a SetConfig, a shard hand-off), as rate buckets are settled at a
// change, and applies it; an entry recovered meanwhile (its hold over) is
// cleared. Cost: O(E·log N) for E entries.
func (a *adaptive) settle(plan backpressure.Plan) {
	now := a.p.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for ns, e := range a.ns {
		r, ok := plan.Namespace(ns)
		if !ok {
			continue
		}
		static := r.Ceiling
		if static == backpressure.Unlimited || static > a.capacity {
			static = a.capacity
		}
		if s := a.p.clamp(e.s, max(static, 0)); s != e.s || e.pinned == 0 && s.recovered(now) {
			e.s = s
			ev := AdaptEvent{Namespace: ns}
			a.install(ns, e, now, &ev)
			a.m.Adapted(ev)
		}
	}
}

// check is the gate's self-check of one sweep (docs/adaptive.md), the
// seed's producer compliance turned on the dispatcher: for each namespace
// the controller holds that the sweep claimed rows of (claimed), what the
// downstream asked for since the sweep began (at launched): the learned
// ceiling (the higher one before a cut made since; with HoldClaims, 0
// while a Retry-After that began before the sweep still holds), against
// what the dispatcher claimed, the plan's claimed rows plus the sweep's. The planner keeps
// that within the ceiling it applied, so only a ceiling applied above the
// learned one (a pin) breaches. A breach is counted, reported
// (Metrics.Adapted with Breach) and logged once per episode; an episode
// ends at a sweep within the ask.
func (a *adaptive) check(plan backpressure.Plan, claimed map[string]int, launched time.Time) {
	now := a.p.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for ns, n := range claimed {
		e, ok := a.ns[ns]
		r, planned := plan.Namespace(ns)
		if !ok || !planned {
			continue
		}
		asked := e.s.ceiling
		if e.s.cutAt.After(launched) {
			asked = max(asked, e.preCut)
		}
		if a.p.claimsHeld(e.s).After(now) && e.holdSet.Before(launched) {
			asked = 0
		}
		used := r.Claimed + n
		if used <= asked {
			e.breaching = false
			continue
		}
		e.breaches++
		c := e.view(a.p, now)
		a.m.Adapted(AdaptEvent{Namespace: ns, Breach: true, Held: used, Ceiling: c.Ceiling, Learned: c.Learned, Static: c.Static, HoldUntil: c.HoldUntil, Pinned: c.Pinned})
		if !e.breaching {
			e.breaching = true
			a.log.Warn("dispatch: adaptive ceiling breached: the dispatcher claimed more rows than the downstream asked for",
				"namespace", ns, "claimed", used, "asked", asked, "pinned", e.pinned, "breaches", e.breaches)
		}
	}
}

// install applies e to the Backpressure and fills in ev; an entry back at
// its static ceiling with no hold and no pin is cleared. The caller holds
// a.mu.
func (a *adaptive) install(namespace string, e *nsAdapt, now time.Time, ev *AdaptEvent) {
	c := e.view(a.p, now)
	ev.Ceiling, ev.Learned, ev.Static, ev.HoldUntil, ev.Pinned = c.Ceiling, c.Learned, c.Static, c.HoldUntil, c.Pinned
	if e.pinned == 0 && e.s.recovered(now) {
		delete(a.ns, namespace)
		_ = a.bp.SetAdaptiveCeiling(namespace, 0, time.Time{}) // a row's namespace is valid
		return
	}
	_ = a.bp.SetAdaptiveCeiling(namespace, c.Ceiling, c.HoldUntil)
}

// view is e as [AdaptiveCeiling] shows it at now, under p.
func (e *nsAdapt) view(p AdaptiveCeilings, now time.Time) AdaptiveCeiling {
	c := AdaptiveCeiling{Ceiling: e.s.ceiling, Learned: e.s.ceiling, Static: e.s.static, Pinned: e.pinned, Signals: e.signals, Breaches: e.breaches}
	if h := p.claimsHeld(e.s); now.Before(h) {
		c.HoldUntil = h
	}
	if e.pinned > 0 {
		c.Ceiling, c.HoldUntil = e.pinned, time.Time{}
	}
	return c
}

// AdaptiveCeilings returns a snapshot of the adaptive ceilings of this
// node: every namespace the controller holds below its static ceiling, or
// holds, or that an operator pinned, re-clamped to its static ceiling now
// (a shard hand-off or SetConfig changes it). Nil when Options.Adaptive
// is. The map is the caller's.
func (d *Dispatcher) AdaptiveCeilings() map[string]AdaptiveCeiling {
	a := d.adapt
	if a == nil {
		return nil
	}
	now := a.p.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]AdaptiveCeiling, len(a.ns))
	for ns, e := range a.ns {
		if s := a.p.clamp(e.s, a.static(ns)); s != e.s {
			e.s = s
			var ev AdaptEvent
			a.install(ns, e, now, &ev)
		}
		out[ns] = e.view(a.p, now)
	}
	return out
}

// PinAdaptiveCeiling pins namespace's adaptive ceiling on this node at n
// (the planner still caps it at the static ceiling): the controller keeps
// learning from signals, but the pin applies, with no hold, until
// [Dispatcher.ResetAdaptiveCeiling]. It returns an error matching
// [ErrInvalidOptions] (an *[OptionError]) when Options.Adaptive is nil,
// for n outside 1 to [MaxAdaptiveStep], or a namespace no row can have.
func (d *Dispatcher) PinAdaptiveCeiling(namespace string, n int) error {
	a, err := d.adaptiveFor(namespace)
	if err != nil {
		return err
	}
	if reason := notIn(n, 1, MaxAdaptiveStep, ""); reason != "" {
		return &OptionError{Field: "PinAdaptiveCeiling.n", Reason: reason}
	}
	now := a.p.Now()
	static := a.static(namespace)
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.ns[namespace]
	if !ok {
		e = &nsAdapt{s: a.p.start(static)}
		a.ns[namespace] = e
	}
	e.s = a.p.clamp(e.s, static)
	e.pinned = n
	ev := AdaptEvent{Namespace: namespace}
	a.install(namespace, e, now, &ev)
	a.m.Adapted(ev)
	return nil
}

// unpin lets the controller steer namespace again, from what it learned.
func (a *adaptive) unpin(namespace string) {
	now := a.p.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.ns[namespace]
	if !ok || e.pinned == 0 {
		return
	}
	e.pinned = 0
	ev := AdaptEvent{Namespace: namespace}
	a.install(namespace, e, now, &ev)
	a.m.Adapted(ev)
}

// ResetAdaptiveCeiling forgets namespace's adaptive state on this node: no
// pin, no hold, its static ceiling alone, until the next signal. It
// returns the errors of [Dispatcher.PinAdaptiveCeiling] but for n's.
func (d *Dispatcher) ResetAdaptiveCeiling(namespace string) error {
	a, err := d.adaptiveFor(namespace)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.ns[namespace]; !ok {
		return nil
	}
	delete(a.ns, namespace)
	_ = a.bp.SetAdaptiveCeiling(namespace, 0, time.Time{})
	a.m.Adapted(AdaptEvent{Namespace: namespace, Ceiling: a.static(namespace), Learned: a.static(namespace), Static: a.static(namespace)})
	return nil
}

// adaptiveFor returns d's controller for a call naming namespace.
func (d *Dispatcher) adaptiveFor(namespace string) (*adaptive, error) {
	if d.adapt == nil {
		return nil, &OptionError{Field: "Adaptive", Reason: "is nil: adaptive ceilings are off"}
	}
	if err := (backpressure.Route{Namespace: namespace}).Validate(); err != nil {
		return nil, &OptionError{Field: "namespace", Reason: fmt.Sprintf("%q: %v", namespace, err)}
	}
	return d.adapt, nil
}

// shortestHold returns the shortest hold of plan's namespaces at the
// plan's time, for the sweep loop's waker.
func shortestHold(plan backpressure.Plan) (time.Duration, bool) {
	var d time.Duration
	for _, n := range plan.Namespaces {
		if n.Hold > 0 && (d == 0 || n.Hold < d) {
			d = n.Hold
		}
	}
	return d, d > 0
}
