package backpressure

import "math"

// WorkerQueueGate builds and verifies the gate for the queue between a
// dispatcher's sweeps and its workers, for a dispatcher that runs one sweep
// at a time and checks the queue's depth against highWatermark before each
// one. It is [WorkerQueueGateSweeps] with sweepsInFlight = 1.
//
// Call it at start-up and refuse to start on an error: it returns the gate
// (so it can be logged) and the gate's [BackpressureGate.Verify] verdict.
func WorkerQueueGate(b *Backpressure, queueCapacity, highWatermark int) (BackpressureGate, error) {
	return WorkerQueueGateSweeps(b, 1, queueCapacity, highWatermark)
}

// WorkerQueueGateSweeps builds and verifies the gate for a worker queue fed
// by sweeps of b, when up to sweepsInFlight sweeps' rows may be on their way
// into the queue after the depth check passed:
//
//	ProducerMaxInflight = sweepsInFlight × b.BatchSize()
//
// A sweep claims at most b.BatchSize() rows, a hard bound the planner never
// exceeds, so one sweep started below the watermark adds at most a batch
// above it. sweepsInFlight is 1 for a loop that sweeps, enqueues the rows
// and only then checks the depth again. It is k when the loop starts the
// next sweep before the previous one's rows are enqueued, with k sweeps
// pipelined, and the number of dispatcher nodes when several nodes feed one
// queue, since each node's Backpressure serialises only its own sweeps.
//
// The gate is advisory and unverified: the watermark check is the only
// thing that holds the dispatcher back, so the queue must have the headroom,
//
//	queueCapacity ≥ highWatermark + sweepsInFlight × b.BatchSize()
//
// or the error is an *[AdvisoryOverflowError]. A queue whose enqueue blocks
// when full (a Go channel send without a default case) is enforced and needs
// no headroom; build its BackpressureGate directly with Enforced set.
//
// It returns the gate and the gate's Verify error, or, with a zero gate, a
// *[GateError] matching [ErrInvalidGate]: on "Backpressure", also matching
// [ErrInvalidConfig] as Sweep and Plan's error does, when b is nil or not
// built with [New] (it has no batch size to bound a sweep); on
// "sweepsInFlight" when sweepsInFlight < 1. When the product does not fit in
// an int, the gate's ProducerMaxInflight is math.MaxInt and the verdict is
// an overflow, as in exact arithmetic.
func WorkerQueueGateSweeps(b *Backpressure, sweepsInFlight, queueCapacity, highWatermark int) (BackpressureGate, error) {
	switch {
	case b == nil:
		return BackpressureGate{}, &GateError{Field: "Backpressure", Value: 0, Reason: "nil *Backpressure", Err: ErrInvalidConfig}
	case b.sem == nil || b.BatchSize() < 1:
		return BackpressureGate{}, &GateError{Field: "Backpressure", Value: 0, Reason: "*Backpressure not built with New", Err: ErrInvalidConfig}
	}
	if sweepsInFlight < 1 {
		return BackpressureGate{}, &GateError{Field: "sweepsInFlight", Value: sweepsInFlight, Reason: "must be at least 1"}
	}
	g := BackpressureGate{QueueCapacity: queueCapacity, HighWatermark: highWatermark}
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
	return g, &AdvisoryOverflowError{
		QueueCapacity:       queueCapacity,
		Required:            math.MaxInt,
		HighWatermark:       highWatermark,
		ProducerMaxInflight: math.MaxInt,
	}
}
