package sqlitestore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the storetest suite on a file database, on a file
// database whose store keeps its counts (Options.RecountInterval, off by
// default, so that the suite checks the kept counts' answers too), and on
// an in-memory one. The store implements outbox.Store, so the harness needs
// only the store, its clock, the round-trip counter and the fault hook,
// plus an Inspect for the columns Get does not show.
//
// The in-memory database runs the same SQL on its one connection; the
// checks of random states against a reference (longChecks), the suite's
// longest, run on the plain file alone unless BACKPRESSURE_LONG=1 (make
// test-long), to keep make test short. Every other check of those areas
// runs in memory and with kept counts too (TestKeptCountsMatchFullCounts
// checks the kept counts against full counts on random histories).
func TestConformance(t *testing.T) {
	for _, kind := range []string{"File", "FileKept", "Memory"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each its own database: the in-memory run overlaps the file's longer one
			storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
				path, opts := ":memory:", Options{SyncNormal: true}
				if kind == "FileKept" {
					opts.RecountInterval = time.Second
				}
				if kind != "Memory" {
					path = filepath.Join(t.TempDir(), "outbox.db")
				}
				if check := longCheck(t.Name()); kind != "File" && check != "" && os.Getenv("BACKPRESSURE_LONG") != "1" {
					t.Skipf("%s runs on the plain file database; BACKPRESSURE_LONG=1 (make test-long) runs it on %s too", check, kind)
				}
				return newHarness(t, path, opts)
			})
		})
	}
}

// longChecks are the storetest checks of random states against a
// reference (rapid properties) that the in-memory and kept-count variants
// run only under BACKPRESSURE_LONG=1: each names an area's check, and
// covers the checks whose names it begins (MatchesCountedSweeps and
// MatchesCountedSweepsInTx).
var longChecks = []string{"WindowClaim/MatchesCountedSweeps", "Operate/NamespacesMatchReference"}

// longCheck returns the entry of longChecks the test named name
// (TestConformance/<variant>/<area>/<check>) is in, or "".
func longCheck(name string) string {
	parts := strings.SplitN(name, "/", 3)
	if len(parts) < 3 {
		return ""
	}
	for _, c := range longChecks {
		if strings.HasPrefix(parts[2], c) {
			return c
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
		RawSettings: func(ctx context.Context, bodies map[string]string) error {
			return rawSettings(ctx, s, clock.Now(), bodies)
		},
		RawNodeReport: func(ctx context.Context, node, body string, ttl time.Duration) error {
			return rawNodeReport(ctx, s, clock.Now(), node, body, ttl)
		},
		ErrorPrefix: "sqlitestore",
	}
}

// rawSettings writes settings rows with bodies verbatim, past
// PutSettings' checks, as an operator's SQL would: one transaction, one
// new version for them all.
func rawSettings(ctx context.Context, s *Store, now time.Time, bodies map[string]string) error {
	arg, err := json.Marshal(bodies)
	if err != nil {
		return err
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var v int64
	if err := tx.QueryRowContext(ctx, `UPDATE outbox_meta SET value = value + 1 WHERE key = 'settings_version' RETURNING value`).Scan(&v); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `
INSERT INTO namespace_settings (namespace, body, version, updated_at) SELECT key, value, ?2, ?3 FROM json_each(?1) WHERE true
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body, version = excluded.version, updated_at = excluded.updated_at`,
		string(arg), v, nanos(now)); err != nil {
		return err
	}
	return tx.Commit()
}

// rawNodeReport writes node's report row with body verbatim, live for
// ttl from now.
func rawNodeReport(ctx context.Context, s *Store, now time.Time, node, body string, ttl time.Duration) error {
	_, err := s.writer.ExecContext(ctx, `
INSERT INTO node_reports (node, body, reported_at, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (node) DO UPDATE SET body = excluded.body, reported_at = excluded.reported_at, expires_at = excluded.expires_at`,
		node, body, nanos(now), nanos(now.Add(ttl)))
	return err
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
