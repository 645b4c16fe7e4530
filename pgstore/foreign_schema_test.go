package pgstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestNewOnForeignObjects: a schema that holds a table (or index, or
// sequence) under a name the store creates, and no schema version of the
// store, is refused with an *outbox.ForeignSchemaError (matching
// outbox.ErrForeignSchema) naming the schema and the object, not the raw
// "relation already exists" of a migration; the foreign objects and their
// rows are left as they were (issue 29, item 11).
func TestNewOnForeignObjects(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name, ddl, kind, object string
	}{
		{"outbox table", "CREATE TABLE {s}.outbox (id bigint PRIMARY KEY, body text); INSERT INTO {s}.outbox VALUES (1, 'mine')", "table", "outbox"},
		{"node_reports table", "CREATE TABLE {s}.node_reports (node text); INSERT INTO {s}.node_reports VALUES ('mine')", "table", "node_reports"},
		{"sequence", "CREATE SEQUENCE {s}.claim_token_seq", "sequence", "claim_token_seq"},
		{"schema_version of another tool", "CREATE TABLE {s}.schema_version (applied text); CREATE TABLE {s}.outbox (id bigint)", "table", "outbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := testSchema(t)
			q := pgx.Identifier{schema}.Sanitize()
			if _, err := adminPool.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
				t.Fatal(err)
			}
			if _, err := adminPool.Exec(ctx, strings.ReplaceAll(tc.ddl, "{s}", q)); err != nil {
				t.Fatal(err)
			}
			s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema})
			var fe *outbox.ForeignSchemaError
			if s != nil || !errors.Is(err, outbox.ErrForeignSchema) || !errors.As(err, &fe) {
				t.Fatalf("New on a schema with a foreign %s = %v, %v; want an *outbox.ForeignSchemaError", tc.object, s, err)
			}
			if fe.Pkg != "pgstore" || fe.In != "schema" || fe.Where != schema || fe.Kind != tc.kind || fe.Object != tc.object {
				t.Errorf("ForeignSchemaError = %+v, want pgstore, schema %s, %s %s", *fe, schema, tc.kind, tc.object)
			}
			var n int
			if err := adminPool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = 'settings'`, schema).Scan(&n); err != nil || n != 0 {
				t.Errorf("the refused New left %d settings tables (%v), want none: it must change nothing", n, err)
			}
		})
	}
}
