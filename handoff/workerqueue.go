package handoff

import (
	"errors"
	"math"

	"github.com/outboxkit/backpressure"
)

// WorkerQueueGate is [WorkerQueueGateSweeps] with sweepsInFlight = 1: the
// gate of a worker queue fed by a dispatcher that runs one sweep at a time
// and checks the queue's depth against highWatermark before each one.
func WorkerQueueGate(b *backpressure.Backpressure, queueCapacity, highWatermark int) (backpressure.BackpressureGate, error) {
	return WorkerQueueGateSweeps(b, 1, queueCapacity, highWatermark)
}

// WorkerQueueGateSweeps builds and verifies the gate of a worker queue fed
// by sweeps of b, when up to sweepsInFlight sweeps' rows may be on their
// way into the queue after the depth check passed. The gate is advisory and
// unverified, with
//
//	ProducerMaxInflight = sweepsInFlight × b.BatchSize()
//
// so it returns nil exactly when
//
//	queueCapacity ≥ highWatermark + sweepsInFlight × b.BatchSize()
//
// and otherwise a *[backpressure.AdvisoryOverflowError]. Call it at
// start-up and refuse to start on an error. sweepsInFlight is 1 for a loop
// that enqueues a sweep's rows before it checks the depth again, k for k
// pipelined sweeps, and the node count when several nodes feed one queue.
// A queue whose enqueue blocks when full is enforced and needs no headroom:
// build its gate directly with Enforced set.
//
// It returns the gate (for logging) and its Verify error. A product past
// math.MaxInt gives ProducerMaxInflight = math.MaxInt and an overflow, as
// in exact arithmetic. A gate field that cannot hold gives Verify's
// *ConfigError; b nil or not built with [backpressure.New], or
// sweepsInFlight < 1, give the zero gate and a *[backpressure.ConfigError]
// (Field "Backpressure" or "sweepsInFlight"); all three match
// [backpressure.ErrInvalidConfig]. See docs/gate.md for why the bound holds.
func WorkerQueueGateSweeps(b *backpressure.Backpressure, sweepsInFlight, queueCapacity, highWatermark int) (backpressure.BackpressureGate, error) {
	// A Backpressure not built with New has batch size 0: no bound on a
	// sweep, so no gate to give.
	if b == nil || b.BatchSize() < 1 {
		return backpressure.BackpressureGate{}, &backpressure.ConfigError{Field: "Backpressure", Value: 0, Reason: "nil, or not built with New"}
	}
	if sweepsInFlight < 1 {
		return backpressure.BackpressureGate{}, &backpressure.ConfigError{Field: "sweepsInFlight", Value: sweepsInFlight, Reason: "must be at least 1"}
	}
	g := backpressure.BackpressureGate{QueueCapacity: queueCapacity, HighWatermark: highWatermark}
	if batch := b.BatchSize(); batch <= math.MaxInt/sweepsInFlight {
		g.ProducerMaxInflight = sweepsInFlight * batch
		return g, g.Verify()
	}
	// The in-flight count exceeds every int, so no int queue has the
	// headroom; saturating it and calling Verify would accept a queue of
	// math.MaxInt with a zero watermark.
	g.ProducerMaxInflight = math.MaxInt
	if err := g.Validate(); err != nil {
		return g, err
	}
	return g, &backpressure.AdvisoryOverflowError{
		QueueCapacity:       queueCapacity,
		Required:            math.MaxInt,
		HighWatermark:       highWatermark,
		ProducerMaxInflight: math.MaxInt,
	}
}

// isOverflow reports whether err is an overflow verdict.
func isOverflow(err error) bool {
	var oe *backpressure.AdvisoryOverflowError
	return errors.As(err, &oe)
}
