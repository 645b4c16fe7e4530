package backpressure

import (
	"fmt"
	"strconv"
)

// BackpressureGate describes one producer→consumer channel, so that
// [BackpressureGate.Verify] can decide before the channel runs whether its
// backpressure protects the consumer. All counts are in messages.
//
// The zero value is a valid gate: an advisory channel with an empty queue
// and nothing in flight, which Verify accepts by headroom (0 ≥ 0 + 0). A
// gate is a plain value, safe to copy and to use from several goroutines.
// Package [github.com/outboxkit/backpressure/handoff] builds the gate of a
// dispatcher's worker queue and checks a gate's claims against records.
type BackpressureGate struct {
	// Enforced is true when the consumer stops accepting at capacity in a
	// way the producer cannot ignore: credit, a window that decrements, or a
	// hard reject. False means the consumer's signal is advisory.
	Enforced bool
	// QueueCapacity is the most messages the consumer's queue holds. Must be
	// ≥ 0.
	QueueCapacity int
	// HighWatermark is the depth at which the consumer signals the producer
	// to slow down. Must satisfy 0 ≤ HighWatermark ≤ QueueCapacity.
	HighWatermark int
	// ProducerMaxInflight is the most messages that can still arrive after
	// the signal fires, before the producer can respond. Must be ≥ 0.
	ProducerMaxInflight int
	// ProducerComplianceVerified is true when the producer's rate is measured
	// against the requested rate and non-compliance raises an alert. The
	// gate takes it on trust; handoff's ComplianceMonitor is one way to earn
	// it.
	ProducerComplianceVerified bool
}

// Validate returns nil when the gate can exist, whatever its verdict:
//
//	QueueCapacity ≥ 0, HighWatermark ≥ 0, ProducerMaxInflight ≥ 0,
//	HighWatermark ≤ QueueCapacity
//
// checked in that order, enforced or not. Otherwise it returns a
// *[ConfigError] matching [ErrInvalidConfig] whose Field names the first
// field that fails, e.g. "BackpressureGate.HighWatermark".
func (g BackpressureGate) Validate() error {
	bad := func(field string, value int, reason string) error {
		return &ConfigError{Field: "BackpressureGate." + field, Value: value, Reason: reason}
	}
	switch {
	case g.QueueCapacity < 0:
		return bad("QueueCapacity", g.QueueCapacity, "must not be negative")
	case g.HighWatermark < 0:
		return bad("HighWatermark", g.HighWatermark, "must not be negative")
	case g.ProducerMaxInflight < 0:
		return bad("ProducerMaxInflight", g.ProducerMaxInflight, "must not be negative")
	case g.HighWatermark > g.QueueCapacity:
		return bad("HighWatermark", g.HighWatermark, "above QueueCapacity "+strconv.Itoa(g.QueueCapacity))
	}
	return nil
}

// Headroom returns QueueCapacity − HighWatermark: the in-flight messages the
// queue absorbs after the signal fires. For a valid gate it is ≥ 0; for an
// invalid one it is meaningless.
func (g BackpressureGate) Headroom() int { return g.QueueCapacity - g.HighWatermark }

// Verify returns nil exactly when the gate's backpressure protects the
// consumer:
//
//	Enforced ∨ ProducerComplianceVerified ∨
//	QueueCapacity ≥ HighWatermark + ProducerMaxInflight
//
// with the sum in exact arithmetic. Otherwise it returns a
// *[AdvisoryOverflowError]; for a gate that cannot exist it returns
// [BackpressureGate.Validate]'s error instead, even when the gate is
// enforced or verified. Cost: O(1).
func (g BackpressureGate) Verify() error {
	if err := g.Validate(); err != nil {
		return err
	}
	// Compared as in-flight ≤ headroom: both sides are valid ints, so
	// nothing wraps, and a sum past math.MaxInt is an overflow verdict, as
	// it is in exact arithmetic.
	if g.Enforced || g.ProducerComplianceVerified || g.ProducerMaxInflight <= g.Headroom() {
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

// AdvisoryOverflowError is Verify's verdict on an advisory channel whose
// producer is not verified and whose queue lacks headroom for the
// producer's in-flight messages:
//
//	QueueCapacity < HighWatermark + ProducerMaxInflight
//
// Under sustained overload such a queue overflows however early the signal
// fires. The fix is an enforced bound (credit, window or hard reject), never
// a larger queue, which only postpones the overflow. Match it with
// [errors.As].
type AdvisoryOverflowError struct {
	QueueCapacity int
	// Required is HighWatermark + ProducerMaxInflight, saturated at
	// math.MaxInt when the sum does not fit in an int; Error states the
	// exact sum.
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

// Mode is what to do about a channel's backpressure. The zero Mode is
// neither mode; [BackpressureGate.Mode] returns it only with an error.
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

// Mode returns the mode to dispatch for g:
// [ModeBackpressureProtective] when g.Verify returns nil,
// [ModeAddEnforcedCredit] when it returns an overflow verdict. The verdict
// is the answer here, not a failure, so the error is nil; only a gate that
// cannot exist returns Validate's error, with the zero Mode.
func (g BackpressureGate) Mode() (Mode, error) {
	switch err := g.Verify(); err.(type) {
	case nil:
		return ModeBackpressureProtective, nil
	case *AdvisoryOverflowError:
		return ModeAddEnforcedCredit, nil
	default:
		return 0, err
	}
}
