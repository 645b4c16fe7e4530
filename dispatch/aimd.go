package dispatch

import (
	"fmt"
	"math"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// AdaptiveCeilings turns a downstream's advisory "slow down" into an
// enforced bound at the claim, per namespace, on each node: the
// dispatcher's controller lowers a namespace's ceiling on this node below
// its static one (the quota's per-node share, [backpressure.Backpressure.Ceiling])
// when its handlers report [Overloaded] (or, with Timeouts, hit a
// deadline), and raises it back while they succeed at the ceiling. The
// planner applies it ([backpressure.Backpressure.SetAdaptiveCeiling]); a
// Retry-After also holds the namespace's rows until then. Every zero field
// takes its default; docs/adaptive.md states the controller as invariants.
//
// With S the static ceiling (an Unlimited one, or one above what the
// node can hold, counts as Workers + Queue), F = min(Floor, S), A the
// adaptive ceiling and K the namespace's rows this node holds:
//
//	start:       A = S
//	bounds:      F ≤ A ≤ S, always
//	signal:      A ← max(F, ⌊min(A, K) · Decrease⌋), at most once per Window
//	             (a signal within Window of the last cut changes only the hold)
//	Retry-After: the namespace is held until max(hold, now + RetryAfter)
//	success:     counted when K ≥ A at the success; after A such successes
//	             A ← min(S, A + max(Increase, ⌊(L − A)/2⌋)), L the level of the last cut
//	S changes:   an uncut A follows S; a cut one is clamped into [F, S]
type AdaptiveCeilings struct {
	// Floor is the lowest the adaptive ceiling goes, 1 to
	// [MaxAdaptiveStep]: a namespace always keeps that many rows in
	// flight (or its static ceiling, if lower), so that successes can
	// raise it again. 0 means 1.
	Floor int
	// Increase is the additive step, 1 to [MaxAdaptiveStep]: after a
	// ceiling's worth of successes at the ceiling it rises by Increase,
	// or by half the gap to the level of the last cut when that is more
	// (back quickly to where the downstream last complained, then probe
	// past it). 0 means 1.
	Increase int
	// Decrease is the multiplicative factor of a cut, in (0, 1): the
	// ceiling becomes ⌊min(ceiling, rows held) × Decrease⌋, at least
	// Floor. 0 means 0.5; NaN and values outside (0, 1) are refused.
	Decrease float64
	// Window is the shortest time between two cuts of a namespace's
	// ceiling, so that the signals of the rows already in flight when it
	// was cut do not cut it again: [MinAdaptiveWindow] to outbox.MaxDelay.
	// 0 means 2s.
	Window time.Duration
	// Timeouts makes a handler's error matching context.DeadlineExceeded
	// a signal too (a cut, with no hold). The row itself is still a
	// failure, retried after the backoff.
	Timeouts bool
	// Now is the controller's clock; nil means the Backpressure's
	// (Config.Clock, else time.Now). A hold's end is compared with the
	// Backpressure's clock by the planner, so a Now other than that clock
	// should read the same time.
	Now func() time.Time
}

// Bounds of Options.Adaptive.
const (
	// MaxAdaptiveStep bounds AdaptiveCeilings.Floor and Increase
	// (1,048,576 rows).
	MaxAdaptiveStep = 1 << 20
	// MinAdaptiveWindow is the shortest AdaptiveCeilings.Window (1ms).
	MinAdaptiveWindow = time.Millisecond
)

const (
	defaultAdaptiveDecrease = 0.5
	defaultAdaptiveWindow   = 2 * time.Second
)

// adaptiveRules are optionRules' checks of Options.Adaptive, as given.
var adaptiveRules = []optionRule{
	{"Adaptive.Floor", func(o Options) string {
		if a := o.Adaptive; a != nil {
			return notIn(a.Floor, 0, MaxAdaptiveStep, " (0 means 1)")
		}
		return ""
	}},
	{"Adaptive.Increase", func(o Options) string {
		if a := o.Adaptive; a != nil {
			return notIn(a.Increase, 0, MaxAdaptiveStep, " (0 means 1)")
		}
		return ""
	}},
	{"Adaptive.Decrease", func(o Options) string {
		if a := o.Adaptive; a != nil && (math.IsNaN(a.Decrease) || a.Decrease < 0 || a.Decrease >= 1) {
			return fmt.Sprintf("is %v, not in (0, 1) (0 means 0.5)", a.Decrease)
		}
		return ""
	}},
	{"Adaptive.Window", func(o Options) string {
		if a := o.Adaptive; a != nil && (a.Window < 0 || a.Window > 0 && a.Window < MinAdaptiveWindow || a.Window > outbox.MaxDelay) {
			return fmt.Sprintf("is %v, not in [%v, outbox.MaxDelay] (0 means 2s)", a.Window, MinAdaptiveWindow)
		}
		return ""
	}},
}

// withDefaults returns p, valid, with its defaults filled in (Now stays
// nil: the dispatcher fills it in).
func (p AdaptiveCeilings) withDefaults() AdaptiveCeilings {
	if p.Floor == 0 {
		p.Floor = 1
	}
	if p.Increase == 0 {
		p.Increase = 1
	}
	if p.Decrease == 0 {
		p.Decrease = defaultAdaptiveDecrease
	}
	if p.Window == 0 {
		p.Window = defaultAdaptiveWindow
	}
	return p
}

// aimdState is one namespace's controller state: a value the controller's
// steps take and return, so that they are pure functions of it, their
// inputs and the time.
type aimdState struct {
	ceiling int       // A, in [min(Floor, static), static]
	static  int       // S, the static ceiling it was last clamped to (≥ 0)
	lastCut int       // L: the rows held at the last cut (0: never cut)
	cutAt   time.Time // when it was last cut (zero: never)
	hold    time.Time // the namespace is held until then (zero: no hold)
	good    int       // successes at the ceiling since A last changed
}

// floor returns min(Floor, S).
func (p AdaptiveCeilings) floor(static int) int { return min(p.Floor, static) }

// start returns the state of a namespace first seen with static ceiling
// static: A = S.
func (p AdaptiveCeilings) start(static int) aimdState {
	return aimdState{ceiling: static, static: static}
}

// clamp returns s under the static ceiling static: an uncut ceiling
// (A = S) follows it; a cut one is clamped into [min(Floor, static),
// static]. Settled like a rate bucket, at the change.
func (p AdaptiveCeilings) clamp(s aimdState, static int) aimdState {
	if static == s.static {
		return s
	}
	if s.ceiling >= s.static {
		s.ceiling = static
	} else {
		s.ceiling = min(max(s.ceiling, p.floor(static)), static)
	}
	s.static = static
	s.lastCut = min(s.lastCut, static)
	return s
}

// signal returns s after a downstream's signal at now, with held the rows
// of the namespace this node held and retryAfter the wait asked (0: none):
// a cut, unless one was made less than Window ago, and the hold extended.
func (p AdaptiveCeilings) signal(s aimdState, now time.Time, held int, retryAfter time.Duration) aimdState {
	if s.cutAt.IsZero() || now.Sub(s.cutAt) >= p.Window {
		level := max(0, min(s.ceiling, held))
		s.lastCut = level
		s.ceiling = max(p.floor(s.static), int(float64(level)*p.Decrease))
		s.cutAt, s.good = now, 0
	}
	if retryAfter > 0 {
		if until := now.Add(retryAfter); until.After(s.hold) {
			s.hold = until
		}
	}
	return s
}

// success returns s after a handler's success, with atCeiling whether the
// namespace's rows held reached A: a ceiling's worth of them raises A.
func (p AdaptiveCeilings) success(s aimdState, atCeiling bool) aimdState {
	if !atCeiling || s.ceiling >= s.static {
		return s
	}
	if s.good++; s.good < s.ceiling {
		return s
	}
	step := p.Increase
	if s.lastCut > s.ceiling {
		step = max(step, (s.lastCut-s.ceiling)/2)
	}
	s.ceiling = min(s.static, s.ceiling+step)
	s.good = 0
	return s
}

// recovered reports whether s is back where it started at now: A = S and
// no hold to come, so the namespace needs no entry.
func (s aimdState) recovered(now time.Time) bool {
	return s.ceiling >= s.static && !now.Before(s.hold)
}
