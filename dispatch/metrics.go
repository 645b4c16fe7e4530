package dispatch

import (
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Metrics receives what a [Dispatcher] does. Its methods are called from
// the dispatcher's goroutines, concurrently, and must not block. Embed
// [NopMetrics] to implement only some of them.
type Metrics interface {
	// Swept is called after every sweep, failed or not.
	Swept(SweepEvent)
	// Completed is called for every result the store applied.
	Completed(CompletionEvent)
	// LeaseLost is called for every row whose lease the store reported
	// lost, by an extension or by a completion. Such a row's result is
	// never written; the row runs again wherever it is claimed next.
	LeaseLost(LeaseLostEvent)
	// LeasesExtended is called after every ExtendLeases call that
	// succeeded, with the number of leases it extended.
	LeasesExtended(n int)
	// Panicked is called for every handler panic (before the row is
	// retried).
	Panicked(row outbox.Row)
	// StoreFailed is called for every failed Complete or ExtendLeases call
	// (op is the method's name); the dispatcher retries them. A failed
	// sweep is reported by Swept.
	StoreFailed(op string, err error)
	// Adapted is called, with Options.Adaptive, for every downstream
	// signal, every change of a namespace's adaptive ceiling or hold, a
	// pin or reset, and every breach the gate's self-check finds (see
	// [AdaptEvent]).
	Adapted(AdaptEvent)
}

// SweepEvent describes one sweep.
type SweepEvent struct {
	Asked    int           // the rows the sweep asked for: the idle workers, ≤ BatchSize
	Claimed  int           // the rows it claimed
	Duration time.Duration // how long the sweep took
	// Plan is the sweep's plan: per namespace its ceiling, claimed,
	// granted and held rows with the reason (see
	// [backpressure.NamespaceReport]). Zero when Err is set.
	Plan backpressure.Plan
	Err  error // why the sweep failed; nil on success
}

// CompletionEvent describes one result the store applied.
type CompletionEvent struct {
	Row     outbox.Row     // the row as claimed (Attempts includes this claim)
	Outcome outbox.Outcome // what the dispatcher asked for
	// State is the row's state after it: settled, pending (a retry), or
	// dead (a dead-letter, or a retry past MaxAttempts).
	State outbox.State
	Err   error // the handler's error; nil for a settle
}

// LeaseLostEvent describes a row whose lease was lost.
type LeaseLostEvent struct {
	Row outbox.Row // the row as claimed
	Op  string     // "ExtendLeases" or "Complete": the call that reported it
}

// NopMetrics is a [Metrics] that does nothing: the default, and a base to
// embed.
type NopMetrics struct{}

// Swept does nothing.
func (NopMetrics) Swept(SweepEvent) {}

// Completed does nothing.
func (NopMetrics) Completed(CompletionEvent) {}

// LeaseLost does nothing.
func (NopMetrics) LeaseLost(LeaseLostEvent) {}

// LeasesExtended does nothing.
func (NopMetrics) LeasesExtended(int) {}

// Panicked does nothing.
func (NopMetrics) Panicked(outbox.Row) {}

// StoreFailed does nothing.
func (NopMetrics) StoreFailed(string, error) {}

// Adapted does nothing.
func (NopMetrics) Adapted(AdaptEvent) {}
