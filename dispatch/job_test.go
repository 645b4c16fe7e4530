package dispatch_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// otherEmail names the same task queue as sendEmail.
type otherEmail struct{}

func (otherEmail) TaskQueue() string { return "emails" }

func TestHandleRoutesByTheTypesTaskQueue(t *testing.T) {
	var mux dispatch.Mux
	var got sendEmail
	dispatch.Handle(&mux, func(ctx context.Context, row outbox.Row, e sendEmail) error { got = e; return nil })
	msg, err := outbox.NewMessage("acme", "k", sendEmail{To: "bo@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	row := outbox.Row{DispatchKey: msg.DispatchKey, Namespace: msg.Namespace, TaskQueue: msg.TaskQueue, Payload: msg.Payload}
	if err := mux.HandleRow(t.Context(), row); err != nil || got.To != "bo@example.com" {
		t.Fatalf("HandleRow = %v, handler got %+v; want nil and To bo@example.com", err, got)
	}
	row.Payload = []byte("{")
	var pe *dispatch.PayloadError
	if err := mux.HandleRow(t.Context(), row); !errors.As(err, &pe) {
		t.Errorf("HandleRow(bad payload) = %v, want a *PayloadError", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
			t.Errorf("a second job type on task queue emails: recover() = %v, want a panic naming it registered twice", r)
		}
	}()
	dispatch.Handle(&mux, func(context.Context, outbox.Row, otherEmail) error { return nil })
}
