package pgstore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestSchemaSQL applies SchemaSQL's script by hand, then checks that New
// finds the schema current (it would fail without CREATE privilege
// otherwise, and records no second version) and that the store works.
func TestSchemaSQL(t *testing.T) {
	schema := testSchema(t)
	script, err := pgstore.SchemaSQL(schema, 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(t.Context(), script, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("applying SchemaSQL: %v\n%s", err, script)
	}
	s, err := pgstore.New(t.Context(), newPool(t, nil, 2), pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	var versions int
	if err := adminPool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".schema_version").Scan(&versions); err != nil || versions != pgstore.SchemaVersion {
		t.Errorf("schema_version rows = %d, %v; want %d", versions, err, pgstore.SchemaVersion)
	}
	if s.ShardCount() != 16 {
		t.Errorf("ShardCount = %d, want 16", s.ShardCount())
	}
	if n, err := s.Enqueue(t.Context(), []outbox.Message{message("a", "q", "k")}); n != 1 || err != nil {
		t.Errorf("Enqueue = %d, %v", n, err)
	}
	if _, err := pgstore.SchemaSQL("Bad", 0); err == nil {
		t.Error("SchemaSQL(\"Bad\") succeeded")
	}
}
