package sqlitestore_test

import (
	"testing"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// TestLiveness runs dispatchtest's liveness checks on SQLite in memory: a
// dispatcher with a 1h poll sweeps again when results free a capped
// namespace's headroom.
func TestLiveness(t *testing.T) {
	dispatchtest.Liveness{Open: func(t *testing.T) outbox.Store {
		s, err := sqlitestore.Open(t.Context(), ":memory:", sqlitestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
