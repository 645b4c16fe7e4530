package sqlitestore_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// TestSharedRate runs dispatchtest.SharedRate on a SQLite file, each of
// the three nodes on a handle of its own: a rate set through the settings
// API reaches each node at its first settings poll after the write, and
// the cluster-wide bound holds after it.
func TestSharedRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	dispatchtest.SharedRate{Open: func(t *testing.T) dispatchtest.SettingsStore {
		s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
