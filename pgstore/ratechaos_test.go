package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// The rate test's environment: a child process is the test binary run
// again with rateNode set. PGSTORE_CHAOS=1 (chaosLarge) runs the large
// variant, as for TestChaosMembership.
const (
	rateNode    = "PGSTORE_RATECHAOS_NODE"    // the child's node name
	rateSchema  = "PGSTORE_RATECHAOS_SCHEMA"  // the parent's schema
	rateJournal = "PGSTORE_RATECHAOS_JOURNAL" // the journal the children append to
	rateRate    = "PGSTORE_RATECHAOS_RATE"    // "perSecond/burst" of the limited namespace
)

// The rate test's namespaces: one rate-limited with a deep backlog, one
// with no limit at all.
const (
	rateLimited   = "limited"
	rateUnlimited = "unlimited"
)

// rateRun sizes one run of TestRateBoundAcrossProcesses.
type rateRun struct {
	rate    backpressure.Rate
	nodes   int // processes running at once
	backlog int // rows of the limited namespace, in two halves after idle spells
	kills   int // SIGKILLs, each followed at once by a restart under a new name
	wave    int // rows of the unlimited namespace enqueued at the start and at each kill but the last
}

// TestRateBoundAcrossProcesses runs dispatcher nodes as processes on one
// schema, each with membership on (so shards follow Join, heartbeats and
// lease lapses through Membership.Follow into each node's SetOwnedShards),
// against a rate-limited namespace's deep backlog and waves of an
// unlimited namespace, and SIGKILLs a node (restarting a new one at once)
// at even steps of the limited backlog's progress, so that shards move
// while the buckets run. The backlog comes in two halves, each after an
// idle spell in which every bucket fills, so that the burst term is
// reached: the busiest short windows come within a few rows of
// r·T + b + (k − 1). (Nodes whose buckets ignore their shards, each
// running at the whole rate, fail it at every window length.)
//
// A row starts when a claim takes it: that is what the buckets limit
// (tokens are spent by rows claimed). A trigger on the outbox records every
// claim (every increment of attempts) in the claim's own transaction with
// the database's clock_timestamp() and the claiming node (its
// application_name), so a claim is journaled exactly when it commits,
// even by a node killed just after, and a row claimed again after its
// claimant died counts again.
//
// Over every window [a, a+T] anchored at a start, for T in 0.5 s, 1 s, 2 s,
// 5 s and the whole run, the limited namespace's starts must be at most
//
//	r·(T + S) + b + (k − 1),   S = D + 5e-4·T
//
// with k the nodes that started limited rows in the window (a node that
// starts nothing adds nothing: the bound's k − 1 is the rounding up of
// the bursts of the nodes whose tokens are spent, see backpressure.Rate).
// S is the slack between the two clocks, derived, not tuned. A node's
// bucket spends a row's token when its sweep reserves the plan's grants,
// before the claim statement runs (pgstore is no TxSweeper, which each node
// journals; a TxSweeper would spend after its transaction, and S would be
// 2D), and the trigger's time lies after that in the same sweep: each
// start's recorded time is at most D after its bucket time, D the longest
// sweep that granted the limited namespace rows and claimed (dispatch's
// SweepEvent.Duration, journaled by the nodes). So a window of length T on
// the database's clock covers at most T + D of bucket time. The buckets
// measure time on the monotonic clock and the database on the host's
// wall clock (the host is shared, so it is one clock, in microseconds in
// the database); NTP slews the wall clock by at most 500 ppm, the
// 5e-4·T. Nothing else is added: a restarted process's bucket starts
// empty, and a killed process's bucket is gone.
//
// It also checks that every row is settled exactly once, and that the
// unlimited namespace is not held by the limited one: in its busiest
// second it starts more rows than the rate bound would let a limited
// namespace start, and every wave of it is claimed before the limited
// backlog is drained. The waves come at the start and with each kill but
// the last, so each has at least two steps of the backlog (7.5 s at the
// rate by default, 10.9 s in the large run) still to start after it, more
// than the few seconds a wave's rows on a killed node's shards wait for
// them to be owned again (a membership lease and a heartbeat, 5 s).
//
// 3 nodes, 40 rows/s with a burst of 20, a backlog of 600 and 3 kills by
// default; PGSTORE_CHAOS=1 runs 4 nodes, 100 rows/s with a burst of 50, a
// backlog of 6,000 and 10 kills (make chaos).
func TestRateBoundAcrossProcesses(t *testing.T) {
	if node := os.Getenv(rateNode); node != "" {
		rateChild(t, node)
		return
	}
	run := rateRun{rate: backpressure.Rate{PerSecond: 40, Burst: 20}, nodes: 3, backlog: 600, kills: 3, wave: 200}
	if os.Getenv(chaosLarge) == "1" {
		run = rateRun{rate: backpressure.Rate{PerSecond: 100, Burst: 50}, nodes: 4, backlog: 6000, kills: 10, wave: 400}
	}
	newRateChaos(t, run).run()
}

// rateChild is one node: a dispatcher over the membership's fenced store,
// its shards following the membership, until its stdin closes.
func rateChild(t *testing.T, node string) {
	f, err := os.OpenFile(os.Getenv(rateJournal), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("child: journal: %v", err)
	}
	defer f.Close()
	record := func(format string, args ...any) {
		// One write per line, O_APPEND: lines of concurrent processes do not interleave.
		if _, err := f.WriteString(fmt.Sprintf(format+"\n", args...)); err != nil {
			panic("rate child: journal: " + err.Error())
		}
	}
	var rate backpressure.Rate
	if _, err := fmt.Sscanf(os.Getenv(rateRate), "%g/%d", &rate.PerSecond, &rate.Burst); err != nil {
		t.Fatalf("child: %s: %v", rateRate, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	// The trigger names the claiming node by its session's application_name.
	u, err := url.Parse(databaseURL())
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	qs := u.Query()
	qs.Set("application_name", node)
	u.RawQuery = qs.Encode()
	store, err := pgstore.Open(ctx, u.String(), pgstore.Options{Schema: os.Getenv(rateSchema), Lease: chaosClaimLease})
	if err != nil {
		t.Fatalf("child: Open: %v", err)
	}
	defer store.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := store.Join(ctx, pgstore.MembershipOptions{Node: node, Lease: chaosMemberLease, Heartbeat: chaosHeartbeat, Logger: logger})
	if err != nil {
		t.Fatalf("child: Join: %v", err)
	}
	cfg := backpressure.Config{BatchSize: 32, DefaultQuota: backpressure.Unlimited, Rates: map[string]backpressure.Rate{rateLimited: rate}}
	bp, err := backpressure.New(cfg, m.Owned())
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	go func() { _ = m.Follow(ctx, bp) }()
	// Where a sweep spends its tokens, for the parent's slack: before its
	// claim, or after its transaction (a TxSweeper).
	_, tx := m.Store().Claimer().(backpressure.TxSweeper[outbox.Row])
	record("sweeper %s %t", node, tx)
	handler := func(ctx context.Context, row outbox.Row) error {
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond) // so rows run side by side
		return nil
	}
	d, err := dispatch.New(bp, m.Store(), handler, dispatch.Options{
		Workers:      16,
		PollInterval: 20 * time.Millisecond,
		Backoff:      dispatch.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond},
		Logger:       logger,
		Metrics:      rateMetrics{chaosSettles{record: record}},
	})
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatalf("child: Run: %v", err)
	}
	_ = m.Leave(context.Background())
}

// rateMetrics journals every settle (chaosSettles) and the duration of
// every sweep that claimed rows with a grant of the limited namespace.
type rateMetrics struct{ chaosSettles }

func (m rateMetrics) Swept(e dispatch.SweepEvent) {
	if e.Err != nil || e.Claimed == 0 {
		return
	}
	granted := 0
	for _, c := range e.Plan.Claims {
		if c.Route.Namespace == rateLimited {
			granted += c.Limit
		}
	}
	if granted > 0 {
		m.record("sweep %d %d", granted, e.Duration.Microseconds())
	}
}

// rateChaos is the parent.
type rateChaos struct {
	t         *testing.T
	ctx       context.Context
	size      rateRun
	schema    string
	q         string
	store     *pgstore.Store
	dir       string
	journal   string
	rnd       *rand.Rand
	*children     // the node processes
	rows      int // rows enqueued
	waves     []rateWave
	// slackSweeps is how many longest sweeps the slack S counts: 1 when
	// every node spends its tokens before its claim, 2 when one may spend
	// them after (a TxSweeper).
	slackSweeps time.Duration
}

// rateWave is a wave of the unlimited namespace: its rows' keys are
// numbered [from, to), enqueued at at on the database's clock.
type rateWave struct {
	at       time.Time
	from, to int
}

func newRateChaos(t *testing.T, run rateRun) *rateChaos {
	c := &rateChaos{t: t, ctx: t.Context(), size: run, schema: testSchema(t), dir: t.TempDir(),
		rnd: rand.New(rand.NewPCG(24, uint64(run.backlog)))}
	c.children = newChildren(t, c.dir, "TestRateBoundAcrossProcesses")
	c.q = pgx.Identifier{c.schema}.Sanitize()
	c.journal = filepath.Join(c.dir, "journal")
	if err := os.WriteFile(c.journal, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(c.ctx, adminPool, pgstore.Options{Schema: c.schema, Lease: chaosClaimLease})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.store = s
	// Every claim, in the claim's transaction: the row, its attempt, the
	// claiming session's node and the database's clock.
	if _, err := adminPool.Exec(c.ctx, `
CREATE TABLE `+c.q+`.starts (
	dispatch_key text        NOT NULL,
	namespace    text        NOT NULL,
	attempt      integer     NOT NULL,
	node         text        NOT NULL,
	at           timestamptz NOT NULL
);
CREATE FUNCTION `+c.q+`.record_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO `+c.q+`.starts VALUES (NEW.dispatch_key, NEW.namespace, NEW.attempts,
		current_setting('application_name'), clock_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER record_start AFTER UPDATE ON `+c.q+`.outbox FOR EACH ROW
	WHEN (NEW.attempts > OLD.attempts) EXECUTE FUNCTION `+c.q+`.record_start();`); err != nil {
		t.Fatalf("the starts trigger: %v", err)
	}
	return c
}

// start runs a new node process and returns its name.
func (c *rateChaos) start() string {
	return c.spawn(func(node string) []string {
		return []string{rateNode + "=" + node, rateSchema + "=" + c.schema, rateJournal + "=" + c.journal,
			rateRate + "=" + strconv.FormatFloat(c.size.rate.PerSecond, 'g', -1, 64) + "/" + strconv.Itoa(c.size.rate.Burst)}
	})
}

// converge waits until every shard is owned, under a live lease, by the
// live node AssignShards gives it (the nodes have joined and taken their
// shards).
func (c *rateChaos) converge() {
	deadline := time.Now().Add(2 * time.Minute) // a failsafe, not an assertion of speed
	for time.Now().Before(deadline) {
		var live, owners []string
		if err := adminPool.QueryRow(c.ctx, `SELECT
			ARRAY(SELECT node FROM `+c.q+`.members WHERE lease_expires_at > clock_timestamp() ORDER BY node),
			ARRAY(SELECT CASE WHEN lease_expires_at > clock_timestamp() THEN coalesce(owner, '') ELSE '' END
				FROM `+c.q+`.shard_owners ORDER BY shard)`).Scan(&live, &owners); err != nil {
			c.t.Fatal(err)
		}
		assigned, err := pgstore.AssignShards(live, c.store.ShardCount())
		if err != nil {
			c.t.Fatal(err)
		}
		if len(live) == len(c.nodes) && slices.Equal(owners, assigned) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("ownership never converged over %d nodes", len(c.nodes))
}

// enqueue writes n rows of namespace in one batch.
func (c *rateChaos) enqueue(namespace string, n int) {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: fmt.Sprintf("%s-%06d", namespace, c.rows+i), Namespace: namespace, TaskQueue: "q"}
	}
	if _, err := c.store.Enqueue(c.ctx, msgs); err != nil {
		c.t.Fatalf("Enqueue: %v", err)
	}
	c.rows += n
}

// wave enqueues a wave of the unlimited namespace and notes when.
func (c *rateChaos) wave() {
	var at time.Time
	if err := adminPool.QueryRow(c.ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		c.t.Fatal(err)
	}
	c.waves = append(c.waves, rateWave{at: at, from: c.rows, to: c.rows + c.size.wave})
	c.enqueue(rateUnlimited, c.size.wave)
}

// limitedStarted is how many distinct limited rows were claimed so far.
func (c *rateChaos) limitedStarted() int {
	var n int
	if err := adminPool.QueryRow(c.ctx, `SELECT count(DISTINCT dispatch_key) FROM `+c.q+`.starts WHERE namespace = $1`, rateLimited).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// rateStart is one claim of a row, as the trigger recorded it.
type rateStart struct {
	key, namespace, node string
	attempt              int
	at                   time.Time
}

func (c *rateChaos) run() {
	t, run := c.t, c.size
	c.wave()
	for range run.nodes {
		c.start()
	}
	// The limited backlog comes in two halves, each once the buckets are
	// full (an idle spell of twice the b/r a bucket takes to fill, at any
	// share), so the run has two bursts: one on the shards as first
	// assigned, one after kills and restarts moved them.
	fill := time.Duration(2 * float64(run.rate.Burst) / run.rate.PerSecond * float64(time.Second))
	c.converge()
	time.Sleep(fill)
	half := run.backlog / 2
	c.enqueue(rateLimited, half)
	// Kill at even steps of the limited backlog's progress (never on a
	// clock): the i-th kill once i/(kills+1) of it has started.
	deadline := time.Now().Add(5 * time.Minute) // a failsafe, not an assertion of speed
	await := func(n int) {
		for c.limitedStarted() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the limited backlog stalled at %d of %d rows started", c.limitedStarted(), run.backlog)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	second := func() {
		await(half)
		time.Sleep(fill)
		c.enqueue(rateLimited, run.backlog-half)
	}
	for kill := 1; kill <= run.kills; kill++ {
		at := kill * run.backlog / (run.kills + 1)
		if prev := (kill - 1) * run.backlog / (run.kills + 1); prev < half && at >= half {
			second()
		}
		await(at)
		live := slices.Sorted(func(yield func(string) bool) {
			for n := range c.nodes {
				if !yield(n) {
					return
				}
			}
		})
		victim := live[c.rnd.IntN(len(live))]
		if err := c.nodes[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL to %s: %v", victim, err)
		}
		<-c.nodes[victim].done
		delete(c.nodes, victim)
		c.start()
		if kill < run.kills {
			c.wave()
		}
	}
	if run.kills == 0 {
		second()
	}
	for {
		st, err := c.store.Stats(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Settled == c.rows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for n, p := range c.nodes {
		_ = p.stdin.Close()
		if err := <-p.done; err != nil {
			t.Errorf("%s: %v", n, err)
		}
		delete(c.nodes, n)
	}

	starts := c.starts()
	sweepMax, sweeps := c.checkSettles(starts)
	// S = D, or 2D if a node's sweeps are transactions (see the test's doc).
	c.slackSweeps = 1
	sweepers := 0
	c.eachLine(func(f []string) {
		if f[0] == "sweeper" && len(f) == 3 {
			if sweepers++; f[2] != "false" {
				c.slackSweeps = 2
			}
		}
	})
	if sweepers == 0 {
		t.Fatal("no node journaled how it sweeps")
	}
	var limited, unlimited []rateStart
	for _, s := range starts {
		if s.namespace == rateLimited {
			limited = append(limited, s)
		} else {
			unlimited = append(unlimited, s)
		}
	}
	c.checkBound(limited, sweepMax)
	c.checkUnlimited(limited, unlimited, sweepMax)

	var moves int
	if err := adminPool.QueryRow(c.ctx, `SELECT count(*) FROM `+c.q+`.shard_epochs`).Scan(&moves); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows (%d limited at %v/s burst %d, %d unlimited in %d waves); %d node processes, %d SIGKILLed; %d shard acquisitions over %d shards; %d claims, %d sweeps journaled, longest sweep granting the limited namespace D = %v, slack S = %d·D + T/2000",
		c.rows, run.backlog, run.rate.PerSecond, run.rate.Burst, c.rows-run.backlog, len(c.waves), c.started, run.kills,
		moves, c.store.ShardCount(), len(starts), sweeps, sweepMax, c.slackSweeps)
}

// starts reads every claim the trigger recorded, oldest first.
func (c *rateChaos) starts() []rateStart {
	rows, err := adminPool.Query(c.ctx, `SELECT dispatch_key, namespace, node, attempt, at FROM `+c.q+`.starts ORDER BY at`)
	if err != nil {
		c.t.Fatal(err)
	}
	var (
		s   rateStart
		out []rateStart
	)
	if _, err := pgx.ForEachRow(rows, []any{&s.key, &s.namespace, &s.node, &s.attempt, &s.at}, func() error {
		out = append(out, s)
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// checkSettles: every row settled, each exactly once; every claim of every
// row recorded, once per attempt. It returns the longest claiming sweep
// journaled, and how many were.
func (c *rateChaos) checkSettles(starts []rateStart) (time.Duration, int) {
	st, err := c.store.Stats(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	if want := (outbox.Stats{Settled: c.rows, Total: c.rows}); st != want {
		c.t.Errorf("Stats = %+v, want %+v", st, want)
	}
	attempts := map[string][]int{}
	for _, s := range starts {
		attempts[s.key] = append(attempts[s.key], s.attempt)
	}
	rows, err := adminPool.Query(c.ctx, `SELECT dispatch_key, attempts FROM `+c.q+`.outbox`)
	if err != nil {
		c.t.Fatal(err)
	}
	var (
		key string
		n   int
	)
	bad := 0
	if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error {
		got := attempts[key]
		slices.Sort(got)
		want := make([]int, n)
		for i := range want {
			want[i] = i + 1
		}
		if !slices.Equal(got, want) {
			if bad++; bad <= 10 {
				c.t.Errorf("row %s: claims recorded for attempts %v, want %v", key, got, want)
			}
		}
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	settles := map[string]int{}
	var (
		sweepMax time.Duration
		sweeps   int
	)
	c.eachLine(func(f []string) {
		switch {
		case f[0] == "settle" && len(f) == 3:
			settles[f[1]]++
		case f[0] == "sweep" && len(f) == 3:
			if us, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				sweeps++
				sweepMax = max(sweepMax, time.Duration(us)*time.Microsecond)
			}
		}
	})
	for k, n := range settles {
		if n > 1 {
			c.t.Errorf("row %s settled %d times, want once", k, n)
		}
	}
	if sweeps == 0 {
		c.t.Errorf("no sweeps journaled")
	}
	return sweepMax, sweeps
}

// rateWindows are the window lengths checked; 0 stands for the whole run.
var rateWindows = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 0}

// checkBound checks the rate bound over every window anchored at a start
// (the windows with the most starts are among them) and logs, per window
// length, the busiest window against its bound.
func (c *rateChaos) checkBound(limited []rateStart, sweepMax time.Duration) {
	r, b := c.size.rate.PerSecond, float64(c.size.rate.Burst)
	if len(limited) == 0 {
		c.t.Fatal("no limited starts recorded")
	}
	whole := limited[len(limited)-1].at.Sub(limited[0].at)
	for _, T := range rateWindows {
		name := T.String()
		if T == 0 {
			T, name = whole, "whole run ("+whole.Round(time.Millisecond).String()+")"
		}
		var (
			nodes = map[string]int{} // starts per node in the window
			j     = 0
			worst struct {
				starts, k int
				bound     float64
				at        time.Duration
			}
			worstTight = math.Inf(-1) // starts − (r·T + b + k − 1), without the sweep slack
			bad        = 0
		)
		for i := range limited {
			for j < len(limited) && limited[j].at.Sub(limited[i].at) <= T {
				nodes[limited[j].node]++
				j++
			}
			starts, k := j-i, len(nodes)
			bound := r*(T+c.slack(T, sweepMax)).Seconds() + b + float64(k-1)
			if float64(starts) > bound {
				if bad++; bad <= 5 {
					c.t.Errorf("window %s from %v: %d limited rows started by %d nodes, above r·(T + S) + b + k − 1 = %.1f (D = %v)",
						name, limited[i].at.Sub(limited[0].at), starts, k, bound, sweepMax)
				}
			}
			if float64(starts)-bound > float64(worst.starts)-worst.bound || worst.starts == 0 {
				worst.starts, worst.k, worst.bound, worst.at = starts, k, bound, limited[i].at.Sub(limited[0].at)
			}
			worstTight = max(worstTight, float64(starts)-(r*T.Seconds()+b+float64(k-1)))
			if nodes[limited[i].node]--; nodes[limited[i].node] == 0 {
				delete(nodes, limited[i].node)
			}
		}
		if bad > 5 {
			c.t.Errorf("window %s: %d windows above the bound in all", name, bad)
		}
		c.t.Logf("T = %s: busiest window (from %v) %d starts by %d nodes, bound r·(T+S)+b+k−1 = %.1f; starts − (r·T + b + k − 1) at most %.1f",
			name, worst.at.Round(time.Millisecond), worst.starts, worst.k, worst.bound, worstTight)
	}
	c.t.Logf("limited: %d starts (%d rows) in %v, %.1f/s against a rate of %v/s",
		len(limited), c.size.backlog, whole.Round(time.Millisecond), float64(len(limited)-1)/whole.Seconds(), r)
}

// checkUnlimited checks that the unlimited namespace was not held by the
// limited one: its busiest second started more rows than a namespace
// under the limited one's rate could (r·(1 s + S) + b + k − 1 with k every
// node process started), and each of its waves, enqueued while the
// limited backlog was deep, was claimed in full before the limited
// backlog's last start.
func (c *rateChaos) checkUnlimited(limited, unlimited []rateStart, sweepMax time.Duration) {
	r, b := c.size.rate.PerSecond, float64(c.size.rate.Burst)
	first := map[string]time.Time{}
	for _, s := range unlimited {
		if _, ok := first[s.key]; !ok {
			first[s.key] = s.at
		}
	}
	busiest, j := 0, 0
	for i := range unlimited {
		for j < len(unlimited) && unlimited[j].at.Sub(unlimited[i].at) <= time.Second {
			j++
		}
		busiest = max(busiest, j-i)
	}
	if cap := r*(time.Second+c.slack(time.Second, sweepMax)).Seconds() + b + float64(c.started-1); float64(busiest) <= cap {
		c.t.Errorf("unlimited: at most %d rows started in any second, within what the rate allows the limited namespace (%.1f): it looks rate limited", busiest, cap)
	}
	last := limited[len(limited)-1].at
	var slowest time.Duration
	for _, w := range c.waves {
		var done time.Time
		for k := w.from; k < w.to; k++ {
			at, ok := first[fmt.Sprintf("%s-%06d", rateUnlimited, k)]
			if !ok {
				c.t.Errorf("unlimited: row %d of the wave enqueued at %v never claimed", k, w.at)
				continue
			}
			done = laterOf(done, at)
		}
		slowest = max(slowest, done.Sub(w.at))
		if !done.Before(last) {
			c.t.Errorf("unlimited: the wave enqueued at %v was claimed in full only at %v, not before the limited backlog's last start %v", w.at, done, last)
		}
	}
	c.t.Logf("unlimited: %d rows in %d waves, busiest second %d starts; the slowest wave was claimed in full %v after it was enqueued, the limited backlog took %v",
		len(first), len(c.waves), busiest, slowest.Round(time.Millisecond), last.Sub(limited[0].at).Round(time.Millisecond))
}

// slack is S for a window of length T: the longest sweep D (twice if a
// node's sweeps are transactions), and the wall clock's slew over T (see
// TestRateBoundAcrossProcesses).
func (c *rateChaos) slack(T, D time.Duration) time.Duration { return c.slackSweeps*D + T/2000 }

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (c *rateChaos) eachLine(fn func([]string)) {
	(&chaos{t: c.t, journal: c.journal}).eachLine(fn)
}
