package pgstore_test

import (
	"testing"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestLiveness runs dispatchtest's liveness checks on PostgreSQL: a
// dispatcher with a 1h poll sweeps again when results free a capped
// namespace's headroom.
func TestLiveness(t *testing.T) {
	dispatchtest.Liveness{Open: func(t *testing.T) outbox.Store {
		s, err := pgstore.New(t.Context(), newPool(t, &tracer{}, 8), pgstore.Options{Schema: testSchema(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
