package sqlitestore_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
	_ "modernc.org/sqlite"
)

// TestSchemaSQL applies SchemaSQL's script to an empty file by hand, then
// checks that a read-only Open (which cannot migrate) accepts it and that a
// store on it works.
func TestSchemaSQL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	script, err := sqlitestore.SchemaSQL(16)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(script); err != nil {
		t.Fatalf("applying SchemaSQL: %v\n%s", err, script)
	}
	db.Close()
	ro, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open of the scripted database: %v", err)
	}
	ro.Close()
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ShardCount() != 16 {
		t.Errorf("ShardCount = %d, want 16", s.ShardCount())
	}
	if n, err := s.Enqueue(t.Context(), []outbox.Message{{DispatchKey: "k", Namespace: "a", TaskQueue: "q", Payload: []byte("x")}}); n != 1 || err != nil {
		t.Errorf("Enqueue = %d, %v", n, err)
	}
}
