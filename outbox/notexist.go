package outbox

import (
	"errors"
	"io/fs"
	"strconv"
)

// ErrNotExist reports a store opened in its must-exist mode
// (sqlitestore.Options.MustExist, pgstore.Options.MustExist) whose
// database file, schema or outbox tables do not exist. The open created
// nothing. [*NotExistError] carries the details; it also matches
// [fs.ErrNotExist].
var ErrNotExist = errors.New("outbox: store does not exist")

// NotExistError is the detail of [ErrNotExist]: what is missing.
type NotExistError struct {
	Pkg  string // the store package, e.g. "sqlitestore"; "" reads "outbox"
	Kind string // what is missing: "file", "schema", or "outbox" (the file or schema exists without the outbox's tables)
	Name string // the file's path or the schema's name
}

// Error reads, e.g., `sqlitestore: file "x.db" does not exist` or
// `pgstore: schema "ops" holds no outbox`.
func (e *NotExistError) Error() string {
	if e.Kind == "outbox" {
		return prefix(e.Pkg, "") + strconv.Quote(e.Name) + " holds no outbox"
	}
	return prefix(e.Pkg, "") + e.Kind + " " + strconv.Quote(e.Name) + " does not exist"
}

// Is reports whether target is [ErrNotExist] or [fs.ErrNotExist].
func (e *NotExistError) Is(target error) bool {
	return target == ErrNotExist || target == fs.ErrNotExist
}
