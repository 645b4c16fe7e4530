package backpressure

import (
	"errors"
	"fmt"
	"strconv"
)

// Gate errors. Match them with [errors.Is]; the typed errors carry the
// details and match the sentinel of their kind.
var (
	// ErrInvalidGate reports a [BackpressureGate] that cannot exist: a
	// negative number, or a high watermark above the queue's capacity.
	ErrInvalidGate = errors.New("backpressure: invalid gate")
	// ErrAdvisoryOverflow reports an advisory channel whose queue cannot
	// absorb the producer's in-flight messages. The typed error is
	// *[AdvisoryOverflowError].
	ErrAdvisoryOverflow = errors.New("backpressure: advisory overflow")
)

// GateError describes a [BackpressureGate] field, or an argument of a gate
// builder such as [WorkerQueueGateSweeps], that cannot hold. It matches
// [ErrInvalidGate] and never [ErrAdvisoryOverflow]: a configuration that
// cannot exist has no verdict.
type GateError struct {
	// Field is the gate field "QueueCapacity", "HighWatermark" or
	// "ProducerMaxInflight", or the builder argument "Backpressure" or
	// "sweepsInFlight".
	Field  string
	Value  int
	Reason string
	// Err, if not nil, is the underlying error, which the GateError also
	// matches: for Field "Backpressure", one matching [ErrInvalidConfig].
	Err error
}

// Error names the field or argument and why the gate cannot exist.
func (e *GateError) Error() string {
	return fmt.Sprintf("backpressure: invalid gate: %s = %d: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidGate].
func (e *GateError) Is(target error) bool { return target == ErrInvalidGate }

// Unwrap returns Err.
func (e *GateError) Unwrap() error { return e.Err }

// AdvisoryOverflowError is the verdict on an advisory channel whose producer
// is not verified and whose queue lacks headroom for the producer's
// in-flight messages:
//
//	QueueCapacity < HighWatermark + ProducerMaxInflight
//
// Under sustained overload such a queue overflows however early the
// advisory signal fires. The fix is an enforced bound (credit, window or a
// hard reject), never a larger queue: a larger queue only postpones the
// overflow, since the rate mismatch is unchanged. It matches
// [ErrAdvisoryOverflow].
type AdvisoryOverflowError struct {
	QueueCapacity int
	// Required is HighWatermark + ProducerMaxInflight, the capacity that
	// would absorb the in-flight messages. It saturates at math.MaxInt when
	// the sum does not fit in an int (no int capacity can hold it then); the
	// message always states the exact sum.
	Required            int
	HighWatermark       int
	ProducerMaxInflight int
}

// Error names all four numbers, so that a log line alone shows what to
// change: "queue capacity C < required W+I (watermark W + inflight I):
// advisory signal cannot prevent overflow".
func (e *AdvisoryOverflowError) Error() string {
	var required string
	if e.HighWatermark >= 0 && e.ProducerMaxInflight >= 0 {
		// Both addends are non-negative ints, so the uint64 sum is exact.
		required = strconv.FormatUint(uint64(e.HighWatermark)+uint64(e.ProducerMaxInflight), 10)
	} else {
		// Only a hand-built error gets here; show its Required as given.
		required = strconv.Itoa(e.Required)
	}
	return fmt.Sprintf("backpressure: queue capacity %d < required %s (watermark %d + inflight %d): advisory signal cannot prevent overflow",
		e.QueueCapacity, required, e.HighWatermark, e.ProducerMaxInflight)
}

// Is reports whether target is [ErrAdvisoryOverflow].
func (e *AdvisoryOverflowError) Is(target error) bool { return target == ErrAdvisoryOverflow }

// BackpressureGate describes one producer→consumer channel and decides, before
// the channel runs, whether its backpressure protects the consumer. All
// counts are in messages.
//
// The zero value is a valid gate: an advisory channel with an empty queue
// and no producer in flight, which [BackpressureGate.Verify] accepts by
// headroom (0 ≥ 0 + 0). A gate is a plain value, safe to copy and to use
// from several goroutines.
type BackpressureGate struct {
	// Enforced is true when the consumer stops accepting at capacity in a
	// way the producer cannot ignore: credit, a window that decrements, or a
	// hard reject. False means the consumer's signal is advisory.
	Enforced bool
	// QueueCapacity is the most messages the consumer's queue holds; the
	// next one is dropped or exhausts memory. Must be ≥ 0.
	QueueCapacity int
	// HighWatermark is the depth at which the consumer signals the producer
	// to slow down. Must satisfy 0 ≤ HighWatermark ≤ QueueCapacity.
	HighWatermark int
	// ProducerMaxInflight is the most messages that can still arrive after
	// the signal fires, before the producer can respond. Must be ≥ 0.
	ProducerMaxInflight int
	// ProducerComplianceVerified is true when the producer's rate is measured
	// against the requested rate and non-compliance raises an alert, for
	// example by a [ComplianceMonitor] whose signature is
	// [ComplianceMet]. It is a claim the gate takes on trust; a [Verdict]
	// checks it against a [ComplianceSignature].
	ProducerComplianceVerified bool
}

// Validate returns nil when the gate can exist, whatever its verdict, and
// otherwise a *[GateError] matching [ErrInvalidGate]. It checks, in order,
//
//	QueueCapacity ≥ 0, HighWatermark ≥ 0, ProducerMaxInflight ≥ 0,
//	HighWatermark ≤ QueueCapacity
//
// whether or not the gate is enforced: an enforced channel with a watermark
// above its capacity is a misconfiguration too, and it would be the one to
// surface if the channel were ever made advisory.
func (g BackpressureGate) Validate() error {
	switch {
	case g.QueueCapacity < 0:
		return &GateError{Field: "QueueCapacity", Value: g.QueueCapacity, Reason: "must not be negative"}
	case g.HighWatermark < 0:
		return &GateError{Field: "HighWatermark", Value: g.HighWatermark, Reason: "must not be negative"}
	case g.ProducerMaxInflight < 0:
		return &GateError{Field: "ProducerMaxInflight", Value: g.ProducerMaxInflight, Reason: "must not be negative"}
	case g.HighWatermark > g.QueueCapacity:
		return &GateError{Field: "HighWatermark", Value: g.HighWatermark, Reason: "above QueueCapacity " + strconv.Itoa(g.QueueCapacity)}
	}
	return nil
}

// Headroom returns QueueCapacity − HighWatermark: the in-flight messages the
// queue absorbs after the signal fires. For a valid gate it is ≥ 0 and
// cannot wrap; for an invalid one it is meaningless.
func (g BackpressureGate) Headroom() int { return g.QueueCapacity - g.HighWatermark }

// Class places the gate on the decision boundary. It returns an error
// matching [ErrInvalidGate] (and class 0) when [BackpressureGate.Validate]
// does. Cost: O(1).
//
// The headroom test is QueueCapacity ≥ HighWatermark + ProducerMaxInflight,
// evaluated as ProducerMaxInflight ≤ QueueCapacity − HighWatermark so that
// it cannot wrap: a sum past math.MaxInt is an overflow verdict, as it would
// be in exact arithmetic.
func (g BackpressureGate) Class() (GateClass, error) {
	if err := g.Validate(); err != nil {
		return 0, err
	}
	switch {
	case g.Enforced:
		return ClassEnforced, nil
	case g.ProducerComplianceVerified:
		return ClassAdvisoryVerified, nil
	case g.ProducerMaxInflight <= g.Headroom():
		return ClassAdvisoryHeadroom, nil
	}
	return ClassAdvisoryOverflow, nil
}

// Verify returns nil when the gate's backpressure protects the consumer:
//
//	Enforced ∨ ProducerComplianceVerified ∨
//	QueueCapacity ≥ HighWatermark + ProducerMaxInflight
//
// with the sum in exact arithmetic. Otherwise it returns a
// *[AdvisoryOverflowError], or, for a gate that cannot exist, a *[GateError]
// matching [ErrInvalidGate] (never an *AdvisoryOverflowError); an invalid
// gate is rejected even when it is enforced or verified. Cost: O(1).
func (g BackpressureGate) Verify() error {
	class, err := g.Class()
	if err != nil {
		return err
	}
	if class.Protective() {
		return nil
	}
	required, _ := addOver(g.HighWatermark, g.ProducerMaxInflight, false)
	return &AdvisoryOverflowError{
		QueueCapacity:       g.QueueCapacity,
		Required:            required,
		HighWatermark:       g.HighWatermark,
		ProducerMaxInflight: g.ProducerMaxInflight,
	}
}

// GateClass is a gate's place on the decision boundary: which of the four
// cases it is, and so what its protection rests on. The zero GateClass is
// none of them; [BackpressureGate.Class] returns it only with an error.
type GateClass uint8

const (
	// ClassEnforced: enforced flow control (credit, window or hard reject).
	// Protective unconditionally: the producer cannot send past the bound,
	// whatever it does with the signal.
	ClassEnforced GateClass = iota + 1
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
	// [ModeAddEnforcedCredit].
	ClassAdvisoryOverflow
)

var gateClassNames = [...]string{
	ClassEnforced:         "enforced",
	ClassAdvisoryVerified: "advisory-verified",
	ClassAdvisoryHeadroom: "advisory-headroom",
	ClassAdvisoryOverflow: "advisory-overflow",
}

// String returns "enforced", "advisory-verified", "advisory-headroom" or
// "advisory-overflow", and "GateClass(n)" for any other value.
func (c GateClass) String() string {
	if c == 0 || int(c) >= len(gateClassNames) {
		return "GateClass(" + strconv.Itoa(int(c)) + ")"
	}
	return gateClassNames[c]
}

// Protective reports whether the class protects the consumer: every class
// but [ClassAdvisoryOverflow] (and the zero GateClass).
func (c GateClass) Protective() bool {
	return c == ClassEnforced || c == ClassAdvisoryVerified || c == ClassAdvisoryHeadroom
}

// AssumesCooperation reports whether the class's protection holds only
// while the producer honours the signal: [ClassAdvisoryVerified] alone.
func (c GateClass) AssumesCooperation() bool { return c == ClassAdvisoryVerified }

// Mode returns the mode to dispatch for the class: [ModeAddEnforcedCredit]
// for [ClassAdvisoryOverflow], [ModeBackpressureProtective] for the other
// three, and the zero Mode for the zero GateClass.
func (c GateClass) Mode() Mode {
	switch {
	case c == ClassAdvisoryOverflow:
		return ModeAddEnforcedCredit
	case c.Protective():
		return ModeBackpressureProtective
	}
	return 0
}

// Mode is what an instance should do about a channel's backpressure. The
// zero Mode is neither mode; [DispatchBackpressureMode] returns it only with
// an error.
type Mode uint8

const (
	// ModeBackpressureProtective: the backpressure protects the consumer as
	// configured; nothing to add.
	ModeBackpressureProtective Mode = iota + 1
	// ModeAddEnforcedCredit: put an enforced bound (credit, window or hard
	// reject) behind the advisory signal. Not a larger queue.
	ModeAddEnforcedCredit
)

// String returns "backpressure-protective" or "add-enforced-credit", and
// "Mode(n)" for any other value.
func (m Mode) String() string {
	switch m {
	case ModeBackpressureProtective:
		return "backpressure-protective"
	case ModeAddEnforcedCredit:
		return "add-enforced-credit"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// DispatchBackpressureMode returns the mode to dispatch for g:
// [ModeAddEnforcedCredit] when [BackpressureGate.Verify] returns an
// overflow verdict, [ModeBackpressureProtective] when it returns nil. The
// overflow verdict is the answer here, not a failure, so the error is nil;
// only a gate that cannot exist returns an error, matching [ErrInvalidGate],
// with the zero Mode.
func DispatchBackpressureMode(g BackpressureGate) (Mode, error) {
	class, err := g.Class()
	if err != nil {
		return 0, err
	}
	return class.Mode(), nil
}
