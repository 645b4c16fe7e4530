package outbox

import (
	"errors"
	"fmt"
)

// ErrForeignSchema reports a database (a SQLite file, a PostgreSQL
// schema) that holds a table, index or sequence under a name the store
// creates, but no schema version of the store: the object was made by
// something else, and the store will not migrate over it. The store changed
// nothing. Give the store another file or schema, or rename the object.
// The typed error is *[ForeignSchemaError]; every store returns it from
// the call that opens it.
var ErrForeignSchema = errors.New("outbox: foreign object where the store's schema goes")

// ForeignSchemaError is the detail of [ErrForeignSchema].
type ForeignSchemaError struct {
	Pkg    string // the store's package, e.g. "sqlitestore"; "" reads "outbox"
	In     string // what Where is: "file" or "schema"
	Where  string // the database file, or the PostgreSQL schema
	Kind   string // what the object is: "table", "index", "sequence", "view", …
	Object string // its name, e.g. "outbox": the first such object in name order
}

// Error names the place, the object and what to do.
func (e *ForeignSchemaError) Error() string {
	pkg := e.Pkg
	if pkg == "" {
		pkg = "outbox"
	}
	return fmt.Sprintf("%s: %s %q holds a %s %q that is not this library's (no schema version of the store is recorded there): "+
		"give the store another %s, or rename the %s", pkg, e.In, e.Where, e.Kind, e.Object, e.In, e.Kind)
}

// Is reports whether target is [ErrForeignSchema].
func (e *ForeignSchemaError) Is(target error) bool { return target == ErrForeignSchema }
