package dispatch

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// refAIMD is the naive reference of the controller: the rules of
// AdaptiveCeilings' doc, one by one, with the history kept whole (every
// signal's time, every success counted since the last signal or rise,
// the rises since the last signal).
type refAIMD struct {
	p         AdaptiveCeilings
	static    int
	ceiling   int
	signals   []time.Time
	hold      time.Time
	successes []time.Time // successes counted since the last signal or rise
	rises     int         // rises since the last signal
}

func (r *refAIMD) floor() int {
	if r.p.Floor < r.static {
		return r.p.Floor
	}
	return r.static
}

func (r *refAIMD) setStatic(s int) {
	if s == r.static {
		return
	}
	uncut := r.ceiling >= r.static
	r.static = s
	switch {
	case uncut:
		r.ceiling = s
	case r.ceiling > s:
		r.ceiling = s
	case r.ceiling < r.floor():
		r.ceiling = r.floor()
	}
}

func (r *refAIMD) signal(now time.Time, held int, retryAfter time.Duration) {
	level := r.ceiling
	if held < level {
		level = held
	}
	level--
	if level < 0 {
		level = 0
	}
	c := r.ceiling
	if level < c {
		c = level
	}
	if r.rises > 0 {
		c = int(math.Floor(float64(level) * r.p.Decrease))
	}
	if c < r.floor() {
		c = r.floor()
	}
	r.ceiling = c
	r.signals = append(r.signals, now)
	r.successes, r.rises = nil, 0
	if retryAfter > 0 && now.Add(retryAfter).After(r.hold) {
		r.hold = now.Add(retryAfter)
	}
}

func (r *refAIMD) success(now time.Time, held int) {
	if held < r.ceiling || r.ceiling >= r.static || now.Before(r.hold) {
		return
	}
	if len(r.signals) > 0 && now.Sub(r.signals[len(r.signals)-1]) < r.p.Window {
		return
	}
	r.successes = append(r.successes, now)
	if len(r.successes) < r.ceiling {
		return
	}
	r.ceiling += r.p.Increase
	if r.ceiling > r.static {
		r.ceiling = r.static
	}
	r.rises++
	r.successes = nil
}

// TestAIMDReference: over random sequences of signals (with or without a
// Retry-After), successes with any number of rows held, static-ceiling
// changes (a hand-off, a SetConfig) and time steps, the controller equals
// the naive reference, and: min(Floor, S) ≤ A ≤ S; a signal never raises
// A and leaves it at most min(A, K) − 1 (or the floor), lower only after a
// rise (by Decrease); no rise within Window of a signal nor
// before the Retry-After ends; the Retry-After's end never moves back,
// and holds the claims (claimsHeld) only with HoldClaims; and once
// signals stop, successes at the ceiling past the Window and the
// Retry-After bring A back to S within S² of them, where the entry is
// recovered.
func TestAIMDReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := AdaptiveCeilings{
			Floor:      rapid.IntRange(0, 5).Draw(t, "floor"),
			Increase:   rapid.IntRange(0, 4).Draw(t, "increase"),
			Decrease:   rapid.SampledFrom([]float64{0, 0.1, 0.5, 0.7, 0.9, 0.999, 1}).Draw(t, "decrease"),
			Window:     time.Duration(rapid.IntRange(0, 3000).Draw(t, "windowMs")) * time.Millisecond,
			HoldClaims: rapid.Bool().Draw(t, "holdClaims"),
		}
		if err := (Options{Workers: 1, Adaptive: &p}).validate(); err != nil {
			t.Fatalf("valid controller refused: %v", err)
		}
		p = p.withDefaults()
		static := rapid.IntRange(0, 60).Draw(t, "static")
		s := p.start(static)
		ref := &refAIMD{p: p, static: static, ceiling: static}
		now := time.Unix(1_700_000_000, 0)
		for step := range rapid.IntRange(0, 80).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(t, "dtMs")) * time.Millisecond)
			switch rapid.IntRange(0, 5).Draw(t, "event") {
			case 0, 1:
				held := rapid.IntRange(0, 80).Draw(t, "held")
				ra := time.Duration(rapid.IntRange(-1, 5).Draw(t, "retryAfterS")) * time.Second
				ra = max(ra, 0)
				before, rose := s, ref.rises > 0
				s = p.signal(s, now, held, ra)
				ref.signal(now, held, ra)
				checkSignal(t, step, p, before, s, now, held, rose)
			case 2:
				static = rapid.IntRange(0, 60).Draw(t, "newStatic")
				s = p.clamp(s, static)
				ref.setStatic(static)
			default:
				held := rapid.IntRange(0, 80).Draw(t, "held")
				before := s
				s = p.success(s, now, held >= s.ceiling)
				ref.success(now, held)
				if s.ceiling > before.ceiling && (now.Before(s.hold) || !s.signalAt.IsZero() && now.Sub(s.signalAt) < p.Window) {
					t.Fatalf("step %d: rose from %d to %d within Window of the signal at %v or before the Retry-After's end %v (now %v)",
						step, before.ceiling, s.ceiling, s.signalAt, s.hold, now)
				}
			}
			checkAIMD(t, step, p, s, ref)
		}
		// Recovery: no more signals; successes at the ceiling once the
		// Window and the Retry-After are over.
		now = now.Add(p.Window)
		if now.Before(s.hold) {
			now = s.hold
		}
		for i := 0; i <= static*static; i++ {
			if s.ceiling == static {
				break
			}
			s = p.success(s, now, true)
			ref.success(now, ref.ceiling)
			checkAIMD(t, -1, p, s, ref)
		}
		if s.ceiling != static || !s.recovered(now) {
			t.Fatalf("not back to the static ceiling %d after %d successes: %+v", static, static*static, s)
		}
	})
}

// checkSignal checks one signal's step: A never rises; it ends at most
// max(F, min(A, K) − 1), and below that only after a rise (by Decrease);
// a lowered A marks the cut's time; the Retry-After's end never moves back
// and holds the claims only with HoldClaims.
func checkSignal(t *rapid.T, step int, p AdaptiveCeilings, before, s aimdState, now time.Time, held int, rose bool) {
	if s.ceiling > before.ceiling {
		t.Fatalf("step %d: a signal raised the ceiling from %d to %d", step, before.ceiling, s.ceiling)
	}
	bound := max(p.floor(s.static), min(before.ceiling, held)-1)
	if s.ceiling > bound || !rose && s.ceiling != min(before.ceiling, bound) {
		t.Fatalf("step %d: a signal with %d rows held (after a rise: %v) took the ceiling from %d to %d; level bound %d",
			step, held, rose, before.ceiling, s.ceiling, bound)
	}
	if s.ceiling < before.ceiling && !s.cutAt.Equal(now) || s.ceiling == before.ceiling && !s.cutAt.Equal(before.cutAt) {
		t.Fatalf("step %d: ceiling %d → %d but the cut's time %v → %v", step, before.ceiling, s.ceiling, before.cutAt, s.cutAt)
	}
	if s.hold.Before(before.hold) {
		t.Fatalf("step %d: the Retry-After's end moved back from %v to %v", step, before.hold, s.hold)
	}
	if h := p.claimsHeld(s); p.HoldClaims && !h.Equal(s.hold) || !p.HoldClaims && !h.IsZero() {
		t.Fatalf("step %d: claims held until %v with HoldClaims %v and the Retry-After's end %v", step, h, p.HoldClaims, s.hold)
	}
}

func checkAIMD(t *rapid.T, step int, p AdaptiveCeilings, s aimdState, ref *refAIMD) {
	if s.ceiling != ref.ceiling || !s.hold.Equal(ref.hold) || s.static != ref.static {
		t.Fatalf("step %d: controller %+v, reference ceiling %d hold %v static %d", step, s, ref.ceiling, ref.hold, ref.static)
	}
	if f := min(p.Floor, s.static); s.ceiling < f || s.ceiling > s.static {
		t.Fatalf("step %d: ceiling %d outside [%d, %d]", step, s.ceiling, f, s.static)
	}
}

// TestAdaptiveOptionRules: every bound of Options.Adaptive is refused
// with an *OptionError naming its field.
func TestAdaptiveOptionRules(t *testing.T) {
	for _, c := range []struct {
		field string
		a     AdaptiveCeilings
	}{
		{"Adaptive.Floor", AdaptiveCeilings{Floor: -1}},
		{"Adaptive.Floor", AdaptiveCeilings{Floor: MaxAdaptiveStep + 1}},
		{"Adaptive.Increase", AdaptiveCeilings{Increase: -1}},
		{"Adaptive.Increase", AdaptiveCeilings{Increase: MaxAdaptiveStep + 1}},
		{"Adaptive.Decrease", AdaptiveCeilings{Decrease: 1.5}},
		{"Adaptive.Decrease", AdaptiveCeilings{Decrease: -0.5}},
		{"Adaptive.Decrease", AdaptiveCeilings{Decrease: math.NaN()}},
		{"Adaptive.Window", AdaptiveCeilings{Window: -time.Second}},
		{"Adaptive.Window", AdaptiveCeilings{Window: time.Microsecond}},
		{"Adaptive.Window", AdaptiveCeilings{Window: 1 << 62}},
	} {
		a := c.a
		err := (Options{Workers: 1, Adaptive: &a}).validate()
		oe, ok := err.(*OptionError)
		if !ok || oe.Field != c.field {
			t.Fatalf("%+v: %v, want an *OptionError on %s", c.a, err, c.field)
		}
	}
	a := AdaptiveCeilings{}
	o, err := Options{Workers: 1, Adaptive: &a}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d := *o.Adaptive; d.Floor != 1 || d.Increase != 1 || d.Decrease != 0.9 || d.Window != 6*time.Second || a.Floor != 0 || a.Decrease != 0 {
		t.Fatalf("defaults %+v (caller's %+v)", d, a)
	}
}
