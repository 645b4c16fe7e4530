package sqlitestore

import (
	"errors"
	"fmt"

	check "github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
	"modernc.org/sqlite"
)

// ErrReadOnly reports a write (Enqueue, a claim, a completion, a purge …)
// on a store opened with Options.ReadOnly. The call changed nothing.
var ErrReadOnly = errors.New("sqlitestore: store is read-only")

// ErrDatabaseFile reports a database file SQLite cannot use as asked: it
// cannot be opened or created, is read-only (its permissions, or a
// read-only file system) for a read-write store, is not a SQLite database,
// is corrupt, or its disk is full or failing. The typed error is
// *[FileError], with the path. Open returns it for the file it was given,
// and every method for a file that becomes so while the store is open; a
// write that fails so changed nothing.
var ErrDatabaseFile = errors.New("sqlitestore: database file unusable")

// FileError is the detail of [ErrDatabaseFile].
type FileError struct {
	Path string // the database file; "" for an in-memory database
	Code int    // SQLite's extended result code, e.g. 8 (SQLITE_READONLY), 11 (SQLITE_CORRUPT), 26 (SQLITE_NOTADB)
	Err  error  // SQLite's error
}

// Error names the file, what is wrong with it, and SQLite's own message.
func (e *FileError) Error() string {
	return fmt.Sprintf("sqlitestore: database file %q %s: %v", e.Path, fileReason(e.Code), e.Err)
}

// Is reports whether target is [ErrDatabaseFile].
func (e *FileError) Is(target error) bool { return target == ErrDatabaseFile }

// Unwrap returns Err.
func (e *FileError) Unwrap() error { return e.Err }

// SQLite's primary result codes that are about the file itself.
const (
	sqlitePerm     = 3
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteCorrupt  = 11
	sqliteFull     = 13
	sqliteCantOpen = 14
	sqliteNotADB   = 26
)

func fileReason(code int) string {
	switch code & 0xff {
	case sqlitePerm:
		return "is not accessible"
	case sqliteReadOnly:
		return "is read-only"
	case sqliteIOErr:
		return "could not be read or written"
	case sqliteCorrupt:
		return "is corrupt"
	case sqliteFull:
		return "is on a full disk"
	case sqliteCantOpen:
		return "cannot be opened"
	case sqliteNotADB:
		return "is not a SQLite database"
	}
	return "is unusable"
}

// fileError returns err as a *FileError of path when SQLite's code says
// the file itself is at fault, or nil.
func fileError(path string, err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() & 0xff {
	case sqlitePerm, sqliteReadOnly, sqliteIOErr, sqliteCorrupt, sqliteFull, sqliteCantOpen, sqliteNotADB:
		return &FileError{Path: path, Code: se.Code(), Err: err}
	}
	return nil
}

// ErrSweepTxDone is returned by the view InSweepTx passes to its fn when it
// is used after fn returned.
var ErrSweepTxDone = errors.New("sqlitestore: sweep transaction view used after its fn returned")

// argError builds the *outbox.ArgumentError of op for arg.
func argError(op, arg, reason string) error {
	return call(op).Arg(arg, reason)
}

// call names op of this package in the errors internal/validate returns.
func call(op string) check.Call { return check.Call{Pkg: "sqlitestore", Op: op} }

// fail wraps err, an error of the store method op, for its caller: nil
// stays nil; the outbox package's typed errors and ctx's errors pass as
// they are; an error that came from a store closed under the call becomes
// outbox.ErrClosed; anything else (the database's) is prefixed with the
// package and the method.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if s != nil && s.closed.Load() && !errors.Is(err, outbox.ErrClosed) {
		return fmt.Errorf("sqlitestore: %s: %w (%v)", op, outbox.ErrClosed, err)
	}
	if fe := fileError(s.pathOf(), err); fe != nil {
		return fmt.Errorf("sqlitestore: %s: %w", op, fe)
	}
	var (
		file  *FileError
		lost  *outbox.LeaseLostError
		arg   *outbox.ArgumentError
		msg   *outbox.MessageError
		shard *outbox.ShardCountError
		ver   *outbox.SchemaVersionError
	)
	switch {
	case errors.As(err, &file), errors.As(err, &lost), errors.As(err, &arg), errors.As(err, &msg), errors.As(err, &shard), errors.As(err, &ver),
		errors.Is(err, outbox.ErrClosed), errors.Is(err, outbox.ErrNotFound), errors.Is(err, ErrReadOnly),
		errors.Is(err, ErrSweepTxDone):
		return err
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// openError prefixes an error of Open or New, leaving the outbox
// package's typed errors as they are, and typing SQLite's errors about
// the file (path) itself as a *FileError.
func openError(what string, err error) error {
	if fe := fileError(what, err); fe != nil {
		return fe
	}
	var (
		file    *FileError
		arg     *outbox.ArgumentError
		shard   *outbox.ShardCountError
		ver     *outbox.SchemaVersionError
		foreign *outbox.ForeignSchemaError
	)
	if errors.As(err, &file) || errors.As(err, &arg) || errors.As(err, &shard) || errors.As(err, &ver) || errors.As(err, &foreign) {
		return err
	}
	return fmt.Errorf("sqlitestore: open %q: %w", what, err)
}

// pathOf returns the store's file, "" for a nil store or in memory.
func (s *Store) pathOf() string {
	if s == nil {
		return ""
	}
	return s.path
}
