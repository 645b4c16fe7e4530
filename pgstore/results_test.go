package pgstore_test

import (
	"testing"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestResults runs dispatchtest's handler-result checks (snooze and its
// bound, cancel, retry at a time, a retry policy per task queue) on
// PostgreSQL.
func TestResults(t *testing.T) {
	dispatchtest.Results{Open: func(t *testing.T) outbox.Store {
		s, err := pgstore.New(t.Context(), newPool(t, &tracer{}, 8), pgstore.Options{Schema: testSchema(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
