package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
)

// TestCrash runs a dispatcher in a child process on a SQLite file and
// SIGKILLs it repeatedly while rows arrive: every row is settled exactly
// once, none lost. The parent enqueues while a child dispatches on the same
// file, so each waits for the other's write transactions: the busy timeout
// is 30 s rather than the default 5 s, which a -race run on a loaded CI
// machine once passed (the parent's Enqueue failed with SQLITE_BUSY).
func TestCrash(t *testing.T) {
	dispatchtest.Crash{
		Open: func(ctx context.Context, dir string) (outbox.Store, error) {
			return Open(ctx, filepath.Join(dir, "outbox.db"), Options{Lease: time.Second, BusyTimeout: 30 * time.Second})
		},
	}.Run(t)
}
