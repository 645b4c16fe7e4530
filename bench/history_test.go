package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// The history benchmark's setting: the rate, the dispatcher's
// defaults for reports and settings, and the prune period of
// dispatch.Operate.History (dispatch's pruneEvery, unexported).
const (
	historyRate       = 2000 // rows/s the producer enqueues
	historyNamespaces = 10
	historyReport     = 2 * time.Second // dispatch.Operate.ReportInterval's default
	historyPruneEvery = time.Minute
	historyNode       = "bench-node"
	// historyBatch rows go in one transaction every historyBatch/historyRate
	// (10 ms): a producer committing each row alone falls short of 2,000
	// commits a second on 2 shared cores, and its rate would then differ
	// from arm to arm.
	historyBatch = 20
)

// historyFor is how long each arm of BenchmarkHistoryCost runs its
// producer (300 ms under -benchtime=1x, to prove it runs).
func historyFor() time.Duration {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return 300 * time.Millisecond
	}
	return 10 * time.Second
}

// BenchmarkHistoryCost is what dispatch.Operate.History costs the
// database, beside the same run without it: a producer enqueues no-op
// rows at 2,000 rows/s (transactions of 20 rows every 10 ms) over 10
// namespaces for 10 s while one dispatcher (Workers 100, BatchSize 100,
// Operate with shared settings and reports at their defaults) drains them,
// with History off and on, the two arms alternating first from iteration
// to iteration, each on a fresh schema whose history already holds what a
// node of 10 namespaces leaves in steady state (a full hour of points
// every 2 s, thinned older ones for a day, one minute not yet pruned).
//
// The dispatcher's claims and results run on one pool, its settings and
// reports on a second, and the history (AppendHistory, PruneHistory) on a
// third of one connection, so that each one's server CPU is its own
// backends' (/proc/<pid>/schedstat: nanoseconds, user and system). It
// reports per row:
//
//   - off-pg-µs/row, on-pg-µs/row: the database CPU of everything the
//     dispatcher ran (claims, results, settings, reports, and the history
//     in the on arm); on/off-ratio their ratio over the whole run and
//     on/off-median the median of the iterations' ratios. Side by side on
//     a shared machine these move by more than the history's share from
//     arm to arm, and a 10 s arm runs the prune once where a node runs it
//     once a minute, so they show the history is lost in the noise, not
//     how small it is;
//   - history-µs/row: the history's own CPU at the rates a node runs it
//     (each append's mean CPU once per 2 s report, each prune's once a
//     minute) per row at the arm's rate, and overhead-%: that over the on
//     arm's database CPU per row without the history, the bound
//     (at most 1%);
//   - append-µs, prune-µs: one append's (10 points) and one prune's CPU;
//     rows/s: the rate the producer reached.
//
// Run it with (about 3 minutes):
//
//	cd bench && go test -run '^$' -bench HistoryCost -benchtime 6x -timeout 30m
func BenchmarkHistoryCost(b *testing.B) {
	if cpuAdmin == nil {
		cpuAdmin = openPool(b, 2)
	}
	var arms [2]historyArm // [0]: History off, [1]: on
	var ratios []float64   // each iteration's on/off database CPU per row
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		var pair [2]historyArm
		for _, on := range order {
			pair[on] = runHistoryArm(b, on == 1)
			arms[on].add(pair[on])
		}
		if pair[0].dispatcher > 0 && pair[1].dispatcher >= 0 {
			r := pair[1].perRow(true) / pair[0].perRow(false)
			ratios = append(ratios, r)
			b.Logf("iteration %d: off %.1f µs/row at %.0f rows/s, on %.1f µs/row at %.0f rows/s: on/off %.3f",
				i, pair[0].perRow(false), pair[0].rate(), pair[1].perRow(true), pair[1].rate(), r)
		}
	}
	off, on := arms[0], arms[1]
	if off.rows == 0 || on.rows == 0 || off.dispatcher < 0 || on.dispatcher < 0 {
		return // CPU not readable: not on the server's machine
	}
	offRow, onRow := off.perRow(false), on.perRow(true)
	b.ReportMetric(offRow, "off-pg-µs/row")
	b.ReportMetric(onRow, "on-pg-µs/row")
	b.ReportMetric(onRow/offRow, "on/off-ratio")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "on/off-median")
	b.ReportMetric(float64(on.rows+off.rows)/(on.took+off.took).Seconds(), "rows/s")
	if on.appends == 0 || on.prunes == 0 {
		return // too short a run for a report (-benchtime=1x)
	}
	appendCPU := on.append / time.Duration(on.appends)
	pruneCPU := on.prune / time.Duration(on.prunes)
	rowsPerSecond := on.rate()
	perSecond := appendCPU.Seconds()/historyReport.Seconds() + pruneCPU.Seconds()/historyPruneEvery.Seconds()
	history := perSecond / rowsPerSecond * 1e6
	b.ReportMetric(history, "history-µs/row")
	b.ReportMetric(100*history/on.perRow(false), "overhead-%")
	b.ReportMetric(float64(appendCPU.Nanoseconds())/1000, "append-µs")
	b.ReportMetric(float64(pruneCPU.Nanoseconds())/1000, "prune-µs")
}

// historyArm sums one arm's runs: rows drained, the producer's time, the
// server CPU of the dispatcher's claims, results, settings and reports
// (< 0: unknown), and of its history appends and prunes with their
// counts.
type historyArm struct {
	rows            int
	took            time.Duration
	dispatcher      time.Duration
	append, prune   time.Duration
	appends, prunes int
}

// perRow is the database CPU per row in µs: the dispatcher's, with the
// history's when history is set.
func (a historyArm) perRow(history bool) float64 {
	cpu := a.dispatcher
	if history {
		cpu += a.append + a.prune
	}
	return float64(cpu.Nanoseconds()) / 1000 / float64(a.rows)
}

// rate is the rows enqueued per second of the producers' time.
func (a historyArm) rate() float64 { return float64(a.rows) / a.took.Seconds() }

func (a *historyArm) add(r historyArm) {
	a.rows += r.rows
	a.took += r.took
	if a.dispatcher >= 0 && r.dispatcher >= 0 {
		a.dispatcher += r.dispatcher
	} else {
		a.dispatcher = -1
	}
	a.append += r.append
	a.prune += r.prune
	a.appends += r.appends
	a.prunes += r.prunes
}

// runHistoryArm runs one arm on a fresh schema with its history seeded.
func runHistoryArm(b *testing.B, history bool) historyArm {
	ctx := context.Background()
	claimPool, operatePool, historyPool := openPool(b, 0), openPool(b, 4), openPool(b, 1)
	schema := freshSchema(b, claimPool, "history")
	open := func(pool *pgxpool.Pool) *pgstore.Store {
		s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema})
		if err != nil {
			b.Fatalf("pgstore.New: %v", err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	claims, operate, hist := open(claimPool), open(operatePool), open(historyPool)
	producer := open(openPool(b, 2))
	seedHistory(b, hist, historyPool, schema, time.Now())
	meter := newHistoryMeter(b, operate, hist, historyPool)

	var started atomic.Int64
	all, _ := backpressure.AllShards(claims.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: dispatchBatch, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		b.Fatal(err)
	}
	handler := func(context.Context, outbox.Row) error {
		started.Add(1)
		return nil
	}
	disp, err := dispatch.New(bp, claims, handler, dispatch.Options{Workers: dispatchWorkers, Logger: quietLogger(),
		Operate: &dispatch.Operate{Node: historyNode, Store: meter, SharedSettings: true, History: history}})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- disp.Run(runCtx) }()
	time.Sleep(time.Second) // settings read, subscribed, idle

	var apps []string
	for _, p := range []*pgxpool.Pool{claimPool, operatePool} {
		app, _ := appNames.Load(p)
		apps = append(apps, app.(string))
	}
	before := make([]map[int]time.Duration, len(apps))
	for i, app := range apps {
		before[i] = backendRuntime(ctx, cpuAdmin, app)
	}
	began := time.Now()
	n := produceBatches(b, producer, historyFor())
	took := time.Since(began)
	for deadline := time.Now().Add(time.Minute); started.Load() < int64(n); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("dispatch: %d of %d rows started after a minute", started.Load(), n)
		}
	}
	time.Sleep(20 * time.Millisecond) // the last results written
	out := historyArm{rows: n, took: took}
	for i, app := range apps {
		after := backendRuntime(ctx, cpuAdmin, app)
		if before[i] == nil || after == nil || out.dispatcher < 0 {
			out.dispatcher = -1
			continue
		}
		for pid, t := range after {
			out.dispatcher += t - before[i][pid] // a backend opened since counts from 0
		}
	}
	cancel()
	if err := <-ran; err != nil {
		b.Fatalf("dispatch Run: %v", err)
	}
	out.append, out.prune, out.appends, out.prunes = meter.take(b)
	if !history && out.appends+out.prunes > 0 {
		b.Fatalf("History off, yet %d appends and %d prunes", out.appends, out.prunes)
	}
	return out
}

// seedHistory fills the history with what one node of historyNamespaces
// namespaces, reporting every historyReport, leaves at now in steady
// state: a point every report for a day, thinned as the prune a minute
// before now left it (outbox.ThinHistory).
func seedHistory(b *testing.B, s *pgstore.Store, pool *pgxpool.Pool, schema string, now time.Time) {
	ctx := context.Background()
	var points []outbox.HistoryPoint
	for at := now.Add(-outbox.HistoryRetention); at.Before(now); at = at.Add(historyReport) {
		for ns := range historyNamespaces {
			points = append(points, outbox.HistoryPoint{Node: historyNode, At: at, Interval: historyReport,
				NamespaceCounters: outbox.NamespaceCounters{Namespace: fmt.Sprintf("ns%d", ns), Started: 400, Settled: 400, Backlog: 25}})
		}
	}
	points = outbox.ThinHistory(points, now.Add(-historyPruneEvery))
	for len(points) > 0 {
		n := min(len(points), outbox.MaxReportNamespaces)
		if err := s.AppendHistory(ctx, points[:n]); err != nil {
			b.Fatalf("seeding the history: %v", err)
		}
		points = points[n:]
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, "history"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
}

// historyMeter is the dispatcher's Operate.Store: settings and reports go
// to Operator, the history to h, whose pool holds one connection (the
// backend pid), and each history call's server CPU is that backend's
// schedstat run time across the call. The dispatcher calls the history
// from its one operator loop.
type historyMeter struct {
	outbox.Operator
	h               *pgstore.Store
	pool            *pgxpool.Pool
	pid             int32
	append, prune   time.Duration
	appends, prunes int
	failed          error
}

var _ outbox.Historian = (*historyMeter)(nil)

func newHistoryMeter(b *testing.B, op outbox.Operator, h *pgstore.Store, pool *pgxpool.Pool) *historyMeter {
	m := &historyMeter{Operator: op, h: h, pool: pool}
	if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&m.pid); err != nil {
		b.Fatal(err)
	}
	return m
}

func (m *historyMeter) AppendHistory(ctx context.Context, points []outbox.HistoryPoint) error {
	before := m.runtime()
	err := m.h.AppendHistory(ctx, points)
	m.add(&m.append, &m.appends, before, err)
	return err
}

func (m *historyMeter) History(ctx context.Context, p outbox.HistoryParams) ([]outbox.HistoryPoint, error) {
	return m.h.History(ctx, p)
}

func (m *historyMeter) PruneHistory(ctx context.Context, now time.Time) (int, error) {
	before := m.runtime()
	n, err := m.h.PruneHistory(ctx, now)
	m.add(&m.prune, &m.prunes, before, err)
	return n, err
}

func (m *historyMeter) add(sum *time.Duration, calls *int, before time.Duration, err error) {
	after := m.runtime()
	switch {
	case err != nil:
		m.failed = err
	case before < 0 || after < 0:
		m.failed = fmt.Errorf("the history backend %d's schedstat is not readable", m.pid)
	default:
		*sum += after - before
		*calls++
	}
}

// runtime is the history backend's CPU so far, -1 if unreadable.
func (m *historyMeter) runtime() time.Duration { return schedRuntime(int(m.pid)) }

// take returns the history's CPU and calls, and fails b if a call failed
// or the pool's one connection was replaced (its CPU then unmeasured).
func (m *historyMeter) take(b *testing.B) (appendCPU, pruneCPU time.Duration, appends, prunes int) {
	if m.failed != nil {
		b.Fatalf("history: %v", m.failed)
	}
	var pid int32
	if err := m.pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil || pid != m.pid {
		b.Fatalf("the history pool's backend moved from %d to %d (%v)", m.pid, pid, err)
	}
	return m.append, m.prune, m.appends, m.prunes
}

// backendRuntime is backendCPU at nanosecond resolution: each backend's
// run time from /proc/<pid>/schedstat (user and system), nil when one
// cannot be read.
func backendRuntime(ctx context.Context, admin *pgxpool.Pool, app string) map[int]time.Duration {
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		t := schedRuntime(int(pid))
		if t < 0 {
			return nil
		}
		out[int(pid)] = t
	}
	return out
}

// schedRuntime is process pid's time on a CPU so far (the first field of
// /proc/<pid>/schedstat, in nanoseconds), -1 if unreadable.
func schedRuntime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(ns)
}

// produceBatches enqueues historyRate rows a second into s for d, in
// transactions of historyBatch rows over historyNamespaces namespaces,
// and returns how many rows it enqueued.
func produceBatches(b *testing.B, s *pgstore.Store, d time.Duration) int {
	every := time.Second * historyBatch / historyRate
	begin := time.Now()
	n := 0
	for k := 0; time.Since(begin) < d; k++ {
		if wait := time.Until(begin.Add(time.Duration(k) * every)); wait > 0 {
			time.Sleep(wait)
		}
		ms := make([]outbox.Message, historyBatch)
		for i := range ms {
			ms[i] = outbox.Message{DispatchKey: fmt.Sprintf("s%d", n+i), Namespace: fmt.Sprintf("ns%d", (n+i)%historyNamespaces), TaskQueue: "q"}
		}
		if _, err := s.Enqueue(context.Background(), ms); err != nil {
			b.Fatalf("enqueue: %v", err)
		}
		n += len(ms)
	}
	return n
}
