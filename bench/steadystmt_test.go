package bench

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/pgstore"
)

// stmtTally counts a pool's statements by their text (a batch's texts
// joined) and sums the backend CPU that log_statement_stats reports for
// each of their protocol messages, as stmtCPU does by kind.
type stmtTally struct {
	mu    sync.Mutex
	cur   map[*pgconn.PgConn]string
	n     map[string]int
	cpu   map[string]float64 // µs
	trips int
	// listener is the listening connection's backend's CPU (µs), from
	// /proc: it runs no statement while it listens.
	listener float64
}

// tallyMeter is a steady run's CPU measurement that also adds the
// listening backend's share to its tally.
type tallyMeter struct {
	t      *stmtTally
	m      *cpuMeter
	pid    int
	before time.Duration
}

// startMeter zeroes t's statements and starts measuring pool's backends.
func (t *stmtTally) startMeter(pool *pgxpool.Pool) cpuStopper {
	t.reset()
	tm := &tallyMeter{t: t, m: startCPU(cpuAdmin, pool)}
	app, _ := appNames.Load(pool)
	var pid int32
	if cpuAdmin.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&pid) == nil {
		tm.pid = int(pid)
		tm.before = tm.m.before[tm.pid]
	}
	return tm
}

func (tm *tallyMeter) stop() time.Duration {
	after := backendCPU(context.Background(), tm.m.admin, tm.m.app)
	d := tm.m.stop()
	if tm.pid != 0 && after != nil {
		tm.t.mu.Lock()
		tm.t.listener += float64((after[tm.pid] - tm.before).Microseconds())
		tm.t.mu.Unlock()
	}
	return d
}

func newStmtTally() *stmtTally {
	return &stmtTally{cur: map[*pgconn.PgConn]string{}, n: map[string]int{}, cpu: map[string]float64{}}
}

// spaces is a run of white space, which stmtLabel folds to one.
var spaces = regexp.MustCompile(`\s+`)

// stmtLabel names a statement by the start of its text.
func stmtLabel(sql string) string {
	sql = strings.TrimSpace(spaces.ReplaceAllString(sql, " "))
	if len(sql) > 90 {
		sql = sql[:90]
	}
	return sql
}

func (t *stmtTally) start(c *pgx.Conn, label string) {
	t.mu.Lock()
	t.cur[c.PgConn()] = label
	t.n[label]++
	t.trips++
	t.mu.Unlock()
}

func (t *stmtTally) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.start(c, stmtLabel(d.SQL))
	return ctx
}

func (*stmtTally) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *stmtTally) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var labels []string
	for _, q := range d.Batch.QueuedQueries {
		labels = append(labels, stmtLabel(q.SQL))
	}
	t.start(c, "batch["+strings.Join(labels, " ‖ ")+"]")
	return ctx
}

func (*stmtTally) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (*stmtTally) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *stmtTally) notice(c *pgconn.PgConn, n *pgconn.Notice) {
	x := usageLine.FindStringSubmatch(n.Detail)
	if x == nil {
		return
	}
	user, _ := strconv.ParseFloat(x[1], 64)
	system, _ := strconv.ParseFloat(x[2], 64)
	t.mu.Lock()
	label, ok := t.cur[c]
	if !ok {
		label = "(untraced: the listening connection)"
	}
	t.cpu[label] += (user + system) * 1e6
	t.mu.Unlock()
}

func (t *stmtTally) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n, t.cpu, t.trips = map[string]int{}, map[string]float64{}, 0
}

// BenchmarkSteadyStatements says where the PostgreSQL CPU of
// BenchmarkSteady's default dispatcher arm goes: the same trickle (10
// namespaces, 500 and 2,000 rows/s, one row per enqueue) into a
// dispatcher whose pool's backends report each protocol message's CPU
// (log_statement_stats, as BenchmarkDrainStatements), with kept counts
// off and on. It logs each statement (or batch) the consumer sent: how
// many per row and their CPU per row; and reports the backends' whole CPU
// per row from /proc and the round trips per row.
//
//	cd bench && go test -run '^$' -bench SteadyStatements -benchtime 1x -v
func BenchmarkSteadyStatements(b *testing.B) {
	cpuAdmin = openPool(b, 2)
	for _, rate := range []int{500, 2000} {
		for _, recount := range []time.Duration{0, pgstore.RecommendedRecountInterval} {
			b.Run(fmt.Sprintf("rate-%d/recount-%v", rate, recount), func(b *testing.B) {
				t := newStmtTally()
				pool := openTallyPool(b, t)
				var rows int
				var pg time.Duration
				for b.Loop() {
					l := newLatencies()
					n, c := steadyDispatchOn(b, pool, rate, 0, recount, func() cpuStopper { return t.startMeter(pool) }, l)
					rows += n
					pg += c
				}
				reportTally(b, t, rows, pg)
				reportPlans(b, pool)
			})
		}
	}
}

// reportTally logs t's statements, most CPU first, per row of rows, and
// reports the backends' CPU pg per row, the round trips per row and the
// CPU no statement's messages account for.
func reportTally(b *testing.B, t *stmtTally, rows int, pg time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	labels := make([]string, 0, len(t.cpu))
	for l := range t.n {
		labels = append(labels, l)
	}
	for l := range t.cpu {
		if _, ok := t.n[l]; !ok {
			labels = append(labels, l)
		}
	}
	slices.SortFunc(labels, func(x, y string) int { return int(t.cpu[y] - t.cpu[x]) })
	attributed := 0.0
	var out strings.Builder
	for _, l := range labels {
		attributed += t.cpu[l]
		fmt.Fprintf(&out, "\n%8.3f/row %8.1f µs/row %7.1f µs each  %s", float64(t.n[l])/float64(rows), t.cpu[l]/float64(rows), t.cpu[l]/max(1, float64(t.n[l])), l)
	}
	b.Logf("%d rows, listener %.1f µs/row (proc), statements:%s", rows, t.listener/float64(rows), out.String())
	attributed += t.listener
	b.ReportMetric(float64(t.trips)/float64(rows), "trips/row")
	if pg > 0 {
		b.ReportMetric(float64(pg.Microseconds())/float64(rows), "pg-µs/row")
		b.ReportMetric((float64(pg.Microseconds())-attributed)/float64(rows), "unattributed-µs/row")
	}
}

// openTallyPool is openPool (pgxpool's default size) with t tallying the
// statements and the CPU each backend reports per message.
func openTallyPool(tb testing.TB, t *stmtTally) *pgxpool.Pool {
	return openStatementStatsPool(tb, "bench-tally-", t, t.notice)
}

// reportPlans logs, per prepared statement of pool's idle connections,
// how many generic and custom plans it ran on.
func reportPlans(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	var out strings.Builder
	for _, c := range pool.AcquireAllIdle(ctx) {
		rows, err := c.Query(ctx, `SELECT left(regexp_replace(statement, '\s+', ' ', 'g'), 80), generic_plans, custom_plans FROM pg_prepared_statements`)
		if err == nil {
			for rows.Next() {
				var s string
				var g, cu int64
				if rows.Scan(&s, &g, &cu) == nil {
					fmt.Fprintf(&out, "\n  generic %5d custom %5d  %s", g, cu, s)
				}
			}
			rows.Close()
		}
		c.Release()
	}
	b.Logf("plans:%s", out.String())
}
