package pgstore

import (
	"context"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
)

// ownObjects are the names of the relations the migrations create in the
// store's schema (tables, indexes, sequences), and schema_version, sorted.
var ownObjects = func() []string {
	re := regexp.MustCompile(`CREATE (?:UNIQUE )?(?:TABLE|INDEX|SEQUENCE|VIEW)(?: IF NOT EXISTS)? (?:\{schema\}\.)?([a-z_][a-z0-9_]*)`)
	names := []string{"schema_version"}
	for _, m := range migrations {
		for _, g := range re.FindAllStringSubmatch(m, -1) {
			names = append(names, g[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}()

// catalogQuerier is what checkForeign reads the catalog through: a pool or
// a transaction.
type catalogQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// foreignObjectsSQL lists the relations of schema $1 named in $2, in name
// order, with their kind.
const foreignObjectsSQL = `SELECT c.relname, c.relkind::text FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY($2) ORDER BY c.relname COLLATE "C"`

// ownVersionSQL says whether schema $1's schema_version is the store's: a
// version column, and at least one version recorded.
const ownVersionSQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
	JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = 'schema_version' AND a.attname = 'version' AND NOT a.attisdropped)`

// checkForeign returns an *outbox.ForeignSchemaError when schema holds a
// relation under a name the store creates but records no version of the
// store (no schema_version of its own with a version in it): a table of
// another program, over which a migration would fail or, worse, succeed.
// It returns nil for a schema without such names, or one the store made.
// migrate calls it under the advisory lock, before any DDL.
func checkForeign(ctx context.Context, q catalogQuerier, schema, quoted string) error {
	rows, err := q.Query(ctx, foreignObjectsSQL, schema, ownObjects)
	if err != nil {
		return err
	}
	type object struct{ name, kind string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (object, error) {
		var o object
		return o, r.Scan(&o.name, &o.kind)
	})
	if err != nil || len(found) == 0 {
		return err
	}
	if ours, err := ownVersion(ctx, q, schema, quoted, slices.ContainsFunc(found, func(o object) bool { return o.name == "schema_version" })); err != nil || ours {
		return err
	}
	return &outbox.ForeignSchemaError{Pkg: "pgstore", In: "schema", Where: schema, Kind: relkindName(found[0].kind), Object: found[0].name}
}

// ownVersion reports whether schema's schema_version (when has) is the
// store's and records a version.
func ownVersion(ctx context.Context, q catalogQuerier, schema, quoted string, has bool) (bool, error) {
	if !has {
		return false, nil
	}
	var column bool
	if err := q.QueryRow(ctx, ownVersionSQL, schema).Scan(&column); err != nil || !column {
		return false, err
	}
	var version int
	err := q.QueryRow(ctx, expand(quoted, `SELECT coalesce(max(version), 0) FROM {schema}.schema_version`)).Scan(&version)
	return version > 0, err
}

// relkindName names a pg_class.relkind.
func relkindName(kind string) string {
	switch kind {
	case "r", "p":
		return "table"
	case "i", "I":
		return "index"
	case "S":
		return "sequence"
	case "v":
		return "view"
	case "m":
		return "materialized view"
	case "f":
		return "foreign table"
	case "c":
		return "composite type"
	}
	return "relation"
}
