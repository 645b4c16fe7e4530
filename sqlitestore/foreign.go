package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"regexp"
	"slices"

	"github.com/outboxkit/backpressure/outbox"
)

// ownObjects are the names of the tables and indexes the migrations
// create, and outbox_meta, sorted.
var ownObjects = func() []string {
	re := regexp.MustCompile(`CREATE (?:UNIQUE )?(?:TABLE|INDEX|VIEW|TRIGGER)(?: IF NOT EXISTS)? ([a-z_][a-z0-9_]*)`)
	names := []string{"outbox_meta"}
	for _, m := range migrations {
		for _, g := range re.FindAllStringSubmatch(m, -1) {
			names = append(names, g[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}()

// ownObjectsJSON is ownObjects as a JSON array, for json_each.
var ownObjectsJSON = func() string {
	b, err := json.Marshal(ownObjects)
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// catalogQuerier is what checkForeign reads the schema through: a *sql.DB
// or the migration's *sql.Conn.
type catalogQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkForeign returns an *outbox.ForeignSchemaError of the file at path
// when q's database holds a table or index under a name the store creates
// but records no schema version of the store (outbox_meta of its own, with
// a schema_version): another program's objects, over which a migration
// would fail. It returns nil for a database without such names, or one the
// store made. migrate calls it under the write lock, before any DDL.
func checkForeign(ctx context.Context, q catalogQuerier, path string) error {
	rows, err := q.QueryContext(ctx, `SELECT name, type FROM sqlite_master WHERE name IN (SELECT value FROM json_each(?1)) ORDER BY name`, ownObjectsJSON)
	if err != nil {
		return err
	}
	defer rows.Close()
	var names, kinds []string
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			return err
		}
		names, kinds = append(names, name), append(kinds, kind)
	}
	if err := rows.Err(); err != nil || len(names) == 0 {
		return err
	}
	if ours, err := ownVersion(ctx, q, slices.Contains(names, "outbox_meta")); err != nil || ours {
		return err
	}
	return &outbox.ForeignSchemaError{Pkg: "sqlitestore", In: "file", Where: path, Kind: kinds[0], Object: names[0]}
}

// ownVersion reports whether the database's outbox_meta (when has) is the
// store's, a key and a value column, and records a schema version.
func ownVersion(ctx context.Context, q catalogQuerier, has bool) (bool, error) {
	if !has {
		return false, nil
	}
	var columns int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('outbox_meta') WHERE name IN ('key', 'value')`).Scan(&columns); err != nil || columns != 2 {
		return false, err
	}
	var version int64
	err := q.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'schema_version'`).Scan(&version)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return version > 0, err
}

// foreignOr returns checkForeign's error for the store's database when it
// finds foreign objects (or cannot look), else err: for a schema that could
// not be read, or holds no outbox, the foreign objects are the reason.
func (s *Store) foreignOr(ctx context.Context, q catalogQuerier, err error) error {
	var fe *outbox.ForeignSchemaError
	if ferr := checkForeign(ctx, q, s.pathOf()); errors.As(ferr, &fe) {
		return ferr
	}
	return err
}
