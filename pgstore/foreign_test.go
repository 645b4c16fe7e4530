package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// foreignDatabase is a second database on the test server, created once and
// kept (each test uses its own schemas in it, dropped at its end).
const foreignDatabase = "pgstore_foreign_test"

// foreignPool returns a pool on foreignDatabase, creating the database if
// need be.
func foreignPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	if _, err := adminPool.Exec(ctx, "CREATE DATABASE "+foreignDatabase); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "42P04" && pe.Code != "23505") { // duplicate_database, or a concurrent create
			t.Fatalf("CREATE DATABASE: %v", err)
		}
	}
	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = foreignDatabase
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestEnqueueTxOnAnotherDatabase: a transaction on another database is
// refused with an *outbox.ArgumentError on Arg "tx", whether that database
// lacks the store's schema (the statement failed, so tx is failed and rolls
// back) or holds a schema of the same name (nothing is inserted in either
// outbox, and tx stays usable and commits its own writes). A transaction on
// the store's database still works, and so does one for a second store on
// a schema recreated under the same name: the random store id is per
// schema.
func TestEnqueueTxOnAnotherDatabase(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	foreign := foreignPool(t)
	msg := []outbox.Message{message("a", "q", "k")}
	wantTxArg := func(step string, err error) {
		t.Helper()
		var ae *outbox.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "tx" || !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("%s: EnqueueTx = %v, want an *outbox.ArgumentError on tx", step, err)
		}
	}

	// Without the schema there.
	tx, err := foreign.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.EnqueueTx(ctx, tx, msg)
	wantTxArg("other database without the schema", err)
	if _, err := tx.Exec(ctx, "SELECT 1"); err == nil {
		t.Errorf("tx after the refused EnqueueTx ran a statement; the doc says it is failed")
	}
	_ = tx.Rollback(ctx)

	// With a schema of the same name there.
	other, err := pgstore.New(ctx, foreign, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = foreign.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := foreign.Exec(ctx, "CREATE TABLE "+q+".orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	tx, err = foreign.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.EnqueueTx(ctx, tx, msg)
	wantTxArg("other database with the schema", err)
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".orders VALUES ('o1')"); err != nil {
		t.Fatalf("tx after the refused EnqueueTx: %v; the doc says it is unchanged", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after the refused EnqueueTx: %v", err)
	}
	for name, st := range map[string]*pgstore.Store{"the store": s, "the other database's store": other} {
		if _, err := st.Get(ctx, "k"); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("Get(k) on %s = %v, want ErrNotFound: nothing inserted", name, err)
		}
	}
	var orders int
	if err := foreign.QueryRow(ctx, "SELECT count(*) FROM "+q+".orders").Scan(&orders); err != nil || orders != 1 {
		t.Errorf("orders committed by tx = %d, %v; want 1", orders, err)
	}
	// The other store takes its own database's transactions.
	tx, err = foreign.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := other.EnqueueTx(ctx, tx, msg); err != nil || n != 1 {
		t.Fatalf("EnqueueTx on the other store's own database = %d, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// The store's own database: accepted.
	tx, err = adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.EnqueueTx(ctx, tx, msg); err != nil || n != 1 {
		t.Fatalf("EnqueueTx on the store's database = %d, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "k"); err != nil {
		t.Errorf("Get(k) after the commit: %v", err)
	}

	// The schema dropped and created again under the same name: the old
	// store's identity is gone with it.
	if _, err := adminPool.Exec(ctx, "DROP SCHEMA "+q+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	tx, err = adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = s.EnqueueTx(ctx, tx, msg)
	wantTxArg("the schema recreated", err)
}
