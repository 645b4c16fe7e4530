package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// databaseURL is where the benchmarks find PostgreSQL.
func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// openPool connects to the test database with at most maxConns
// connections (0: pgxpool's default), or skips the benchmark with one line
// saying how to enable it.
func openPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	return openTracedPool(tb, maxConns, nil)
}

// openTracedPool is openPool with tr tracing every connection's
// statements (nil: none).
func openTracedPool(tb testing.TB, maxConns int32, tr pgx.QueryTracer) *pgxpool.Pool {
	tb.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		tb.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.Tracer = tr
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		if os.Getenv("PGSTORE_REQUIRE") != "" {
			tb.Fatalf("PostgreSQL required but not reachable at %s: %v", databaseURL(), err)
		}
		tb.Skipf("PostgreSQL not reachable at %s (set TEST_DATABASE_URL to enable): %v", databaseURL(), err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// freshSchema returns a new schema name, dropped with everything in it
// when tb ends.
func freshSchema(tb testing.TB, pool *pgxpool.Pool, prefix string) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := fmt.Sprintf("bench_%s_%s", prefix, hex.EncodeToString(b[:]))
	tb.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return schema
}

// tripCounter counts round trips: statements sent alone and batches (a
// batch, as pgstore sends its claims and counts, is one round trip and one
// transaction).
type tripCounter struct{ n atomic.Int64 }

func (t *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (*tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (*tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (*tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
