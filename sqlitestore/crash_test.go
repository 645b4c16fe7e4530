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
// once, none lost.
func TestCrash(t *testing.T) {
	dispatchtest.Crash{
		Open: func(ctx context.Context, dir string) (outbox.Store, error) {
			return Open(ctx, filepath.Join(dir, "outbox.db"), Options{Lease: time.Second})
		},
	}.Run(t)
}
