// Package otelmetrics records what a [dispatch.Dispatcher] does on
// OpenTelemetry instruments: pass [New]'s result as dispatch.Options.Metrics.
// It is a module of its own so that the backpressure module depends on no
// OpenTelemetry package.
//
// The instruments, all prefixed "backpressure.":
//
//	sweep.duration        histogram (s)   per sweep; attribute outcome = "ok" | "error"
//	sweep.rows            counter         rows claimed
//	namespace.granted     counter         rows granted, per namespace
//	namespace.held        gauge           rows held at the last sweep, per namespace and reason
//	                                      ("at-ceiling", "budget", "rate", "paused", "invalid-route", "none")
//	namespace.tokens      gauge           a rate-limited namespace's whole tokens on this node at the last sweep
//	namespace.claimed     gauge           rows claimed (running) at the last sweep, per namespace
//	namespace.ceiling     gauge           the per-node ceiling, per namespace (+Inf when unlimited)
//	completions           counter         results applied, per namespace, outcome and state
//	dead_letters          counter         rows dead-lettered, per namespace
//	lease_lost            counter         leases lost, per namespace and op
//	panics                counter         handler panics, per namespace
//	leases_extended       counter         leases extended
//	store_errors          counter         failed store calls, per op ("Sweep", "Complete", "ExtendLeases")
//
// The namespace attribute has one value per tenant: with many tenants, bound
// the cardinality with the SDK's views or attribute filters.
//
// What is exported, and why: [New] returns the [Metrics] that implements
// dispatch.Metrics (its methods are that interface's, called by the
// dispatcher, not by the application), and [ScopeName] is the
// instrumentation scope, for filtering in the SDK. Nothing else.
package otelmetrics

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// ScopeName is the instrumentation scope of the instruments.
const ScopeName = "github.com/outboxkit/backpressure/otelmetrics"

// Metrics is a [dispatch.Metrics] on OpenTelemetry instruments. It is safe
// for concurrent use, as the instruments are.
type Metrics struct {
	sweepDuration metric.Float64Histogram
	sweepRows     metric.Int64Counter
	granted       metric.Int64Counter
	held          metric.Int64Gauge
	claimed       metric.Int64Gauge
	ceiling       metric.Float64Gauge
	tokens        metric.Int64Gauge
	completions   metric.Int64Counter
	deadLetters   metric.Int64Counter
	leaseLost     metric.Int64Counter
	panics        metric.Int64Counter
	extended      metric.Int64Counter
	storeErrors   metric.Int64Counter
	adaptive      metric.Int64Gauge
	signals       metric.Int64Counter
	breaches      metric.Int64Counter
}

var _ dispatch.Metrics = (*Metrics)(nil)

// New creates the instruments on provider's meter for [ScopeName], and
// returns the first error creating one returned.
func New(provider metric.MeterProvider) (*Metrics, error) {
	m := provider.Meter(ScopeName)
	var (
		out  Metrics
		errs []error
	)
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	out.sweepDuration, err = m.Float64Histogram("backpressure.sweep.duration", metric.WithUnit("s"), metric.WithDescription("Duration of a dispatcher's sweeps."))
	check(err)
	out.sweepRows, err = m.Int64Counter("backpressure.sweep.rows", metric.WithUnit("{row}"), metric.WithDescription("Rows claimed by sweeps."))
	check(err)
	out.granted, err = m.Int64Counter("backpressure.namespace.granted", metric.WithUnit("{row}"), metric.WithDescription("Rows granted to a namespace by sweeps' plans."))
	check(err)
	out.held, err = m.Int64Gauge("backpressure.namespace.held", metric.WithUnit("{row}"), metric.WithDescription("Rows of a namespace the last sweep left pending, by reason."))
	check(err)
	out.claimed, err = m.Int64Gauge("backpressure.namespace.claimed", metric.WithUnit("{row}"), metric.WithDescription("Rows of a namespace claimed at the last sweep."))
	check(err)
	out.ceiling, err = m.Float64Gauge("backpressure.namespace.ceiling", metric.WithUnit("{row}"), metric.WithDescription("A namespace's per-node ceiling on claimed rows (+Inf: unlimited)."))
	check(err)
	out.tokens, err = m.Int64Gauge("backpressure.namespace.tokens", metric.WithUnit("{token}"), metric.WithDescription("A rate-limited namespace's whole tokens on this node at the last sweep (see backpressure.Rate)."))
	check(err)
	out.completions, err = m.Int64Counter("backpressure.completions", metric.WithUnit("{row}"), metric.WithDescription("Results the store applied."))
	check(err)
	out.deadLetters, err = m.Int64Counter("backpressure.dead_letters", metric.WithUnit("{row}"), metric.WithDescription("Rows dead-lettered."))
	check(err)
	out.leaseLost, err = m.Int64Counter("backpressure.lease_lost", metric.WithUnit("{row}"), metric.WithDescription("Rows whose lease was lost."))
	check(err)
	out.panics, err = m.Int64Counter("backpressure.panics", metric.WithUnit("{panic}"), metric.WithDescription("Handler panics."))
	check(err)
	out.extended, err = m.Int64Counter("backpressure.leases_extended", metric.WithUnit("{lease}"), metric.WithDescription("Leases extended."))
	check(err)
	out.storeErrors, err = m.Int64Counter("backpressure.store_errors", metric.WithUnit("{error}"), metric.WithDescription("Failed store calls."))
	check(err)
	out.adaptive, err = m.Int64Gauge("backpressure.namespace.adaptive_ceiling", metric.WithUnit("{row}"), metric.WithDescription("A namespace's adaptive ceiling on this node, as the planner applies it (dispatch.Options.Adaptive)."))
	check(err)
	out.signals, err = m.Int64Counter("backpressure.namespace.signals", metric.WithUnit("{signal}"), metric.WithDescription("A downstream's overload signals received, by whether they cut the ceiling."))
	check(err)
	out.breaches, err = m.Int64Counter("backpressure.namespace.adaptive_breaches", metric.WithUnit("{sweep}"), metric.WithDescription("Sweeps that claimed rows of a namespace past what its downstream asked for (the gate's self-check)."))
	check(err)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return &out, nil
}

func nsAttr(ns string) attribute.KeyValue { return attribute.String("namespace", ns) }

// Swept records a sweep's duration and, per namespace of its plan, the
// rows granted, held, claimed, the ceiling and, for a rate-limited
// namespace, its tokens.
func (m *Metrics) Swept(e dispatch.SweepEvent) {
	ctx := context.Background()
	if e.Err != nil {
		m.sweepDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attribute.String("outcome", "error")))
		m.storeErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("op", "Sweep")))
		return
	}
	m.sweepDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attribute.String("outcome", "ok")))
	m.sweepRows.Add(ctx, int64(e.Claimed))
	for _, r := range e.Plan.Namespaces {
		ns := metric.WithAttributes(nsAttr(r.Namespace))
		if r.Granted > 0 {
			m.granted.Add(ctx, int64(r.Granted), ns)
		}
		reason := r.Reason.String()
		if r.Reason == backpressure.HeldNone {
			reason = "none"
		}
		m.held.Record(ctx, int64(r.Held), metric.WithAttributes(nsAttr(r.Namespace), attribute.String("reason", reason)))
		m.claimed.Record(ctx, int64(r.Claimed), ns)
		c := float64(r.Ceiling)
		if r.Ceiling == backpressure.Unlimited {
			c = math.Inf(1)
		}
		m.ceiling.Record(ctx, c, ns)
		if r.Rate.PerSecond > 0 {
			m.tokens.Record(ctx, int64(r.Tokens), ns)
		}
	}
}

// Completed counts a result the store applied, and a dead letter.
func (m *Metrics) Completed(e dispatch.CompletionEvent) {
	ctx := context.Background()
	m.completions.Add(ctx, 1, metric.WithAttributes(nsAttr(e.Row.Namespace),
		attribute.String("outcome", e.Outcome.String()), attribute.String("state", string(e.State))))
	if e.State == outbox.StateDead {
		m.deadLetters.Add(ctx, 1, metric.WithAttributes(nsAttr(e.Row.Namespace)))
	}
}

// LeaseLost counts a lost lease.
func (m *Metrics) LeaseLost(e dispatch.LeaseLostEvent) {
	m.leaseLost.Add(context.Background(), 1, metric.WithAttributes(nsAttr(e.Row.Namespace), attribute.String("op", e.Op)))
}

// LeasesExtended counts extended leases.
func (m *Metrics) LeasesExtended(n int) { m.extended.Add(context.Background(), int64(n)) }

// Panicked counts a handler panic.
func (m *Metrics) Panicked(row outbox.Row) {
	m.panics.Add(context.Background(), 1, metric.WithAttributes(nsAttr(row.Namespace)))
}

// Adapted records a namespace's adaptive ceiling, and counts a signal
// (attribute cut: whether it cut the ceiling) or a self-check breach.
func (m *Metrics) Adapted(e dispatch.AdaptEvent) {
	ctx := context.Background()
	ns := metric.WithAttributes(nsAttr(e.Namespace))
	switch {
	case e.Breach:
		m.breaches.Add(ctx, 1, ns)
		return
	case e.Signal:
		m.signals.Add(ctx, 1, metric.WithAttributes(nsAttr(e.Namespace), attribute.Bool("cut", e.Cut)))
	}
	m.adaptive.Record(ctx, int64(e.Ceiling), ns)
}

// StoreFailed counts a failed Complete or ExtendLeases call.
func (m *Metrics) StoreFailed(op string, _ error) {
	m.storeErrors.Add(context.Background(), 1, metric.WithAttributes(attribute.String("op", op)))
}
