package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// wantFileError checks that err is a *FileError of path with SQLite's
// primary result code, matching ErrDatabaseFile, with the path in its text.
func wantFileError(t *testing.T, step string, err error, path string, code int) {
	t.Helper()
	var fe *FileError
	if !errors.Is(err, ErrDatabaseFile) || !errors.As(err, &fe) {
		t.Fatalf("%s: %v, want a *FileError matching ErrDatabaseFile", step, err)
	}
	if fe.Path != path || fe.Code&0xff != code || !strings.Contains(err.Error(), path) {
		t.Fatalf("%s: FileError{Path: %q, Code: %d} (%v), want path %q, code %d", step, fe.Path, fe.Code, err, path, code)
	}
}

// newOutboxFile creates an outbox database at a fresh path with one row,
// closed, and returns the path.
func newOutboxFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(t.Context(), []outbox.Message{{DispatchKey: "k", Namespace: "n"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpenFileErrors: files SQLite cannot use come back from Open as a
// typed *FileError with the path: not a database, corrupt, missing for a
// read-only Open; and a zero-length file is the empty database SQLite has
// it be (an outbox is created in it read-write; read-only it holds none).
func TestOpenFileErrors(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()

	notDB := filepath.Join(dir, "not-a-db")
	if err := os.WriteFile(notDB, bytes.Repeat([]byte("this is not a SQLite database. "), 200), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(ctx, notDB, Options{ReadOnly: ro})
		wantFileError(t, "Open of a text file", err, notDB, sqliteNotADB)
	}

	missing := filepath.Join(dir, "missing.db")
	_, err := Open(ctx, missing, Options{ReadOnly: true})
	wantFileError(t, "read-only Open of a missing file", err, missing, sqliteCantOpen)
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only Open created %s (%v)", missing, err)
	}

	// Corrupt: every page after the first (the header and the schema)
	// overwritten. Open reads the tables, so it finds out.
	corrupt := newOutboxFile(t)
	b, err := os.ReadFile(corrupt)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if len(b) <= page {
		t.Fatalf("outbox file is %d bytes, want more than a page", len(b))
	}
	for i := page; i < len(b); i++ {
		b[i] = 0xA5
	}
	if err := os.WriteFile(corrupt, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, corrupt, Options{})
	if err == nil { // the schema page was intact: the first read of a row finds it
		defer s.Close()
		_, err = s.Get(ctx, "k")
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Fatalf("Get on a corrupt file = %v, want a *FileError", err)
		}
		err = fe
	}
	wantFileError(t, "corrupt file", err, corrupt, sqliteCorrupt)

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, empty, Options{ReadOnly: true}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("read-only Open of a zero-length file = %v, want ErrInvalidArgument (no outbox)", err)
	}
	s = openT(t, empty, Options{})
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "n"}}); err != nil {
		t.Errorf("Enqueue into the outbox created in a zero-length file: %v", err)
	}
}

// TestReadOnlyFileErrors: a database file opened read-only by the
// application (mode=ro), given to New, is refused as a *FileError when New
// must write (to create the outbox), and when current is read but every
// write fails typed, with the path, changing nothing.
func TestReadOnlyFileErrors(t *testing.T) {
	ctx := t.Context()
	roDB := func(path string) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}

	path := newOutboxFile(t)
	s, err := New(ctx, roDB(path), Options{})
	if err != nil {
		t.Fatalf("New on a current outbox opened read-only: %v", err)
	}
	defer s.Close()
	_, err = s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k2", Namespace: "n"}})
	wantFileError(t, "Enqueue on a read-only file", err, path, sqliteReadOnly)
	if r, err := s.Get(ctx, "k"); err != nil || r.State != outbox.StatePending {
		t.Errorf("Get(k) on the read-only file = %+v, %v; want the pending row", r, err)
	}
	if _, err := s.Get(ctx, "k2"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get(k2) = %v, want ErrNotFound: the failed Enqueue wrote nothing", err)
	}

	// An empty database opened read-only: New must create the outbox.
	empty := filepath.Join(t.TempDir(), "empty.db")
	db, err := sql.Open("sqlite", "file:"+empty+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE app (x)"); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	_, err = New(ctx, roDB(empty), Options{})
	wantFileError(t, "New on a read-only file without an outbox", err, empty, sqliteReadOnly)
}

// TestDispatchRefusesNilStore: a nil *Store in the dispatcher's Store
// interface is refused by dispatch.New, typed, rather than accepted and run
// doing nothing.
func TestDispatchRefusesNilStore(t *testing.T) {
	all, err := backpressure.AllShards(64)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 10}, all)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(bp, (*Store)(nil), func(context.Context, outbox.Row) error { return nil }, dispatch.Options{Workers: 1})
	var oe *dispatch.OptionError
	if d != nil || !errors.Is(err, dispatch.ErrInvalidOptions) || !errors.As(err, &oe) || oe.Field != "store" {
		t.Fatalf("dispatch.New with a nil *sqlitestore.Store = %v, %v; want an *OptionError on store", d, err)
	}
}
