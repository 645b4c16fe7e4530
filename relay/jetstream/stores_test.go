package jetstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// databaseURL is TEST_DATABASE_URL, or the local PostgreSQL.
func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// testStore is a store the relay's tests run on, opened on a name (a
// SQLite file, a PostgreSQL schema) that the test's children reopen.
type testStore struct {
	name string
	// open opens the store at name; lease is its lease.
	open func(ctx context.Context, name string, lease time.Duration) (outbox.Store, error)
	// fresh returns a new name for tb, removed at tb's end; it skips tb
	// when the store's database is not reachable.
	fresh func(tb testing.TB) string
}

// stores are the stores every end-to-end test runs on, as subtests.
var stores = []testStore{
	{
		name: "sqlite",
		open: func(ctx context.Context, name string, lease time.Duration) (outbox.Store, error) {
			return sqlitestore.Open(ctx, name, sqlitestore.Options{Lease: lease})
		},
		fresh: func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "outbox.db") },
	},
	{
		name: "postgres",
		open: func(ctx context.Context, name string, lease time.Duration) (outbox.Store, error) {
			return pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: name, Lease: lease})
		},
		fresh: func(tb testing.TB) string {
			tb.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, databaseURL())
			if err != nil {
				if os.Getenv("PGSTORE_REQUIRE") == "1" || os.Getenv("RELAY_REQUIRE") == "1" {
					tb.Fatalf("PostgreSQL not reachable (PGSTORE_REQUIRE or RELAY_REQUIRE=1): %v", err)
				}
				tb.Skipf("PostgreSQL not reachable: set TEST_DATABASE_URL to run on pgstore too: %v", err)
			}
			_ = conn.Close(ctx)
			var b [6]byte
			_, _ = rand.Read(b[:])
			schema := "relay_" + hex.EncodeToString(b[:])
			tb.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				conn, err := pgx.Connect(ctx, databaseURL())
				if err != nil {
					tb.Errorf("drop schema %s: %v", schema, err)
					return
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
					tb.Errorf("drop schema %s: %v", schema, err)
				}
			})
			return schema
		},
	},
}

// openStore opens a fresh store of kind ts, closed at tb's end, with a
// short lease so that a row whose handler was lost comes back soon.
func (ts testStore) openStore(tb testing.TB) outbox.Store {
	tb.Helper()
	store, err := ts.open(context.Background(), ts.fresh(tb), 2*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	return store
}

// eachStore runs f as a subtest on every store.
func eachStore(t *testing.T, f func(t *testing.T, ts testStore)) {
	for _, ts := range stores {
		t.Run(ts.name, func(t *testing.T) { f(t, ts) })
	}
}
