package bench

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/dispatch"
)

// stmtClasses are the kinds of statement BenchmarkDrainStatements tells
// apart, by their text (see stmtClass).
var stmtClasses = []string{"claim", "complete", "count", "other"}

// stmtClass names the kind of a pgstore statement (or batch) by its text:
// the claims lock FOR UPDATE SKIP LOCKED, a Complete reads its entries'
// outcomes, the counts walk the routes; anything else (LISTEN, a Stats, a
// settings read) is other.
func stmtClass(sql string) string {
	switch {
	case strings.Contains(sql, "SKIP LOCKED"):
		return "claim"
	case strings.Contains(sql, "c.outcome"):
		return "complete"
	case strings.Contains(sql, "WITH RECURSIVE routes"), strings.Contains(sql, "count("):
		return "count"
	}
	return "other"
}

// stmtCPU sums, by kind of statement, the backend CPU that
// log_statement_stats reports per protocol message (parse, bind, execute)
// to the connection that sent it, as notices: the statement under way on a
// connection is the last one its tracer saw start.
type stmtCPU struct {
	mu  sync.Mutex
	cur map[*pgconn.PgConn]string
	sum map[string]float64 // µs
}

func (t *stmtCPU) start(c *pgx.Conn, sql string) {
	t.mu.Lock()
	t.cur[c.PgConn()] = stmtClass(sql)
	t.mu.Unlock()
}

func (t *stmtCPU) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.start(c, d.SQL)
	return ctx
}

func (*stmtCPU) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *stmtCPU) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var all strings.Builder
	for _, q := range d.Batch.QueuedQueries {
		all.WriteString(q.SQL)
	}
	t.start(c, all.String())
	return ctx
}

func (*stmtCPU) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (*stmtCPU) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// usageLine is the line of log_statement_stats' report with the CPU times.
var usageLine = regexp.MustCompile(`([0-9.]+) s user, ([0-9.]+) s system`)

func (t *stmtCPU) notice(c *pgconn.PgConn, n *pgconn.Notice) {
	x := usageLine.FindStringSubmatch(n.Detail)
	if x == nil {
		return
	}
	user, _ := strconv.ParseFloat(x[1], 64)
	system, _ := strconv.ParseFloat(x[2], 64)
	t.mu.Lock()
	class := t.cur[c]
	if class == "" {
		class = "other"
	}
	t.sum[class] += (user + system) * 1e6
	t.mu.Unlock()
}

// snapshot returns a copy of the sums so far.
func (t *stmtCPU) snapshot() map[string]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]float64, len(t.sum))
	for k, v := range t.sum {
		out[k] = v
	}
	return out
}

// stmtMeter is a drain's measurement: the statements' CPU by kind, from
// t, and the backends' whole CPU, from /proc (see backendCPU).
type stmtMeter struct {
	t      *stmtCPU
	before map[string]float64
	proc   *cpuMeter
	delta  map[string]float64
}

func (m *stmtMeter) stop() time.Duration {
	d := m.proc.stop()
	after := m.t.snapshot()
	for k, v := range after {
		m.delta[k] += v - m.before[k]
	}
	return d
}

// BenchmarkDrainStatements says where the PostgreSQL CPU of the best fair
// drain at 10 namespaces goes: the fair-10-wide arm of BenchmarkDrain
// (Workers and BatchSize 1,000) on a pool whose backends report each
// protocol message's CPU (log_statement_stats, received as notices, the
// backend's own getrusage), summed by kind of statement (stmtClass). It
// reports per row: each kind's CPU (claim-, complete-, count-, other-µs/row),
// the backends' whole CPU during the drain from /proc (pg-µs/row, as
// BenchmarkDrain's), and what no statement's messages account for
// (unattributed-µs/row: the commits, which run after the last message of a
// statement, and the protocol's idle loop). Reporting costs the backends
// a little (three getrusage calls and a notice per message), so pg-µs/row
// is a little above BenchmarkDrain's.
//
//	cd bench && go test -run '^$' -bench DrainStatements -benchtime 3x
func BenchmarkDrainStatements(b *testing.B) {
	rows := drainBacklog()
	t := &stmtCPU{cur: map[*pgconn.PgConn]string{}, sum: map[string]float64{}}
	pool := openStatsPool(b, t)
	cpuAdmin = openPool(b, 2)
	d := newDispatchSetup(b, pool, 10, false)
	d.workers, d.batch = wideWorkers, wideWorkers
	m := &stmtMeter{t: t, delta: map[string]float64{}}
	var pg time.Duration
	drained := 0
	b.ReportAllocs()
	for b.Loop() {
		drainPrepared(b, d, rows)
		_, _, cpu := drainDispatch(b, d.store, d.store, rows, d.batch, dispatch.Options{Workers: d.workers}, func() cpuStopper {
			m.before, m.proc = t.snapshot(), startCPU(cpuAdmin, pool)
			return m
		})
		pg += cpu
		drained += rows
	}
	attributed := 0.0
	for _, k := range stmtClasses {
		attributed += m.delta[k]
		b.ReportMetric(m.delta[k]/float64(drained), k+"-µs/row")
	}
	if pg > 0 {
		b.ReportMetric(float64(pg.Microseconds())/float64(drained), "pg-µs/row")
		b.ReportMetric((float64(pg.Microseconds())-attributed)/float64(drained), "unattributed-µs/row")
	}
}

// openStatsPool is openPool (pgxpool's default size) with t tracing the
// statements and summing the CPU each backend reports per message.
func openStatsPool(tb testing.TB, t *stmtCPU) *pgxpool.Pool {
	return openStatementStatsPool(tb, "bench-stmtcpu-", t, t.notice)
}

// openStatementStatsPool is openPool (pgxpool's default size) under a fresh
// application name starting with prefix, with log_statement_stats on:
// tracer sees every statement, and notice every backend's CPU report per
// message. It skips tb when PostgreSQL is not reachable.
func openStatementStatsPool(tb testing.TB, prefix string, tracer pgx.QueryTracer, notice pgconn.NoticeHandler) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		tb.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.Tracer = tracer
	cfg.ConnConfig.OnNotice = notice
	app := prefix + strconv.FormatInt(time.Now().UnixNano(), 36)
	for k, v := range map[string]string{"application_name": app, "log_statement_stats": "on", "client_min_messages": "log"} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err == nil {
		err = pool.Ping(context.Background())
	}
	if err != nil {
		tb.Skipf("PostgreSQL not reachable at %s, or log_statement_stats not settable: %v", databaseURL(), err)
	}
	tb.Cleanup(pool.Close)
	appNames.Store(pool, app)
	return pool
}
