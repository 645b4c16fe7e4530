package handoff

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidQueue reports a [QueueModel] or depth that cannot exist.
var ErrInvalidQueue = errors.New("handoff: invalid queue model")

// QueueError describes a [QueueModel] field or depth that cannot hold. It
// matches [ErrInvalidQueue].
type QueueError struct {
	Field  string // "Capacity", "HighWatermark", "ProduceRate", "DrainRate" or "depth"
	Value  any
	Reason string
}

// Error names the field or depth and why the queue model cannot exist.
func (e *QueueError) Error() string {
	return fmt.Sprintf("handoff: invalid queue model: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidQueue].
func (e *QueueError) Is(target error) bool { return target == ErrInvalidQueue }

// QueueModel is a bounded queue fed and drained at constant rates, the
// fluid model behind an overflow trace: at time t from depth d₀,
//
//	depth(t) = d₀ + (ProduceRate − DrainRate) × t
//
// until it reaches Capacity. It answers how long an advisory signal buys:
// the time from the high watermark to a full queue is all the producer has
// to respond. Doubling Capacity only doubles that time; when
// ProduceRate > DrainRate the queue still fills. The zero value is a valid
// model of an empty queue that never fills.
type QueueModel struct {
	Capacity      int     // messages; ≥ 0
	HighWatermark int     // messages; 0 ≤ HighWatermark ≤ Capacity
	ProduceRate   float64 // messages per second arriving; finite, ≥ 0
	DrainRate     float64 // messages per second consumed; finite, ≥ 0
}

// Validate returns nil for a model that can exist and otherwise a
// *[QueueError] matching [ErrInvalidQueue] naming the first bad field.
func (q QueueModel) Validate() error {
	switch {
	case q.Capacity < 0:
		return &QueueError{Field: "Capacity", Value: q.Capacity, Reason: "must not be negative"}
	case q.HighWatermark < 0 || q.HighWatermark > q.Capacity:
		return &QueueError{Field: "HighWatermark", Value: q.HighWatermark, Reason: fmt.Sprintf("must be in [0, Capacity %d]", q.Capacity)}
	case !validRate(q.ProduceRate):
		return &QueueError{Field: "ProduceRate", Value: q.ProduceRate, Reason: "must be finite and not negative"}
	case !validRate(q.DrainRate):
		return &QueueError{Field: "DrainRate", Value: q.DrainRate, Reason: "must be finite and not negative"}
	}
	return nil
}

// FillTime is how long until a queue reaches a level: a duration, or never
// when the queue does not grow (DrainRate ≥ ProduceRate) and is below the
// level. The zero value is "now".
type FillTime struct {
	// Never is true when the level is never reached; D is then 0.
	Never bool
	// D is the time until the level is reached, rounded up to the
	// nanosecond so that depth(D) ≥ level, and 0 when the queue is already
	// there. It saturates at the longest time.Duration.
	D time.Duration
}

// String returns "never" or D's string, e.g. "1.5s".
func (f FillTime) String() string {
	if f.Never {
		return "never"
	}
	return f.D.String()
}

// UntilFull returns the time from depth until the queue holds Capacity
// messages, after which each arrival overflows:
//
//	D = (Capacity − depth) ÷ (ProduceRate − DrainRate)   when ProduceRate > DrainRate
//
// It returns an error matching [ErrInvalidQueue] for an invalid model or a
// depth outside [0, Capacity].
func (q QueueModel) UntilFull(depth int) (FillTime, error) {
	return q.until(depth, q.Capacity)
}

// UntilHighWatermark returns the time from depth until the queue reaches
// HighWatermark, when the advisory signal fires; 0 when depth is already
// there. Errors as [QueueModel.UntilFull].
func (q QueueModel) UntilHighWatermark(depth int) (FillTime, error) {
	return q.until(depth, q.HighWatermark)
}

func (q QueueModel) until(depth, level int) (FillTime, error) {
	if err := q.Validate(); err != nil {
		return FillTime{}, err
	}
	if depth < 0 || depth > q.Capacity {
		return FillTime{}, &QueueError{Field: "depth", Value: depth, Reason: fmt.Sprintf("must be in [0, Capacity %d]", q.Capacity)}
	}
	if depth >= level {
		return FillTime{}, nil
	}
	if q.DrainRate >= q.ProduceRate {
		return FillTime{Never: true}, nil
	}
	// level − depth > 0 and both are ints ≥ 0, so the difference is exact
	// in int and at most MaxInt.
	ns := math.Ceil(float64(level-depth) * float64(time.Second) / (q.ProduceRate - q.DrainRate))
	if ns >= math.MaxInt64 {
		return FillTime{D: math.MaxInt64}, nil
	}
	return FillTime{D: time.Duration(ns)}, nil
}
