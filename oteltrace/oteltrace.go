package oteltrace

import (
	"context"
	"maps"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans [Handler] starts.
const ScopeName = "github.com/outboxkit/backpressure/oteltrace"

// MessagingSystem is the messaging.system attribute of the spans.
const MessagingSystem = "backpressure"

// Attributes of this library's own on the spans.
const (
	NamespaceKey = attribute.Key("backpressure.namespace") // the row's namespace (tenant)
	AttemptKey   = attribute.Key("backpressure.attempt")   // the row's Attempts, this claim included: 1 on the first run
)

// Option configures [Inject], [Extract] and [Handler].
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the provider of the handler's spans. Default:
// otel.GetTracerProvider() when Handler is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithPropagator sets how a trace context is written to and read from a
// row's headers. Default: the W3C trace context (traceparent and
// tracestate), whatever otel's global propagator is, so that producers and
// dispatchers agree without configuring one.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

func newConfig(opts []Option) config {
	c := config{prop: propagation.TraceContext{}}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

// Inject returns m with ctx's trace context added to a copy of its
// headers (m's own map is not modified): with the default propagator,
// "traceparent" and, if ctx has one, "tracestate". A ctx without a valid
// span context adds nothing and returns m as it was. The headers still
// pass [outbox.Message.Validate] unless m's own were near its limits
// (a traceparent is 66 bytes with its key; a tracestate at most 512 of
// W3C's).
func Inject(ctx context.Context, m outbox.Message, opts ...Option) outbox.Message {
	c := newConfig(opts)
	carrier := propagation.MapCarrier{}
	c.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return m
	}
	h := make(map[string]string, len(m.Headers)+len(carrier))
	maps.Copy(h, m.Headers)
	maps.Copy(h, carrier)
	m.Headers = h
	return m
}

// Extract returns the span context Inject stored in row's headers, or an
// invalid one when there is none or it does not parse.
func Extract(row outbox.Row, opts ...Option) trace.SpanContext {
	c := newConfig(opts)
	return spanContextOf(c.prop, row)
}

func spanContextOf(p propagation.TextMapPropagator, row outbox.Row) trace.SpanContext {
	if len(row.Headers) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(p.Extract(context.Background(), propagation.MapCarrier(row.Headers)))
}

// Handler returns a handler that runs h for each row in a new span named
// "process <task queue>" ("process" on the default task queue), the root
// of its own trace, linked to the span context Inject stored with the
// row (no link when there is none), with the attributes the package doc
// lists; h's ctx carries the span. The span ends when h returns; a non-nil
// error from h is recorded on it and returned unchanged, so the
// dispatcher's retry, snooze and dead-letter decisions see what h said.
func Handler(h dispatch.Handler, opts ...Option) dispatch.Handler {
	c := newConfig(opts)
	tracer := c.tp.Tracer(ScopeName)
	return func(ctx context.Context, row outbox.Row) error {
		start := []trace.SpanStartOption{
			trace.WithNewRoot(),
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				semconv.MessagingSystemKey.String(MessagingSystem),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingOperationName("process"),
				semconv.MessagingDestinationName(row.TaskQueue),
				semconv.MessagingMessageID(row.DispatchKey),
				semconv.MessagingMessageBodySize(len(row.Payload)),
				NamespaceKey.String(row.Namespace),
				AttemptKey.Int(row.Attempts),
			),
		}
		if sc := spanContextOf(c.prop, row); sc.IsValid() {
			start = append(start, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		ctx, span := tracer.Start(ctx, spanName(row.TaskQueue), start...)
		defer span.End()
		err := h(ctx, row)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(semconv.ErrorType(err))
		}
		return err
	}
}

// spanName is the conventions' "{operation} {destination}".
func spanName(taskQueue string) string {
	if taskQueue == "" {
		return "process"
	}
	return "process " + taskQueue
}
