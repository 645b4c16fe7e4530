package sqlitestore

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// TestOpenOnForeignObjects: a SQLite file that holds its own table (or
// index) under a name the store creates, and no schema version of the
// store, is refused by Open (read-write and read-only) and New with an
// *outbox.ForeignSchemaError (matching outbox.ErrForeignSchema) naming the
// file and the object, not the raw "table outbox already exists" of a
// migration; the file's own tables and rows are left as they were (issue
// 29, item 11).
func TestOpenOnForeignObjects(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name, ddl, kind, object string
	}{
		{"outbox table", "CREATE TABLE outbox (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO outbox VALUES (1, 'mine')", "table", "outbox"},
		{"node_reports table", "CREATE TABLE node_reports (node TEXT)", "table", "node_reports"},
		{"index", "CREATE TABLE app (x); CREATE INDEX outbox_dead ON app (x)", "index", "outbox_dead"},
		{"outbox_meta of another program", "CREATE TABLE outbox_meta (name TEXT, n INTEGER)", "table", "outbox_meta"},
		{"outbox_meta without a version", "CREATE TABLE outbox_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL); CREATE TABLE outbox (id)", "table", "outbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "app.db")
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(ctx, tc.ddl); err != nil {
				t.Fatal(err)
			}
			before := schemaOf(t, db)
			check := func(step string, s *Store, err error) {
				t.Helper()
				var fe *outbox.ForeignSchemaError
				if s != nil || !errors.Is(err, outbox.ErrForeignSchema) || !errors.As(err, &fe) {
					t.Fatalf("%s on a file with a foreign %s = %v, %v; want an *outbox.ForeignSchemaError", step, tc.object, s, err)
				}
				if fe.Pkg != "sqlitestore" || fe.In != "file" || fe.Where != path || fe.Kind != tc.kind || fe.Object != tc.object {
					t.Errorf("%s: ForeignSchemaError = %+v, want sqlitestore, file %s, %s %s", step, *fe, path, tc.kind, tc.object)
				}
				if after := schemaOf(t, db); after != before {
					t.Errorf("%s changed the file's schema:\n%s\nwant\n%s", step, after, before)
				}
			}
			s, err := Open(ctx, path, Options{})
			check("Open", s, err)
			s, err = Open(ctx, path, Options{ReadOnly: true})
			check("read-only Open", s, err)
			s, err = New(ctx, db, Options{})
			check("New", s, err)
		})
	}
}

// schemaOf returns the SQL of every object in db's schema, in name order.
func schemaOf(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT name, coalesce(sql, '') FROM sqlite_master ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out string
	for rows.Next() {
		var name, q string
		if err := rows.Scan(&name, &q); err != nil {
			t.Fatal(err)
		}
		out += name + ": " + q + "\n"
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
