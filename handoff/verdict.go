package handoff

import (
	"strconv"
	"time"

	"github.com/outboxkit/backpressure"
)

// SignalKind is how a consumer tells its producer to slow down. Three kinds
// are enforced (the producer cannot send past them) and three advisory (the
// producer may ignore them). The zero SignalKind is none of them: no signal
// was recorded.
type SignalKind uint8

const (
	// SignalCredit: the producer sends only against credit the consumer
	// granted. Enforced.
	SignalCredit SignalKind = iota + 1
	// SignalWindow: the producer's window decrements with each send and
	// reopens only when the consumer says so. Enforced.
	SignalWindow
	// SignalHardReject: the consumer refuses messages at capacity with an
	// error the producer cannot ignore. Enforced.
	SignalHardReject
	// SignalHighWatermark: the consumer announces that its queue crossed
	// the high watermark. Advisory.
	SignalHighWatermark
	// SignalRetryAfter: the consumer asks the producer to retry after a
	// delay and keeps accepting. Advisory.
	SignalRetryAfter
	// SignalNackHint: the consumer nacks with a hint to slow down. Advisory.
	SignalNackHint
)

var signalKindNames = [...]string{
	SignalCredit:        "credit",
	SignalWindow:        "window",
	SignalHardReject:    "hard-reject",
	SignalHighWatermark: "high-watermark",
	SignalRetryAfter:    "retry-after",
	SignalNackHint:      "nack-hint",
}

// String returns the kind's name, e.g. "credit" or "retry-after", and
// "SignalKind(n)" for any other value.
func (k SignalKind) String() string {
	if k == 0 || int(k) >= len(signalKindNames) {
		return "SignalKind(" + strconv.Itoa(int(k)) + ")"
	}
	return signalKindNames[k]
}

// Enforced reports whether the producer cannot send past a signal of this
// kind: credit, window and hard reject.
func (k SignalKind) Enforced() bool {
	return k == SignalCredit || k == SignalWindow || k == SignalHardReject
}

// Advisory reports whether a signal of this kind only asks the producer:
// high watermark, retry-after and nack hint. The zero SignalKind is neither
// enforced nor advisory.
func (k SignalKind) Advisory() bool {
	return k == SignalHighWatermark || k == SignalRetryAfter || k == SignalNackHint
}

// SignalReceipt records that the consumer sent a backpressure signal, of
// which kind, and whether the producer acknowledged it. Without an
// acknowledgement, a producer that ignored an advisory signal cannot be told
// from one that never received it. The zero value records no signal.
type SignalReceipt struct {
	Kind         SignalKind
	At           time.Time // when the consumer sent the signal
	Acknowledged bool      // the producer confirmed receipt
}

// Enforced reports whether the signal was enforced.
func (r SignalReceipt) Enforced() bool { return r.Kind.Enforced() }

// BoundKind is the enforced bound a consumer falls back on when the producer
// ignores its signal. The zero BoundKind is none: no bound was recorded.
type BoundKind uint8

const (
	// BoundCredit: at most Limit messages outstanding against granted credit.
	BoundCredit BoundKind = iota + 1
	// BoundWindow: at most Limit messages in the producer's window.
	BoundWindow
	// BoundHardDrop: the consumer rejects every message past Limit queued.
	BoundHardDrop
)

var boundKindNames = [...]string{
	BoundCredit:   "credit",
	BoundWindow:   "window",
	BoundHardDrop: "hard-drop",
}

// String returns "credit", "window" or "hard-drop", and "BoundKind(n)" for
// any other value.
func (k BoundKind) String() string {
	if k == 0 || int(k) >= len(boundKindNames) {
		return "BoundKind(" + strconv.Itoa(int(k)) + ")"
	}
	return boundKindNames[k]
}

// EnforcedBoundReceipt records the hard bound behind a channel: its kind and
// its limit in messages. The zero value records no bound.
type EnforcedBoundReceipt struct {
	Kind  BoundKind
	Limit int
}

// holds reports whether the bound keeps the queue within capacity:
// a recorded kind and 0 ≤ Limit ≤ capacity. A bound above capacity lets
// the queue overflow before it bites.
func (r EnforcedBoundReceipt) holds(capacity int) bool {
	return r.Kind != 0 && int(r.Kind) < len(boundKindNames) && r.Limit >= 0 && r.Limit <= capacity
}

// Verdict is a gate's classification together with the three records that
// make it checkable: the signal receipt, the producer-compliance signature
// and the enforced-bound receipt. The class says what protection is claimed;
// the records say whether anyone could confirm it. Build one with
// [NewVerdict]. The zero Verdict has no class and is neither protective nor
// checkable.
type Verdict struct {
	Gate       backpressure.BackpressureGate
	Class      Class
	Signal     SignalReceipt
	Compliance ComplianceSignature
	Bound      EnforcedBoundReceipt
}

// NewVerdict classifies g with [Classify] and attaches the records. A record
// that is missing is passed as its zero value; [Verdict.Gaps] then names it.
// For a gate that cannot exist it returns the zero Verdict and an error
// matching [backpressure.ErrInvalidConfig].
func NewVerdict(g backpressure.BackpressureGate, signal SignalReceipt, compliance ComplianceSignature, bound EnforcedBoundReceipt) (Verdict, error) {
	class, err := Classify(g)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Gate: g, Class: class, Signal: signal, Compliance: compliance, Bound: bound}, nil
}

// Protective reports whether the gate's class protects the consumer.
func (v Verdict) Protective() bool { return v.Class.Protective() }

// Mode returns the mode to dispatch for the verdict's class.
func (v Verdict) Mode() backpressure.Mode { return v.Class.Mode() }

// Gaps names each claim the verdict's protection rests on that its records
// do not back, in a fixed order; nil when every claim is backed or nothing
// is claimed (the zero Verdict and [ClassAdvisoryOverflow] claim nothing):
//
//   - [ClassEnforced] rests on an enforced signal and a bound within the
//     queue: Signal.Kind is enforced, and Bound has a kind and
//     0 ≤ Bound.Limit ≤ QueueCapacity.
//   - [ClassAdvisoryVerified] rests on an advisory signal the producer
//     received and on a measured compliance: Signal.Kind is advisory and
//     acknowledged, and Compliance.Verdict is [ComplianceMet].
//   - [ClassAdvisoryHeadroom] rests on an advisory signal that fires: the
//     gate's arithmetic is checkable from the gate itself.
func (v Verdict) Gaps() []string {
	var gaps []string
	switch v.Class {
	case ClassEnforced:
		if !v.Signal.Kind.Enforced() {
			gaps = append(gaps, "signal receipt: want an enforced kind, have "+v.Signal.Kind.String())
		}
		if !v.Bound.holds(v.Gate.QueueCapacity) {
			gaps = append(gaps, "enforced-bound receipt: want a kind and 0 ≤ limit ≤ capacity "+
				strconv.Itoa(v.Gate.QueueCapacity)+", have "+v.Bound.Kind.String()+" limit "+strconv.Itoa(v.Bound.Limit))
		}
	case ClassAdvisoryVerified:
		if !v.Signal.Kind.Advisory() {
			gaps = append(gaps, "signal receipt: want an advisory kind, have "+v.Signal.Kind.String())
		} else if !v.Signal.Acknowledged {
			gaps = append(gaps, "signal receipt: not acknowledged by the producer")
		}
		if v.Compliance.Verdict != ComplianceMet {
			gaps = append(gaps, "producer-compliance signature: want compliant, have "+v.Compliance.Verdict.String())
		}
	case ClassAdvisoryHeadroom:
		if !v.Signal.Kind.Advisory() {
			gaps = append(gaps, "signal receipt: want an advisory kind, have "+v.Signal.Kind.String())
		}
	}
	return gaps
}

// Checkable reports whether the protection is both claimed and backed by
// the records: Protective() ∧ len(Gaps()) = 0.
func (v Verdict) Checkable() bool { return v.Protective() && len(v.Gaps()) == 0 }
