package bench

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// producer: a minute, so that each node prunes about as often as it does
// in service (300 ms under -benchtime=1x, to prove it runs).
func historyFor() time.Duration {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return 300 * time.Millisecond
	}
	return historyPruneEvery
}

// BenchmarkHistoryCost is what dispatch.Operate.History costs the
// database, beside the same run without it: in each iteration two clusters
// of dispatchers run at once, one with History off and one with it on, each
// on a fresh schema, so that both see the same load on the machine at
// every instant (which of the two is set up first alternates). In each, a producer enqueues no-op rows at 2,000 rows/s
// (transactions of 20 rows every 10 ms) over 10 namespaces for a minute while
// the cluster (1 or 3 nodes, each owning its share of the shards; Workers
// 100, BatchSize 100, Operate with shared settings and reports at their
// defaults) drains them. Each schema's history already holds what the
// nodes leave in steady state: a full hour of points every 2 s, thinned
// older ones for a day, one minute not yet pruned.
//
// Each node's claims and results run on a pool of its own, the nodes'
// settings and reports on another, and the history (AppendHistory,
// PruneHistory) on a third of one connection, the calls one at a time, so
// that each one's server CPU is its own backends' (/proc/<pid>/schedstat:
// nanoseconds, user and system; sampled every 100 ms, so that a backend
// whose connection the pool closes keeps the CPU it was last seen with).
// It reports per row:
//
//   - off-pg-µs/row, on-pg-µs/row: the database CPU of everything the
//     cluster ran (claims, results, settings, reports, and the history in
//     the on arm); on/off-ratio their ratio over the whole run and
//     on/off-median the median of the iterations' ratios. They move by
//     more than the history's share from iteration to iteration, so they
//     bound it from above rather than measure it;
//   - history-µs/row: the history's own CPU at the rates the nodes run it
//     (each append's mean CPU once per node per 2 s report, each prune's
//     once per node a minute) per row at the arm's rate, and overhead-%:
//     that over the on arm's database CPU per row without the history,
//     the bound (at most 1%);
//   - append-µs, prune-µs: one append's (10 points) and one prune's CPU;
//     rows/s: the rate the producers reached; exited-backends: how many
//     backends exited during the runs (each may lose up to 100 ms of CPU).
//
// Run it with (about 8 minutes; PGSTORE_REQUIRE=1 fails rather than skips
// when the server cannot take more connections):
//
//	cd bench && PGSTORE_REQUIRE=1 go test -run '^$' -bench HistoryCost -benchtime 3x -timeout 30m
func BenchmarkHistoryCost(b *testing.B) {
	cpuAdmin = openPool(b, 2) // the parent's: a sub-benchmark's closes when it ends
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchHistoryCost(b, nodes) })
	}
}

func benchHistoryCost(b *testing.B, nodes int) {
	var arms [2]historyArm // [0]: History off, [1]: on
	var ratios []float64   // each iteration's on/off database CPU per row
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// The arm prepared second alternates: it starts the run having
		// idled less.
		var runs [2]*historyRun
		for _, on := range [][]int{{0, 1}, {1, 0}}[i%2] {
			runs[on] = prepareHistoryRun(b, on == 1, nodes)
		}
		var wg sync.WaitGroup
		for _, r := range runs {
			wg.Go(r.run)
		}
		wg.Wait()
		var pair [2]historyArm
		for on, r := range runs {
			pair[on] = r.finish(b)
			arms[on].add(pair[on])
		}
		if pair[0].dispatcher > 0 && pair[1].dispatcher >= 0 {
			r := pair[1].perRow(true) / pair[0].perRow(false)
			ratios = append(ratios, r)
			b.Logf("iteration %d: off %.1f µs/row (settings and reports %.2f) at %.0f rows/s, on %.1f µs/row (settings and reports %.2f, history %.2f) at %.0f rows/s: on/off %.3f",
				i, pair[0].perRow(false), pair[0].operatePerRow(), pair[0].rate(), pair[1].perRow(true), pair[1].operatePerRow(),
				pair[1].perRow(true)-pair[1].perRow(false), pair[1].rate(), r)
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
	b.ReportMetric(float64(on.exited+off.exited), "exited-backends")
	if on.appends == 0 || on.prunes == 0 {
		return // too short a run for a report (-benchtime=1x)
	}
	appendCPU := on.append / time.Duration(on.appends)
	pruneCPU := on.prune / time.Duration(on.prunes)
	perSecond := float64(nodes) * (appendCPU.Seconds()/historyReport.Seconds() + pruneCPU.Seconds()/historyPruneEvery.Seconds())
	history := perSecond / on.rate() * 1e6
	b.ReportMetric(history, "history-µs/row")
	b.ReportMetric(100*history/on.perRow(false), "overhead-%")
	b.ReportMetric(float64(appendCPU.Nanoseconds())/1000, "append-µs")
	b.ReportMetric(float64(pruneCPU.Nanoseconds())/1000, "prune-µs")
}

// historyArm sums one arm's runs: rows drained, the producer's time, the
// server CPU of the nodes' claims, results, settings and reports (< 0:
// unknown; operate: of it, settings and reports), and of their history
// appends and prunes with their counts.
type historyArm struct {
	rows            int
	took            time.Duration
	dispatcher      time.Duration
	operate         time.Duration
	append, prune   time.Duration
	appends, prunes int
	exited          int // backends that exited during the runs (their CPU counted as last seen)
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

// operatePerRow is the database CPU per row in µs of the settings and
// reports.
func (a historyArm) operatePerRow() float64 {
	return float64(a.operate.Nanoseconds()) / 1000 / float64(a.rows)
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
	a.operate += r.operate
	a.append += r.append
	a.prune += r.prune
	a.appends += r.appends
	a.prunes += r.prunes
	a.exited += r.exited
}

// historyRun is one arm's cluster, running until finish.
type historyRun struct {
	history  bool
	apps     []string // the cluster's pools: settings and reports first, then each node's claims
	meter    *historyMeter
	producer *pgstore.Store
	started  atomic.Int64
	cancel   context.CancelFunc
	ran      []chan error // each node's Run
	closers  []func()     // the arm's stores, then its pools
	out      historyArm
	err      error // run's
}

// prepareHistoryRun starts an arm's cluster of nodes on a fresh schema
// with its history seeded, and waits a second for it to settle.
func prepareHistoryRun(b *testing.B, history bool, nodes int) *historyRun {
	ctx := context.Background()
	operatePool, historyPool := openPool(b, 4), openPool(b, 1)
	schema := freshSchema(b, cpuAdmin, "history") // dropped through a pool that outlives the arm
	r := &historyRun{history: history, apps: []string{appOf(operatePool)}}
	// finish closes the arm's stores and pools, so that the iterations'
	// connections do not add up past the server's max_connections.
	var pools []*pgxpool.Pool
	b.Cleanup(r.close)
	open := func(pool *pgxpool.Pool) *pgstore.Store {
		pools = append(pools, pool)
		s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema})
		if err != nil {
			b.Fatalf("pgstore.New: %v", err)
		}
		r.closers = append(r.closers, func() { _ = s.Close() })
		return s
	}
	defer func() {
		for _, p := range pools {
			r.closers = append(r.closers, p.Close)
		}
	}()
	operate, hist := open(operatePool), open(historyPool)
	r.producer = open(openPool(b, 2))
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", historyNode, i)
	}
	seedHistory(b, hist, historyPool, schema, names, time.Now())
	r.meter = newHistoryMeter(b, operate, hist, historyPool)
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	for i, name := range names {
		claimPool := openPool(b, 0)
		r.apps = append(r.apps, appOf(claimPool))
		claims := open(claimPool)
		var owned []int
		for sh := i; sh < claims.ShardCount(); sh += nodes {
			owned = append(owned, sh)
		}
		frac, err := backpressure.NewOwnedShardFraction(owned, claims.ShardCount())
		if err != nil {
			b.Fatal(err)
		}
		bp, err := backpressure.New(backpressure.Config{BatchSize: dispatchBatch, DefaultQuota: backpressure.Unlimited}, frac)
		if err != nil {
			b.Fatal(err)
		}
		disp, err := dispatch.New(bp, claims, func(context.Context, outbox.Row) error { r.started.Add(1); return nil },
			dispatch.Options{Workers: dispatchWorkers, Logger: quietLogger(),
				Operate: &dispatch.Operate{Node: name, Store: r.meter, SharedSettings: true, History: history}})
		if err != nil {
			b.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- disp.Run(runCtx) }()
		r.ran = append(r.ran, ran)
	}
	time.Sleep(time.Second) // settings read, subscribed, idle
	return r
}

func appOf(pool *pgxpool.Pool) string {
	app, _ := appNames.Load(pool)
	return app.(string)
}

// run produces the arm's rows, waits until they all started, and measures
// the cluster's database CPU meanwhile; a failure goes to r.err. It runs
// beside the other arm's, on a goroutine of its own.
func (r *historyRun) run() {
	cpu := newCPUSampler(r.apps)
	began := time.Now()
	n, err := produceBatches(r.producer, historyFor())
	if err != nil {
		r.err = err
		return
	}
	took := time.Since(began)
	for deadline := time.Now().Add(time.Minute); r.started.Load() < int64(n); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r.err = fmt.Errorf("dispatch: %d of %d rows started after a minute", r.started.Load(), n)
			return
		}
	}
	time.Sleep(20 * time.Millisecond) // the last results written
	r.out = historyArm{rows: n, took: took}
	spent := cpu.stop()
	if spent == nil {
		r.out.dispatcher = -1
		return
	}
	for i, d := range spent {
		r.out.dispatcher += d
		if i == 0 {
			r.out.operate += d
		}
	}
	r.out.exited = cpu.exited
}

// cpuSampler follows the database CPU of the backends of some pools
// (by application_name) every 100 ms, so that a backend that exits (a
// connection the pool closed) keeps the CPU it was last seen with: at most
// 100 ms of one backend's CPU is lost per exit.
type cpuSampler struct {
	apps   []string
	first  []map[int]time.Duration // at the start
	last   []map[int]time.Duration // the greatest seen since
	exited int                     // backends seen that were gone at the end
	bad    bool                    // a sample could not be read
	done   chan struct{}
	wg     sync.WaitGroup
}

func newCPUSampler(apps []string) *cpuSampler {
	c := &cpuSampler{apps: apps, done: make(chan struct{})}
	for _, app := range apps {
		m := backendRuntime(context.Background(), cpuAdmin, app)
		c.bad = c.bad || m == nil
		c.first, c.last = append(c.first, m), append(c.last, maps.Clone(m))
	}
	c.wg.Go(func() {
		for {
			select {
			case <-c.done:
				return
			case <-time.After(100 * time.Millisecond):
				c.sample()
			}
		}
	})
	return c
}

// sample updates last; only the sampler's goroutine and stop (after it
// ended) call it.
func (c *cpuSampler) sample() []map[int]time.Duration {
	now := make([]map[int]time.Duration, len(c.apps))
	for i, app := range c.apps {
		now[i] = backendRuntime(context.Background(), cpuAdmin, app)
		if now[i] == nil {
			c.bad = true
			continue
		}
		for pid, t := range now[i] {
			if c.last[i] == nil {
				c.last[i] = map[int]time.Duration{}
			}
			c.last[i][pid] = max(c.last[i][pid], t)
		}
	}
	return now
}

// stop ends the sampling and returns each pool's CPU since the start (a
// backend opened since counts from 0), or nil if it could not be read.
func (c *cpuSampler) stop() []time.Duration {
	close(c.done)
	c.wg.Wait()
	now := c.sample()
	if c.bad {
		return nil
	}
	out := make([]time.Duration, len(c.apps))
	for i := range c.apps {
		for pid, t := range c.last[i] {
			out[i] += t - c.first[i][pid]
			if _, ok := now[i][pid]; !ok {
				c.exited++
			}
		}
	}
	return out
}

// finish stops the arm's cluster and returns what run measured, with its
// history's CPU; it fails b if anything failed.
func (r *historyRun) finish(b *testing.B) historyArm {
	r.cancel()
	for _, ran := range r.ran {
		if err := <-ran; err != nil {
			b.Fatalf("dispatch Run: %v", err)
		}
	}
	if r.err != nil {
		b.Fatal(r.err)
	}
	r.out.append, r.out.prune, r.out.appends, r.out.prunes = r.meter.take(b)
	if !r.history && r.out.appends+r.out.prunes > 0 {
		b.Fatalf("History off, yet %d appends and %d prunes", r.out.appends, r.out.prunes)
	}
	r.close()
	return r.out
}

// close closes the arm's stores, then its pools, once.
func (r *historyRun) close() {
	for _, c := range r.closers {
		c()
	}
	r.closers = nil
}

// seedHistory fills the history with what nodes of historyNamespaces
// namespaces, reporting every historyReport, leave at now in steady state:
// a point every report for a day, thinned as the prune a minute before now
// left it (outbox.ThinHistory).
func seedHistory(b *testing.B, s *pgstore.Store, pool *pgxpool.Pool, schema string, nodes []string, now time.Time) {
	ctx := context.Background()
	var points []outbox.HistoryPoint
	for at := now.Add(-outbox.HistoryRetention); at.Before(now); at = at.Add(historyReport) {
		for _, node := range nodes {
			for ns := range historyNamespaces {
				points = append(points, outbox.HistoryPoint{Node: node, At: at, Interval: historyReport,
					NamespaceCounters: outbox.NamespaceCounters{Namespace: fmt.Sprintf("ns%d", ns), Started: 400, Settled: 400, Backlog: 25}})
			}
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
// schedstat run time across the call. The nodes' calls take turns (mu).
type historyMeter struct {
	outbox.Operator
	mu              sync.Mutex // one history call at a time: each call's CPU is its own
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
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.runtime()
	err := m.h.AppendHistory(ctx, points)
	m.add(&m.append, &m.appends, before, err)
	return err
}

func (m *historyMeter) History(ctx context.Context, p outbox.HistoryParams) ([]outbox.HistoryPoint, error) {
	return m.h.History(ctx, p)
}

func (m *historyMeter) PruneHistory(ctx context.Context, now time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	m.mu.Lock()
	defer m.mu.Unlock()
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
// run time from /proc/<pid>/schedstat (user and system), nil when none
// can be read (the server is not on this machine).
func backendRuntime(ctx context.Context, admin *pgxpool.Pool, app string) map[int]time.Duration {
	pids, ok := backendPIDs(ctx, admin, app)
	if !ok {
		return nil
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if t := schedRuntime(int(pid)); t >= 0 {
			out[int(pid)] = t
		}
	}
	if len(out) == 0 && len(pids) > 0 {
		return nil // not on this machine
	}
	return out // less a backend that exited since the query
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
func produceBatches(s *pgstore.Store, d time.Duration) (int, error) {
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
			return n, fmt.Errorf("enqueue: %w", err)
		}
		n += len(ms)
	}
	return n, nil
}
