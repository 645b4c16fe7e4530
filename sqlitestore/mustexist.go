package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"

	"github.com/outboxkit/backpressure/outbox"
)

// mustExist is Open's check for Options.MustExist, before it opens the
// file its own way: the file at path exists and holds the outbox
// (outbox_meta records a schema version). It reads through a connection
// of its own, opened mode=ro (dsn is Open's URI file name, without
// parameters), so it neither creates the file nor writes to it. A missing
// file or outbox is an *outbox.NotExistError; a file SQLite cannot read is
// a *FileError.
func mustExist(ctx context.Context, path, dsn string) error {
	if path == ":memory:" {
		return argError("Open", "Options.MustExist", "a private in-memory database never exists before Open")
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return &outbox.NotExistError{Pkg: "sqlitestore", Kind: "file", Name: path}
	}
	db, err := sql.Open("sqlite", dsn+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return openError(path, err)
	}
	defer db.Close()
	m, err := readMeta(ctx, db)
	if err != nil {
		return openError(path, err)
	}
	if m.version == 0 {
		return &outbox.NotExistError{Pkg: "sqlitestore", Kind: "outbox", Name: path}
	}
	return nil
}
