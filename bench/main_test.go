package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	app := "bench-" + hex.EncodeToString(tag[:])
	cfg.ConnConfig.RuntimeParams["application_name"] = app
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
	appNames.Store(pool, app)
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

// appNames maps each pool openTracedPool opened to the application_name
// its connections carry, so that backendCPU finds their backends.
var appNames sync.Map // *pgxpool.Pool → string

// backendCPU returns the CPU time (user + system, from /proc/<pid>/stat)
// spent so far by each PostgreSQL backend whose application_name is app:
// the server-side cost of one arm's connections, whatever else runs on the
// server (other schemas, other clients). It needs the server on this
// machine; elsewhere it returns nil, and the figure is not reported.
func backendCPU(ctx context.Context, admin *pgxpool.Pool, app string) map[int]time.Duration {
	pids, ok := backendPIDs(ctx, admin, app)
	if !ok {
		return nil
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil // not on this machine, or gone
		}
		// The fields after the command's closing parenthesis: utime and
		// stime are the 14th and 15th of the line, in clock ticks.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return nil
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[int(pid)] = time.Duration(ut+st) * time.Second / clockTicks
	}
	return out
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuStopper is a CPU measurement under way (a *cpuMeter or a procMeter):
// stop returns the CPU spent since it started, < 0 if unknown.
type cpuStopper interface{ stop() time.Duration }

// cpuMeter measures the backend CPU of one pool's connections over an
// interval: start before, stop after.
type cpuMeter struct {
	admin  *pgxpool.Pool
	app    string
	before map[int]time.Duration
}

func startCPU(admin, pool *pgxpool.Pool) *cpuMeter {
	app, _ := appNames.Load(pool)
	return startAppCPU(admin, app.(string))
}

func startAppCPU(admin *pgxpool.Pool, app string) *cpuMeter {
	m := &cpuMeter{admin: admin, app: app}
	m.before = backendCPU(context.Background(), admin, app)
	return m
}

// stop returns the CPU the backends spent since start (backends opened
// since count from 0), or -1 if it could not be read.
func (m *cpuMeter) stop() time.Duration {
	after := backendCPU(context.Background(), m.admin, m.app)
	if m.before == nil || after == nil {
		return -1
	}
	var d time.Duration
	for pid, t := range after {
		d += t - m.before[pid]
	}
	return d
}

// backendPIDs lists the process IDs of the PostgreSQL backends whose
// application_name is app; ok is false if the server could not be asked.
func backendPIDs(ctx context.Context, admin *pgxpool.Pool, app string) (pids []int32, ok bool) {
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return nil, false
	}
	pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, false
	}
	return pids, true
}
