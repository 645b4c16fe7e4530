// Package oteltrace carries an OpenTelemetry trace across the outbox: the
// producer stores its context's W3C trace context (traceparent, tracestate)
// in the message's headers ([Inject]), and the dispatcher runs each row's
// handler in a span of its own, linked to the producer's ([Handler]).
//
// The handler's span is a new root with a link, not a child of the
// producer's span: a row may run seconds or hours after the request that
// enqueued it, many times (at least once), and a trace that spans all of
// that is no one's request. This is what OpenTelemetry's messaging
// conventions recommend for consumers and what otelriver does for River.
// The span follows those conventions: named "process <task queue>", kind
// consumer, with messaging.system "backpressure",
// messaging.operation.type and name "process", messaging.destination.name
// the task queue, messaging.message.id the dispatch key,
// messaging.message.body.size the payload's size, and two of this
// library's own: backpressure.namespace and backpressure.attempt. A handler
// error sets the span's status to Error, records it, and sets error.type.
//
// The package is a module of its own, so that the root module keeps no
// run-time dependency.
package oteltrace
