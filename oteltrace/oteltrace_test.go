package oteltrace_test

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxkit/backpressure/oteltrace"
	"github.com/outboxkit/backpressure/outbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// producer returns a provider recording its spans, and a ctx inside a
// span of it, as a request handler that enqueues would have.
func producer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder, context.Context, trace.Span) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "POST /orders")
	t.Cleanup(func() { span.End() })
	return tp, rec, ctx, span
}

func TestInjectStoresTheTraceContext(t *testing.T) {
	_, _, ctx, span := producer(t)
	own := map[string]string{"content-type": "application/json"}
	m := oteltrace.Inject(ctx, outbox.Message{DispatchKey: "k", Namespace: "acme", Headers: own})
	if len(own) != 1 {
		t.Errorf("Inject changed the message's own map: %v", own)
	}
	if m.Headers["content-type"] != "application/json" || m.Headers["traceparent"] == "" {
		t.Fatalf("headers after Inject = %v, want the message's own and a traceparent", m.Headers)
	}
	if err := m.Validate(); err != nil {
		t.Errorf("the injected message does not validate: %v", err)
	}
	got := oteltrace.Extract(outbox.Row{Headers: m.Headers})
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("Extract = %v/%v, want the producer's %v/%v", got.TraceID(), got.SpanID(), span.SpanContext().TraceID(), span.SpanContext().SpanID())
	}
}

func TestInjectWithoutASpanAddsNothing(t *testing.T) {
	m := oteltrace.Inject(context.Background(), outbox.Message{DispatchKey: "k", Namespace: "acme"})
	if m.Headers != nil {
		t.Errorf("Inject without a span set headers %v", m.Headers)
	}
	if sc := oteltrace.Extract(outbox.Row{Headers: map[string]string{"traceparent": "garbage"}}); sc.IsValid() {
		t.Errorf("Extract of a bad traceparent = %v, want an invalid span context", sc)
	}
}

// The handler's span: a new root, consumer, linked to the producer's span,
// with the messaging attributes; a handler's error is recorded and
// returned as it was.
func TestHandlerSpan(t *testing.T) {
	tp, rec, ctx, pspan := producer(t)
	m := oteltrace.Inject(ctx, outbox.Message{DispatchKey: "order/1", Namespace: "acme", TaskQueue: "fulfil", Payload: []byte("1234")})
	boom := errors.New("warehouse down")
	var inHandler trace.SpanContext
	h := oteltrace.Handler(func(ctx context.Context, row outbox.Row) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return boom
	}, oteltrace.WithTracerProvider(tp))
	row := outbox.Row{DispatchKey: m.DispatchKey, Namespace: m.Namespace, TaskQueue: m.TaskQueue, Payload: m.Payload, Headers: m.Headers, Attempts: 2}
	if err := h(context.Background(), row); err != boom {
		t.Fatalf("Handler returned %v, want the handler's own error", err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	s := spans[0]
	switch {
	case s.Name() != "process fulfil" || s.SpanKind() != trace.SpanKindConsumer:
		t.Errorf("span %q of kind %v, want \"process fulfil\", consumer", s.Name(), s.SpanKind())
	case s.Parent().IsValid() || s.SpanContext().TraceID() == pspan.SpanContext().TraceID():
		t.Errorf("the span is a child of %v in trace %v: want a new root", s.Parent(), s.SpanContext().TraceID())
	case len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != pspan.SpanContext().SpanID():
		t.Errorf("links %v, want one to the producer's span %v", s.Links(), pspan.SpanContext().SpanID())
	case s.SpanContext().SpanID() != inHandler.SpanID():
		t.Errorf("the handler's ctx carries span %v, want the process span %v", inHandler.SpanID(), s.SpanContext().SpanID())
	case s.Status().Code != codes.Error || len(s.Events()) != 1:
		t.Errorf("status %v with %d events, want Error with the recorded error", s.Status(), len(s.Events()))
	}
	want := map[attribute.Key]attribute.Value{
		"messaging.system":            attribute.StringValue("backpressure"),
		"messaging.operation.type":    attribute.StringValue("process"),
		"messaging.operation.name":    attribute.StringValue("process"),
		"messaging.destination.name":  attribute.StringValue("fulfil"),
		"messaging.message.id":        attribute.StringValue("order/1"),
		"messaging.message.body.size": attribute.IntValue(4),
		"backpressure.namespace":      attribute.StringValue("acme"),
		"backpressure.attempt":        attribute.IntValue(2),
		"error.type":                  attribute.StringValue("*errors.errorString"),
	}
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		got[kv.Key] = kv.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %v, want %v", k, got[k].String(), v.String())
		}
	}
}

func TestHandlerWithoutTraceContext(t *testing.T) {
	tp, rec, _, _ := producer(t)
	h := oteltrace.Handler(func(context.Context, outbox.Row) error { return nil }, oteltrace.WithTracerProvider(tp))
	if err := h(context.Background(), outbox.Row{DispatchKey: "k", Namespace: "acme"}); err != nil {
		t.Fatal(err)
	}
	s := rec.Ended()[0]
	if s.Name() != "process" || len(s.Links()) != 0 || s.Status().Code == codes.Error {
		t.Errorf("span %q with %d links, status %v; want \"process\", no link, not an error", s.Name(), len(s.Links()), s.Status())
	}
}
