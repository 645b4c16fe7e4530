package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/outboxkit/backpressure/outbox"
)

// PayloadError is what a handler built by [JSON] returns, wrapped by
// [Permanent], for a row whose payload does not decode as the handler's
// type: the row is dead-lettered with this error as its last error.
// errors.As finds the decoder's own error through it (a *json.SyntaxError,
// a *json.UnmarshalTypeError, …).
type PayloadError struct {
	Type string // the Go type the payload was decoded into, e.g. "main.OrderPlaced"
	Err  error  // encoding/json's error
}

// Error names the type and the decoder's error.
func (e *PayloadError) Error() string {
	return fmt.Sprintf("dispatch: payload does not decode as JSON into %s: %v", e.Type, e.Err)
}

// Unwrap returns Err.
func (e *PayloadError) Unwrap() error { return e.Err }

// JSON returns a [Handler] that decodes each row's payload as JSON into a
// fresh T (with encoding/json's json.Unmarshal: unknown fields are ignored,
// so producers may add fields before consumers know them) and calls h with
// it, returning h's result unchanged. A payload that does not decode (an
// empty payload included; the JSON null leaves T's zero value and is not an
// error) is dead-lettered without calling h: the handler returns
// Permanent(&PayloadError{…}), since retrying the same bytes cannot help.
// JSON panics if h is nil, like [Mux.Handle]: a handler is programmer's
// work done at start-up.
func JSON[T any](h func(ctx context.Context, row outbox.Row, v T) error) Handler {
	if h == nil {
		panic("dispatch: JSON: nil handler")
	}
	return func(ctx context.Context, row outbox.Row) error {
		var v T
		if err := json.Unmarshal(row.Payload, &v); err != nil {
			return Permanent(&PayloadError{Type: reflect.TypeFor[T]().String(), Err: err})
		}
		return h(ctx, row, v)
	}
}
