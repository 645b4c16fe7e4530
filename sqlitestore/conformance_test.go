package sqlitestore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the storetest suite on a file database and on an
// in-memory one. The store implements outbox.Store, so the harness needs
// only the store, its clock, the round-trip counter and the fault hook,
// plus an Inspect for the columns Get does not show.
//
// The in-memory database runs the same SQL on its one connection; the
// areas that only compare the store's SQL with a reference on random
// states (memoryLongAreas) run on the file alone unless
// BACKPRESSURE_LONG=1 (make test-long), to keep make test short.
func TestConformance(t *testing.T) {
	for _, kind := range []string{"File", "Memory"} {
		t.Run(kind, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
				path := ":memory:"
				if kind == "File" {
					path = filepath.Join(t.TempDir(), "outbox.db")
				} else if area := memoryLongArea(t.Name()); area != "" && os.Getenv("BACKPRESSURE_LONG") != "1" {
					t.Skipf("%s runs on the file database; BACKPRESSURE_LONG=1 (make test-long) runs it in memory too", area)
				}
				return newHarness(t, path, Options{SyncNormal: true})
			})
		})
	}
}

// memoryLongAreas are the storetest areas of random states against a
// reference, the suite's longest, that the in-memory variant runs only
// under BACKPRESSURE_LONG=1.
var memoryLongAreas = []string{"WindowClaim", "Operate", "SweepTx"}

// memoryLongArea returns the area of memoryLongAreas the test named name
// (TestConformance/Memory/<area>/...) is in, or "".
func memoryLongArea(name string) string {
	for _, a := range memoryLongAreas {
		if strings.HasPrefix(name, "TestConformance/Memory/"+a+"/") || name == "TestConformance/Memory/"+a {
			return a
		}
	}
	return ""
}

// newHarness opens a store at path with a manual clock and adapts it to
// storetest.
func newHarness(t *testing.T, path string, opts Options) *storetest.Harness[outbox.Row] {
	t.Helper()
	clock := storetest.NewClock()
	opts.Now = clock.Now
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &storetest.Harness[outbox.Row]{
		Outbox:      s,
		MaxAttempts: opts.MaxAttempts, // 0: outbox.DefaultMaxAttempts
		Inspect:     func(ctx context.Context, key string) (storetest.RowState, error) { return inspect(ctx, s, key) },
		Now:         clock.Now,
		Advance:     clock.Advance,
		RoundTrips:  s.roundTrips,
		FailNth:     func(n int) { s.failNth.Store(int64(n)) },
		ErrorPrefix: "sqlitestore",
	}
}

// inspect reads every column of a row, including the one Get does not
// show (ready_at, the claim index's ordering key), without counting a round
// trip or taking a FailNth step.
func inspect(ctx context.Context, s *Store, key string) (storetest.RowState, error) {
	var ready int64
	r, err := scanRow(func(dest ...any) error {
		return s.reader.QueryRowContext(ctx, `SELECT `+rowColumns+`, ready_at FROM outbox WHERE dispatch_key = ?`, key).
			Scan(append(dest, &ready)...)
	})
	if err != nil {
		return storetest.RowState{}, err
	}
	return storetest.RowState{Row: r, Extra: ready}, nil
}
