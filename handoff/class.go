package handoff

import (
	"strconv"

	"github.com/outboxkit/backpressure"
)

// Class is a gate's place on the seed's decision boundary: which of the
// four cases it is, and so what its protection rests on. The zero Class is
// none of them; [Classify] returns it only with an error.
type Class uint8

const (
	// ClassEnforced: enforced flow control (credit, window or hard reject).
	// Protective unconditionally: the producer cannot send past the bound,
	// whatever it does with the signal.
	ClassEnforced Class = iota + 1
	// ClassAdvisoryVerified: an advisory signal to a producer whose
	// compliance is measured. Protective in steady state, and only while the
	// producer cooperates; the monitor's alert is what turns a
	// non-cooperating producer from silent overflow into a page.
	ClassAdvisoryVerified
	// ClassAdvisoryHeadroom: an advisory signal to an unverified producer,
	// with QueueCapacity ≥ HighWatermark + ProducerMaxInflight. Protective by
	// headroom: the messages already in flight when the signal fires fit
	// below capacity, so a producer that stops on the signal never overflows
	// the queue.
	ClassAdvisoryHeadroom
	// ClassAdvisoryOverflow: an advisory signal to an unverified producer,
	// with QueueCapacity < HighWatermark + ProducerMaxInflight. Not
	// protective: overflow is guaranteed under sustained overload, because
	// the in-flight messages alone overrun the queue. Dispatch
	// [backpressure.ModeAddEnforcedCredit].
	ClassAdvisoryOverflow
)

// Classify places g on the decision boundary. It agrees with g.Verify: the
// class is [Class.Protective] exactly when Verify returns nil. For a gate
// that cannot exist it returns class 0 and Verify's error, matching
// [backpressure.ErrInvalidConfig]. Cost: O(1).
func Classify(g backpressure.BackpressureGate) (Class, error) {
	switch err := g.Verify(); {
	case err == nil:
	case isOverflow(err):
		return ClassAdvisoryOverflow, nil
	default:
		return 0, err
	}
	switch {
	case g.Enforced:
		return ClassEnforced, nil
	case g.ProducerComplianceVerified:
		return ClassAdvisoryVerified, nil
	}
	return ClassAdvisoryHeadroom, nil
}

var classNames = [...]string{
	ClassEnforced:         "enforced",
	ClassAdvisoryVerified: "advisory-verified",
	ClassAdvisoryHeadroom: "advisory-headroom",
	ClassAdvisoryOverflow: "advisory-overflow",
}

// String returns "enforced", "advisory-verified", "advisory-headroom" or
// "advisory-overflow", and "Class(n)" for any other value.
func (c Class) String() string {
	if c == 0 || int(c) >= len(classNames) {
		return "Class(" + strconv.Itoa(int(c)) + ")"
	}
	return classNames[c]
}

// Protective reports whether the class protects the consumer: every class
// but [ClassAdvisoryOverflow] (and the zero Class).
func (c Class) Protective() bool {
	return c == ClassEnforced || c == ClassAdvisoryVerified || c == ClassAdvisoryHeadroom
}

// AssumesCooperation reports whether the class's protection holds only
// while the producer honours the signal: [ClassAdvisoryVerified] alone.
func (c Class) AssumesCooperation() bool { return c == ClassAdvisoryVerified }

// Mode returns the mode to dispatch for the class, as
// [backpressure.BackpressureGate.Mode] does for the gate:
// [backpressure.ModeAddEnforcedCredit] for [ClassAdvisoryOverflow],
// [backpressure.ModeBackpressureProtective] for the other three, and the
// zero Mode for the zero Class.
func (c Class) Mode() backpressure.Mode {
	switch {
	case c == ClassAdvisoryOverflow:
		return backpressure.ModeAddEnforcedCredit
	case c.Protective():
		return backpressure.ModeBackpressureProtective
	}
	return 0
}
