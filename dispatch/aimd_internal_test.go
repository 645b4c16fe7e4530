package dispatch

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// refAIMD is the naive reference of the controller: the rules of
// AdaptiveCeilings' doc, one by one, with the history kept whole (every
// cut's time, every success since the ceiling last moved).
type refAIMD struct {
	p         AdaptiveCeilings
	static    int
	ceiling   int
	cuts      []time.Time
	cutLevel  int // the rows held at the last cut
	hold      time.Time
	successes []time.Time // successes at the ceiling since it last changed
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
	if r.cutLevel > s {
		r.cutLevel = s
	}
}

func (r *refAIMD) signal(now time.Time, held int, retryAfter time.Duration) {
	if len(r.cuts) == 0 || now.Sub(r.cuts[len(r.cuts)-1]) >= r.p.Window {
		level := r.ceiling
		if held < level {
			level = held
		}
		if level < 0 {
			level = 0
		}
		r.cutLevel = level
		c := int(math.Floor(float64(level) * r.p.Decrease))
		if c < r.floor() {
			c = r.floor()
		}
		r.ceiling = c
		r.cuts = append(r.cuts, now)
		r.successes = nil
	}
	if retryAfter > 0 && now.Add(retryAfter).After(r.hold) {
		r.hold = now.Add(retryAfter)
	}
}

func (r *refAIMD) success(now time.Time, held int) {
	if held < r.ceiling || r.ceiling >= r.static {
		return
	}
	r.successes = append(r.successes, now)
	if len(r.successes) < r.ceiling {
		return
	}
	step := r.p.Increase
	if half := (r.cutLevel - r.ceiling) / 2; r.cutLevel > r.ceiling && half > step {
		step = half
	}
	r.ceiling += step
	if r.ceiling > r.static {
		r.ceiling = r.static
	}
	r.successes = nil
}

// TestAIMDReference: over random sequences of signals (with or without a
// Retry-After), successes with any number of rows held, static-ceiling
// changes (a hand-off, a SetConfig) and time steps, the controller equals
// the naive reference, and: min(Floor, S) ≤ A ≤ S; no two cuts less than
// Window apart; the hold is the latest now + RetryAfter asked and never
// moves back; and once signals stop, successes at the ceiling bring A back
// to S within S² of them, where the entry is recovered.
func TestAIMDReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := AdaptiveCeilings{
			Floor:    rapid.IntRange(0, 5).Draw(t, "floor"),
			Increase: rapid.IntRange(0, 4).Draw(t, "increase"),
			Decrease: rapid.SampledFrom([]float64{0, 0.1, 0.5, 0.7, 0.9, 0.999}).Draw(t, "decrease"),
			Window:   time.Duration(rapid.IntRange(0, 3000).Draw(t, "windowMs")) * time.Millisecond,
		}
		if err := (Options{Workers: 1, Adaptive: &p}).validate(); err != nil {
			t.Fatalf("valid controller refused: %v", err)
		}
		p = p.withDefaults()
		static := rapid.IntRange(0, 60).Draw(t, "static")
		s := p.start(static)
		ref := &refAIMD{p: p, static: static, ceiling: static}
		now := time.Unix(1_700_000_000, 0)
		var lastCut time.Time
		for step := range rapid.IntRange(0, 80).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(t, "dtMs")) * time.Millisecond)
			switch rapid.IntRange(0, 5).Draw(t, "event") {
			case 0, 1:
				held := rapid.IntRange(0, 80).Draw(t, "held")
				ra := time.Duration(rapid.IntRange(-1, 5).Draw(t, "retryAfterS")) * time.Second
				ra = max(ra, 0)
				holdBefore := s.hold
				s = p.signal(s, now, held, ra)
				ref.signal(now, held, ra)
				if s.hold.Before(holdBefore) {
					t.Fatalf("step %d: the hold moved back from %v to %v", step, holdBefore, s.hold)
				}
				if !s.cutAt.Equal(lastCut) {
					if !lastCut.IsZero() && s.cutAt.Sub(lastCut) < p.Window {
						t.Fatalf("step %d: cuts %v apart, within Window %v", step, s.cutAt.Sub(lastCut), p.Window)
					}
					lastCut = s.cutAt
				}
			case 2:
				static = rapid.IntRange(0, 60).Draw(t, "newStatic")
				s = p.clamp(s, static)
				ref.setStatic(static)
			default:
				held := rapid.IntRange(0, 80).Draw(t, "held")
				s = p.success(s, held >= s.ceiling)
				ref.success(now, held)
			}
			checkAIMD(t, step, p, s, ref)
		}
		// Recovery: no more signals; successes at the ceiling.
		for i := 0; i <= static*static; i++ {
			if s.ceiling == static {
				break
			}
			s = p.success(s, true)
			ref.success(now, ref.ceiling)
			checkAIMD(t, -1, p, s, ref)
		}
		if s.ceiling != static || !s.recovered(s.hold) {
			t.Fatalf("not back to the static ceiling %d after %d successes: %+v", static, static*static, s)
		}
	})
}

func checkAIMD(t *rapid.T, step int, p AdaptiveCeilings, s aimdState, ref *refAIMD) {
	if s.ceiling != ref.ceiling || !s.hold.Equal(ref.hold) || s.static != ref.static || s.lastCut != ref.cutLevel {
		t.Fatalf("step %d: controller %+v, reference ceiling %d hold %v static %d cut level %d", step, s, ref.ceiling, ref.hold, ref.static, ref.cutLevel)
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
		{"Adaptive.Decrease", AdaptiveCeilings{Decrease: 1}},
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
	if d := *o.Adaptive; d.Floor != 1 || d.Increase != 1 || d.Decrease != 0.5 || d.Window != 2*time.Second || a.Floor != 0 || a.Decrease != 0 {
		t.Fatalf("defaults %+v (caller's %+v)", d, a)
	}
}
