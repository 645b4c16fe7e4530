package dispatch

import (
	"math"
	"time"
)

// Backoff is an exponential backoff with jitter. For attempt a ≥ 1 and a
// random u in [0, 1),
//
//	d     = min(Max, Base × 2^(a−1))
//	Delay = d − ⌊d × Jitter × u⌋          (so d × (1 − Jitter) < Delay ≤ d)
//
// The product d × Jitter × u is taken in float64 and kept in [0, d], so
// Delay is always in [0, d]; above 2^53 ns (104 days) it is exact only to
// float64 precision (a relative error near 2^−52).
//
// Jitter spreads retries of rows that failed together. The zero Backoff is
// usable: each zero field takes the default of the Options field it is
// used for (see [Options.Backoff], [Options.ErrorBackoff]).
type Backoff struct {
	Base time.Duration // the first delay; must be ≥ 0 (0: the default)
	// Max is the longest delay: 0 (the default), or Base to
	// [github.com/outboxkit/backpressure/outbox.MaxDelay]; a Max below a
	// non-zero Base is refused.
	Max time.Duration
	// Jitter is the fraction of a delay that is randomised, in [0, 1]; 0
	// means the default, a negative value means none; NaN is refused.
	Jitter float64
}

// Delay returns the delay before retry number attempt (1 for the first
// retry; below 1 counts as 1), for u in [0, 1) (a random draw; values
// outside are clamped). It uses b's fields as they are: fill defaults first.
// Cost: O(1).
func (b Backoff) Delay(attempt int, u float64) time.Duration {
	attempt = max(attempt, 1)
	d := b.Base
	for i := 1; i < attempt && d > 0 && d < b.Max; i++ {
		if d > math.MaxInt64/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	d = min(d, b.Max)
	j := min(max(b.Jitter, 0), 1)
	u = min(max(u, 0), 1)
	return d - mulFloor(d, j*u)
}

// mulFloor returns ⌊d × x⌋ for d ≥ 0 and x in [0, 1], within [0, d]. Up to
// 2^53 ns float64(d) is exact and the product cannot pass d; above it
// float64(d) can round up past d (Delay was −2 ns at d ≈ 2^54 ns), so the
// product is clamped to d, before its conversion, which it could overflow.
func mulFloor(d time.Duration, x float64) time.Duration {
	if d <= 0 || !(x > 0) {
		return 0
	}
	f := float64(d) * min(x, 1)
	if f >= float64(d) {
		return d
	}
	return time.Duration(f)
}

// withDefaults fills b's zero fields from def.
func (b Backoff) withDefaults(def Backoff) Backoff {
	if b.Base == 0 {
		b.Base = def.Base
	}
	if b.Max == 0 {
		b.Max = def.Max
	}
	b.Max = max(b.Max, b.Base)
	switch {
	case b.Jitter == 0:
		b.Jitter = def.Jitter
	case b.Jitter < 0:
		b.Jitter = 0
	}
	return b
}
