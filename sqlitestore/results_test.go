package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// TestResults runs dispatchtest's handler-result checks (snooze and its
// bound, cancel, retry at a time, a retry policy per task queue) on a
// SQLite file.
func TestResults(t *testing.T) {
	dispatchtest.Results{Open: func(t *testing.T) outbox.Store {
		s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"), sqlitestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
