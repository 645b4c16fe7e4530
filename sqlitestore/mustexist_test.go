package sqlitestore

import (
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// wantNotExist checks that err is an *outbox.NotExistError of kind and
// name, matching outbox.ErrNotExist and fs.ErrNotExist.
func wantNotExist(t *testing.T, step string, err error, kind, name string) {
	t.Helper()
	var ne *outbox.NotExistError
	if !errors.Is(err, outbox.ErrNotExist) || !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &ne) {
		t.Fatalf("%s: %v, want an *outbox.NotExistError", step, err)
	}
	if ne.Pkg != "sqlitestore" || ne.Kind != kind || ne.Name != name {
		t.Fatalf("%s: %+v, want sqlitestore, %s, %q", step, *ne, kind, name)
	}
}

// TestOpenMustExist: with Options.MustExist, Open of a file that does not
// exist, or of a SQLite database without the outbox (a zero-length file,
// another application's database), fails with an *outbox.NotExistError
// and creates nothing; an existing outbox opens, read-write or read-only.
func TestOpenMustExist(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	_, err := Open(ctx, missing, Options{MustExist: true})
	wantNotExist(t, "Open of a missing file", err, "file", missing)
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open with MustExist created the file: %v", err)
	}
	_, err = Open(ctx, missing, Options{MustExist: true, ReadOnly: true})
	wantNotExist(t, "read-only Open of a missing file", err, "file", missing)

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err = Open(ctx, empty, Options{MustExist: true, ReadOnly: ro})
		wantNotExist(t, "Open of a zero-length file", err, "outbox", empty)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Fatalf("Open with MustExist wrote to the empty file: %v, %v", fi, err)
	}

	path := newOutboxFile(t)
	for _, ro := range []bool{false, true} {
		s, err := Open(ctx, path, Options{MustExist: true, ReadOnly: ro})
		if err != nil {
			t.Fatalf("Open of an existing outbox (read-only %v) with MustExist: %v", ro, err)
		}
		if _, err := s.Get(ctx, "k"); err != nil {
			t.Errorf("Get on it: %v", err)
		}
		s.Close()
	}
	if _, err := Open(ctx, ":memory:", Options{MustExist: true}); err == nil {
		t.Errorf("Open(:memory:) with MustExist succeeded; an in-memory database never exists before")
	}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := New(ctx, db, Options{MustExist: true}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("New with MustExist = %v, want an *outbox.ArgumentError (Open only)", err)
	}
}
