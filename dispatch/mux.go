package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// ErrNoHandler reports a row whose task queue no handler is registered for
// in a [Mux]. The typed error is *[NoHandlerError].
var ErrNoHandler = errors.New("dispatch: no handler for task queue")

// NoHandlerError is what [Mux.HandleRow] returns, wrapped by [Permanent],
// for a row whose task queue has no handler: the row is dead-lettered with
// this error as its last error. It matches [ErrNoHandler].
type NoHandlerError struct {
	Namespace string // the row's namespace
	TaskQueue string // the row's task queue, which no handler is registered for
}

// Error names the task queue and the namespace of the row.
func (e *NoHandlerError) Error() string {
	return fmt.Sprintf("dispatch: no handler for task queue %q (namespace %q)", e.TaskQueue, e.Namespace)
}

// Is reports whether target is [ErrNoHandler].
func (e *NoHandlerError) Is(target error) bool { return target == ErrNoHandler }

// Mux routes each row to the [Handler] registered for its task queue, as
// http.ServeMux routes requests by path. Register handlers with
// [Mux.Handle] and pass [Mux.HandleRow] to [New]:
//
//	var mux dispatch.Mux
//	mux.Handle("emails", sendEmail)
//	mux.Handle("invoices", dispatch.JSON(billInvoice))
//	d, err := dispatch.New(bp, store, mux.HandleRow, dispatch.Options{Workers: 16})
//
// The zero value is an empty Mux, ready to use; a Mux must not be copied
// after first use. Its methods are safe for concurrent use: a handler
// registered while a dispatcher runs serves the rows claimed after it.
//
// A row whose task queue has no handler is dead-lettered at once: its last
// error is a *[NoHandlerError] (see HandleRow for why, and how to retry
// such rows instead).
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// Handle registers h for the rows of taskQueue ("" is every namespace's
// default task queue). Registering is programmer's work done at start-up,
// so, like http.ServeMux.Handle, it panics on misuse: a nil h, a task queue
// already registered in m, or a task queue no row can have (longer than
// [outbox.MaxTaskQueueBytes] bytes, not UTF-8, or holding a NUL
// byte). A panic leaves m unchanged.
func (m *Mux) Handle(taskQueue string, h Handler) {
	if h == nil {
		panic(fmt.Sprintf("dispatch: Mux.Handle: nil handler for task queue %q", taskQueue))
	}
	if err := (backpressure.Route{Namespace: "-", TaskQueue: taskQueue}).Validate(); err != nil {
		var re *backpressure.RouteError
		reason := err.Error()
		if errors.As(err, &re) {
			reason = re.Reason
		}
		panic(fmt.Sprintf("dispatch: Mux.Handle: task queue %q %s", taskQueue, reason))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.handlers[taskQueue]; ok {
		panic(fmt.Sprintf("dispatch: Mux.Handle: task queue %q registered twice", taskQueue))
	}
	if m.handlers == nil {
		m.handlers = make(map[string]Handler)
	}
	m.handlers[taskQueue] = h
}

// Handler returns the handler registered for taskQueue, and whether there
// is one.
func (m *Mux) Handler(taskQueue string) (Handler, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.handlers[taskQueue]
	return h, ok
}

// HandleRow is a [Handler]: it runs the handler registered for
// row.TaskQueue and returns its result unchanged. For a task queue with no
// handler it returns Permanent(&NoHandlerError{…}), so the dispatcher
// dead-letters the row at once, kept with that error (requeue it with the
// store's Requeue once a handler exists). Dead-lettering makes a typo or a
// forgotten registration visible on the first row rather than after every
// retry. A service that rolls out a new task queue's producers before its
// handlers can retry such rows instead, by wrapping HandleRow:
//
//	func(ctx context.Context, row outbox.Row) error {
//		err := mux.HandleRow(ctx, row)
//		if errors.Is(err, dispatch.ErrNoHandler) {
//			return errors.Unwrap(err) // the *NoHandlerError, not permanent: retried with backoff
//		}
//		return err
//	}
func (m *Mux) HandleRow(ctx context.Context, row outbox.Row) error {
	h, ok := m.Handler(row.TaskQueue)
	if !ok {
		return Permanent(&NoHandlerError{Namespace: row.Namespace, TaskQueue: row.TaskQueue})
	}
	return h(ctx, row)
}
