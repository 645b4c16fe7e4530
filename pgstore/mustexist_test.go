package pgstore_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestMustExist: with Options.MustExist, New of a schema that does not
// exist, or of a schema without the outbox's tables, fails with an
// *outbox.NotExistError and creates nothing; an existing outbox opens.
func TestMustExist(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	exists := func() bool {
		t.Helper()
		var ok bool
		if err := adminPool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	want := func(step, kind string, err error) {
		t.Helper()
		var ne *outbox.NotExistError
		if !errors.Is(err, outbox.ErrNotExist) || !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &ne) ||
			ne.Pkg != "pgstore" || ne.Kind != kind || ne.Name != schema {
			t.Fatalf("%s: %v, want an *outbox.NotExistError of pgstore, %s, %q", step, err, kind, schema)
		}
	}
	_, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, MustExist: true})
	want("New of a missing schema", "schema", err)
	if exists() {
		t.Fatalf("New with MustExist created schema %s", schema)
	}
	if _, err := adminPool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	_, err = pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, MustExist: true})
	want("New of an empty schema", "outbox", err)
	var tables int
	if err := adminPool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("New with MustExist created %d tables in the empty schema (%v)", tables, err)
	}
	_, err = pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: schema, MustExist: true})
	want("Open of an empty schema", "outbox", err)
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, MustExist: true})
	if err != nil {
		t.Fatalf("New of an existing outbox with MustExist: %v", err)
	}
	if _, err := s.Stats(ctx); err != nil {
		t.Errorf("Stats on it: %v", err)
	}
	s.Close()
}
