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
// planner applies it ([backpressure.Backpressure.SetAdaptiveCeiling]).
// Every zero field takes its default; docs/adaptive.md states the
// controller as invariants and the measurements behind the defaults.
//
// With S the static ceiling (an Unlimited one, or one above what the
// node can hold, counts as Workers + Queue), F = min(Floor, S), A the
// adaptive ceiling and K the namespace's rows this node holds (the
// signalled row among them):
//
//	start:       A = S
//	bounds:      F ≤ A ≤ S, always
//	signal:      level = min(A, K) − 1, the calls the downstream took;
//	             A ← max(F, ⌊level · Decrease⌋) if A rose since the last
//	             signal (a probe found the downstream full),
//	             A ← max(F, min(A, level)) otherwise
//	Retry-After: no increase until then (with HoldClaims, no claim either)
//	success:     counted when K ≥ A, Window after the last signal and past
//	             the Retry-After; after A such successes A ← min(S, A + Increase)
//	S changes:   an uncut A follows S; a cut one is clamped into [F, S]
type AdaptiveCeilings struct {
	// Floor is the lowest the adaptive ceiling goes, 1 to
	// [MaxAdaptiveStep]: a namespace always keeps that many rows in
	// flight (or its static ceiling, if lower), so that successes can
	// raise it again. 0 means 1.
	Floor int
	// Increase is the additive step, 1 to [MaxAdaptiveStep]: once Window
	// has passed since the last signal, every ceiling's worth of
	// successes at the ceiling raises it by Increase (each rise past what
	// the downstream takes costs a signal). 0 means 1.
	Increase int
	// Decrease is the factor of a cut after a rise, in (0, 1]: a signal
	// brings the ceiling down to its level, min(ceiling, rows held) − 1,
	// the calls the downstream took; if the ceiling rose since the last
	// signal (a probe that found the downstream full) to ⌊level ×
	// Decrease⌋, leaving room for the next probe of any node. 0 means
	// 0.9; NaN and values outside (0, 1] are refused.
	Decrease float64
	// Window is the quiet time after a signal before the ceiling is
	// raised (the shortest time between a node's signal and its next
	// probe): [MinAdaptiveWindow] to outbox.MaxDelay. 0 means 6s. It
	// trades the signals of probing (about one rise per node per Window
	// at a full downstream) against how soon a downstream that grew is
	// found.
	Window time.Duration
	// HoldClaims makes a Retry-After hold the namespace's rows on this
	// node until then (no claim at all: its rows in flight drain). By
	// default the signalled row alone waits for it (it is snoozed until
	// then) and the ceiling is not raised before it: the rows the
	// downstream took stay in flight.
	HoldClaims bool
	// Timeouts makes a handler's error matching context.DeadlineExceeded
	// a signal too (a cut, with no Retry-After). The row itself is still
	// a failure, retried after the backoff.
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
	defaultAdaptiveDecrease = 0.9
	defaultAdaptiveWindow   = 6 * time.Second
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
		if a := o.Adaptive; a != nil && (math.IsNaN(a.Decrease) || a.Decrease < 0 || a.Decrease > 1) {
			return fmt.Sprintf("is %v, not in (0, 1] (0 means 0.9)", a.Decrease)
		}
		return ""
	}},
	{"Adaptive.Window", func(o Options) string {
		if a := o.Adaptive; a != nil && (a.Window < 0 || a.Window > 0 && a.Window < MinAdaptiveWindow || a.Window > outbox.MaxDelay) {
			return fmt.Sprintf("is %v, not in [%v, outbox.MaxDelay] (0 means 6s)", a.Window, MinAdaptiveWindow)
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
	ceiling  int       // A, in [min(Floor, static), static]
	static   int       // S, the static ceiling it was last clamped to (≥ 0)
	cutAt    time.Time // the last signal that lowered A (zero: never)
	signalAt time.Time // the last signal (zero: never)
	hold     time.Time // the Retry-After asked ends then (zero: none)
	good     int       // successes counted since the last signal or rise
	rose     bool      // A rose since the last signal: a signal now is a probe's
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
	return s
}

// signal returns s after a downstream's signal at now, with held the rows
// of the namespace this node held (the signalled one among them) and
// retryAfter the wait asked (0: none): the ceiling comes down to the
// calls the downstream took (and by Decrease below them if it rose since
// the last signal), the Window's quiet time starts again, and the
// Retry-After is kept.
func (p AdaptiveCeilings) signal(s aimdState, now time.Time, held int, retryAfter time.Duration) aimdState {
	level := max(0, min(s.ceiling, held)-1)
	c := min(s.ceiling, level)
	if s.rose {
		c = int(float64(level) * p.Decrease)
	}
	if c = max(p.floor(s.static), c); c < s.ceiling {
		s.cutAt = now
	}
	s.ceiling = c
	s.signalAt, s.good, s.rose = now, 0, false
	if retryAfter > 0 {
		if until := now.Add(retryAfter); until.After(s.hold) {
			s.hold = until
		}
	}
	return s
}

// success returns s after a handler's success at now, with atCeiling
// whether the namespace's rows held reached A: once Window has passed
// since the last signal and the Retry-After is over, a ceiling's worth of
// them raises A by Increase.
func (p AdaptiveCeilings) success(s aimdState, now time.Time, atCeiling bool) aimdState {
	if !atCeiling || s.ceiling >= s.static || now.Before(s.hold) || !s.signalAt.IsZero() && now.Sub(s.signalAt) < p.Window {
		return s
	}
	if s.good++; s.good < s.ceiling {
		return s
	}
	s.ceiling = min(s.static, s.ceiling+p.Increase)
	s.good, s.rose = 0, true
	return s
}

// claimsHeld returns until when the Retry-After s keeps holds the
// namespace's claims: its end with HoldClaims, else zero (no hold).
func (p AdaptiveCeilings) claimsHeld(s aimdState) time.Time {
	if !p.HoldClaims {
		return time.Time{}
	}
	return s.hold
}

// recovered reports whether s is back where it started at now: A = S and
// no Retry-After to come, so the namespace needs no entry.
func (s aimdState) recovered(now time.Time) bool {
	return s.ceiling >= s.static && !now.Before(s.hold)
}
