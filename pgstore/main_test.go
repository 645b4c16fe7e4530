package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// adminPool is the shared, untraced pool the tests use to create, inspect
// and drop their schemas. It is nil when no database is reachable.
var adminPool *pgxpool.Pool

// databaseURL is TEST_DATABASE_URL, or the localhost default.
func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultDatabaseURL
}

// TestMain connects once. Without a reachable database the package's tests
// skip, with one line saying how to run them, unless PGSTORE_REQUIRE=1 (set
// by .ci/run), which turns the same condition into a failure.
func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	pool, err := connect(ctx, databaseURL())
	cancel()
	if err != nil {
		where := redact(databaseURL())
		if os.Getenv("PGSTORE_REQUIRE") == "1" {
			fmt.Fprintf(os.Stderr, "pgstore: PostgreSQL is required (PGSTORE_REQUIRE=1) but not reachable at %s: %v\n", where, err)
			os.Exit(1)
		}
		fmt.Printf("pgstore: PostgreSQL not reachable at %s (%v); skipping the pgstore tests: set TEST_DATABASE_URL to run them\n", where, err)
		os.Exit(0)
	}
	adminPool = pool
	code := m.Run()
	pool.Close()
	os.Exit(code)
}

func connect(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// redact hides a password in a URL, so the skip line can be printed.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return s
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// testSchema returns a fresh schema name for t, dropped (with everything in
// it) when t ends. The store creates the schema itself.
func testSchema(t testing.TB) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	schema := "pgstore_" + strings.Trim(name, "_") + "_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adminPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// tracer counts the round trips a pool makes (pgx.QueryTracer sees every
// Query, QueryRow and Exec, pgx.BatchTracer every batch) and can fail the
// n-th.
type tracer struct {
	queries atomic.Int64 // round trips
	batches atomic.Int64 // of which batches

	mu      sync.Mutex
	failNth int // the round trip, counted from arming, that fails; 0: none
	seen    int
}

var errInjected = fmt.Errorf("pgstore test: injected fault")

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return tr.start(ctx)
}

// TraceBatchStart counts a batch as one round trip, as it is: pgx sends
// its statements together.
func (tr *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.batches.Add(1)
	return tr.start(ctx)
}

func (tr *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (tr *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// start counts one round trip and, if armed, fails it.
func (tr *tracer) start(ctx context.Context) context.Context {
	tr.queries.Add(1)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.failNth <= 0 {
		return ctx
	}
	tr.seen++
	if tr.seen < tr.failNth {
		return ctx
	}
	tr.failNth = 0
	// A context that is already done makes pgx fail the statement before
	// it is sent; the connection stays healthy.
	failed, cancel := context.WithCancelCause(ctx)
	cancel(errInjected)
	return failed
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// arm makes the n-th round trip (statement or batch) from now on fail; n ≤ 0
// disarms.
func (tr *tracer) arm(n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failNth, tr.seen = n, 0
}

// newPool returns a pool of its own for t, traced by tr (which may be nil),
// closed when t ends; settings are name, value pairs of session settings.
func newPool(t testing.TB, tr *tracer, maxConns int32, settings ...string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	if tr != nil {
		cfg.ConnConfig.Tracer = tr
	}
	cfg.MaxConns = maxConns
	for i := 0; i+1 < len(settings); i += 2 {
		cfg.ConnConfig.RuntimeParams[settings[i]] = settings[i+1]
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// planner is every call a Store's Claimer serves, as its doc promises.
type planner interface {
	backpressure.OutboxStore[outbox.Row]
	backpressure.Counter
	ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error)
}

// claimerOf returns s's Claimer with every call it serves.
func claimerOf(s *pgstore.Store) planner { return s.Claimer().(planner) }
