package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// The chaos test's environment: a child process is the test binary run
// again with chaosNode set.
const (
	chaosNode    = "PGSTORE_CHAOS_NODE"    // the child's node name
	chaosSchema  = "PGSTORE_CHAOS_SCHEMA"  // the parent's schema
	chaosJournal = "PGSTORE_CHAOS_JOURNAL" // the journal the children append to
	chaosLarge   = "PGSTORE_CHAOS"         // "1": the large run (make chaos)
)

// The chaos cluster's settings. The membership lease outlives a claim
// lease plus a heartbeat, so a node that dies or is paused still owns its
// shards (and its ceiling still counts) while its claimed rows' leases
// run out.
const (
	chaosClaimLease  = 2 * time.Second
	chaosMemberLease = 4 * time.Second
	chaosHeartbeat   = time.Second
	chaosQuota       = 4
	chaosNamespaces  = 10
)

// TestChaosMembership runs dispatcher nodes as processes on one schema,
// each with membership on, and SIGKILLs, SIGSTOPs past their lease (then
// SIGCONTs), restarts and adds them while rows arrive. It checks that every
// row is settled exactly once; from the journal of claims (node, shard,
// the claim's database time) and the ownership history (shard_epochs), that
// every claim fell inside an epoch its node held, so no two nodes claimed
// on one shard at overlapping times; at every sample, per namespace, that
// the cluster's live claimed rows are at most the sum of the current
// owners' ceilings; and after each join and leave, that ownership matches
// AssignShards over the live members within two membership leases on the
// database's clock.
//
// 2,000 rows and 6 events by default; PGSTORE_CHAOS=1 runs 20,000 rows and
// 16 events (make chaos).
func TestChaosMembership(t *testing.T) {
	if node := os.Getenv(chaosNode); node != "" {
		chaosChild(t, node)
		return
	}
	rows, events := 2000, 6
	if os.Getenv(chaosLarge) == "1" {
		rows, events = 20000, 16
	}
	c := newChaos(t, rows)
	c.run(events)
}

// chaosChild is one node: a dispatcher over the membership's fenced store,
// its shards following the membership, until its stdin closes.
func chaosChild(t *testing.T, node string) {
	f, err := os.OpenFile(os.Getenv(chaosJournal), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("child: journal: %v", err)
	}
	defer f.Close()
	record := func(format string, args ...any) {
		// One write per line, O_APPEND: lines of concurrent processes do not interleave.
		if _, err := f.WriteString(fmt.Sprintf(format+"\n", args...)); err != nil {
			panic("chaos child: journal: " + err.Error())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	store, err := pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: os.Getenv(chaosSchema), Lease: chaosClaimLease})
	if err != nil {
		t.Fatalf("child: Open: %v", err)
	}
	defer store.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := store.Join(ctx, pgstore.MembershipOptions{Node: node, Lease: chaosMemberLease, Heartbeat: chaosHeartbeat, Logger: logger})
	if err != nil {
		t.Fatalf("child: Join: %v", err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 32, DefaultQuota: chaosQuota}, m.Owned())
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	go func() { _ = m.Follow(ctx, bp) }()
	handler := func(ctx context.Context, row outbox.Row) error {
		record("claim %s %d %d", node, row.Shard, row.ClaimedAt.UnixMicro())
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond) // so rows run side by side
		return nil
	}
	d, err := dispatch.New(bp, m.Store(), handler, dispatch.Options{
		Workers:      8,
		PollInterval: 20 * time.Millisecond,
		Backoff:      dispatch.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond},
		Logger:       logger,
		Metrics:      chaosSettles{record: record},
	})
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatalf("child: Run: %v", err)
	}
	_ = m.Leave(context.Background())
}

// chaosSettles journals every settle the store applied.
type chaosSettles struct {
	dispatch.NopMetrics
	record func(format string, args ...any)
}

func (s chaosSettles) Completed(e dispatch.CompletionEvent) {
	if e.State == outbox.StateSettled {
		s.record("settle %s %d", e.Row.DispatchKey, e.Row.Token)
	}
}

// chaos is the parent: the schema, the nodes it runs, the sampler.
type chaos struct {
	t         *testing.T
	ctx       context.Context
	schema    string
	q         string // the quoted schema
	store     *pgstore.Store
	dir       string
	journal   string
	rows      int
	next      int // rows enqueued so far
	rnd       *rand.Rand
	*children // the node processes
	samples   int
	stopSamp  chan struct{}
	sampled   sync.WaitGroup

	mu         sync.Mutex
	violations []string
}

func newChaos(t *testing.T, rows int) *chaos {
	c := &chaos{t: t, ctx: t.Context(), schema: testSchema(t), dir: t.TempDir(), rows: rows,
		rnd: rand.New(rand.NewPCG(16, uint64(rows))), stopSamp: make(chan struct{})}
	c.children = newChildren(t, c.dir, "TestChaosMembership")
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
	return c
}

// start runs a new node process and returns its name.
func (c *chaos) start() string {
	return c.spawn(func(node string) []string {
		return []string{chaosNode + "=" + node, chaosSchema + "=" + c.schema, chaosJournal + "=" + c.journal}
	})
}

func (c *chaos) signal(node string, sig syscall.Signal) {
	if err := c.nodes[node].cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("%v to %s: %v", sig, node, err)
	}
}

// dbNow is the database's clock.
func (c *chaos) dbNow() time.Time {
	var now time.Time
	if err := adminPool.QueryRow(c.ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		c.t.Fatal(err)
	}
	return now
}

// joinedAt waits for node to be a live member whose membership began
// after since, and returns when it began.
func (c *chaos) joinedAt(node string, since time.Time) time.Time {
	deadline := time.Now().Add(2 * time.Minute) // a failsafe, not an assertion of speed
	for time.Now().Before(deadline) {
		var joined time.Time
		err := adminPool.QueryRow(c.ctx, `SELECT joined_at FROM `+c.q+`.members
			WHERE node = $1 AND lease_expires_at > clock_timestamp() AND joined_at > $2`, node, since).Scan(&joined)
		if err == nil {
			return joined
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%s never joined", node)
	return time.Time{}
}

// converge waits until the live members are exactly want and every shard
// is owned, under a live lease, by the node AssignShards gives it over
// them, and fails if that took longer than two membership leases after
// since, on the database's clock. It returns how long it took.
func (c *chaos) converge(what string, since time.Time, want []string) time.Duration {
	slices.Sort(want)
	deadline := time.Now().Add(2 * time.Minute) // a failsafe, not an assertion of speed
	for time.Now().Before(deadline) {
		var (
			now    time.Time
			live   []string
			owners []string
		)
		err := adminPool.QueryRow(c.ctx, `SELECT clock_timestamp(),
			ARRAY(SELECT node FROM `+c.q+`.members WHERE lease_expires_at > clock_timestamp() ORDER BY node),
			ARRAY(SELECT CASE WHEN lease_expires_at > clock_timestamp() THEN coalesce(owner, '') ELSE '' END
				FROM `+c.q+`.shard_owners ORDER BY shard)`).Scan(&now, &live, &owners)
		if err != nil {
			c.t.Fatal(err)
		}
		assigned, err := pgstore.AssignShards(live, c.store.ShardCount())
		if err != nil {
			c.t.Fatal(err)
		}
		if slices.Equal(live, want) && slices.Equal(owners, assigned) {
			took := now.Sub(since)
			if took > 2*chaosMemberLease {
				c.t.Errorf("%s: ownership converged %v after, above two leases (%v)", what, took, 2*chaosMemberLease)
			}
			return took
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%s: ownership never converged to %v", what, want)
	return 0
}

func (c *chaos) live() []string {
	var live []string
	for n, p := range c.nodes {
		if !p.stopped {
			live = append(live, n)
		}
	}
	return live
}

// enqueueUpTo enqueues rows until n, in batches, spread over the namespaces.
func (c *chaos) enqueueUpTo(n int) {
	for c.next < n {
		batch := min(n-c.next, 1+c.rnd.IntN(100))
		msgs := make([]outbox.Message, batch)
		for i := range msgs {
			k := c.next + i
			msgs[i] = outbox.Message{DispatchKey: fmt.Sprintf("chaos-%06d", k), Namespace: fmt.Sprintf("tenant-%d", k%chaosNamespaces), TaskQueue: "q"}
		}
		if _, err := c.store.Enqueue(c.ctx, msgs); err != nil {
			c.t.Fatalf("Enqueue: %v", err)
		}
		c.next += batch
	}
}

// sample checks, in one snapshot, that per namespace the live claimed rows
// are at most the sum over the nodes owning shards under a live lease of
// ceil(quota × owned / shard count).
func (c *chaos) sample() {
	rows, err := adminPool.Query(c.ctx, `
SELECT 0, o.namespace, count(*) FROM `+c.q+`.outbox o
WHERE o.state = 'claimed' AND o.lease_expires_at > now() GROUP BY o.namespace
UNION ALL
SELECT 1, s.owner, count(*) FROM `+c.q+`.shard_owners s
WHERE s.owner IS NOT NULL AND s.lease_expires_at > now() GROUP BY s.owner`)
	if err != nil {
		if c.ctx.Err() == nil {
			c.t.Errorf("sample: %v", err)
		}
		return
	}
	var (
		kind    int
		name    string
		n       int64
		claimed = map[string]int64{}
		bound   int64
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &name, &n}, func() error {
		if kind == 0 {
			claimed[name] = n
		} else {
			f, err := backpressure.NewOwnedShardFraction(firstShards(int(n)), c.store.ShardCount())
			if err != nil {
				return err
			}
			bound += int64(f.Ceiling(chaosQuota))
		}
		return nil
	})
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples++
	for ns, k := range claimed {
		if k > bound {
			c.violations = append(c.violations, fmt.Sprintf("%s: %d rows running, above the owners' ceilings' sum %d", ns, k, bound))
		}
	}
}

func (c *chaos) run(events int) {
	t := c.t
	c.sampled.Add(1)
	go func() {
		defer c.sampled.Done()
		for {
			select {
			case <-c.stopSamp:
				return
			case <-time.After(25 * time.Millisecond):
				c.sample()
			}
		}
	}()

	since := c.dbNow()
	for range 4 {
		c.start()
	}
	c.converge("start of 4 nodes", since, c.live())
	perEvent := c.rows / (events + 1)
	kinds := map[string]int{}
	var worst time.Duration
	for e := range events {
		c.enqueueUpTo((e + 1) * perEvent)
		live := c.live()
		slices.Sort(live)
		kind := []string{"stop", "kill", "add"}[c.rnd.IntN(3)]
		if e < 3 { // each kind at least once
			kind = []string{"stop", "kill", "add"}[e]
		}
		if len(live) <= 2 {
			kind = "add"
		}
		kinds[kind]++
		victim := live[c.rnd.IntN(len(live))]
		switch kind {
		case "kill": // SIGKILL, then a restart under a new name
			c.signal(victim, syscall.SIGKILL)
			<-c.nodes[victim].done
			delete(c.nodes, victim)
			at := c.dbNow()
			worst = max(worst, c.converge("kill of "+victim, at, c.live()))
			node := c.start()
			worst = max(worst, c.converge("restart as "+node, c.joinedAt(node, at), c.live()))
		case "stop": // SIGSTOP past the lease, then SIGCONT: a leave and a rejoin
			c.signal(victim, syscall.SIGSTOP)
			c.nodes[victim].stopped = true
			at := c.dbNow()
			worst = max(worst, c.converge("stop of "+victim, at, c.live()))
			c.signal(victim, syscall.SIGCONT)
			c.nodes[victim].stopped = false
			worst = max(worst, c.converge("resume of "+victim, c.joinedAt(victim, at), c.live()))
		case "add":
			at := c.dbNow()
			node := c.start()
			worst = max(worst, c.converge("add of "+node, c.joinedAt(node, at), c.live()))
		}
	}
	c.enqueueUpTo(c.rows)
	deadline := time.Now().Add(5 * time.Minute) // a failsafe
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
	close(c.stopSamp)
	c.sampled.Wait()
	for n, p := range c.nodes {
		_ = p.stdin.Close()
		if err := <-p.done; err != nil {
			t.Errorf("%s: %v", n, err)
		}
		delete(c.nodes, n)
	}

	c.checkSettles()
	claims := c.checkClaims()
	c.mu.Lock()
	for i, v := range c.violations {
		if i == 10 {
			t.Errorf("… %d violations of the ceilings in all", len(c.violations))
			break
		}
		t.Errorf("ceiling: %s", v)
	}
	c.mu.Unlock()
	t.Logf("%d rows, %d tenants, %d node processes started, events %v; %d claims checked against the ownership history, %d ceiling samples; slowest convergence %v (bound %v)",
		c.rows, chaosNamespaces, c.started, kinds, claims, c.samples, worst, 2*chaosMemberLease)
}

// checkSettles: every row settled, each exactly once.
func (c *chaos) checkSettles() {
	st, err := c.store.Stats(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	if want := (outbox.Stats{Settled: c.rows, Total: c.rows}); st != want {
		c.t.Errorf("Stats = %+v, want %+v", st, want)
	}
	settles := map[string]int{}
	c.eachLine(func(f []string) {
		if f[0] == "settle" && len(f) == 3 {
			settles[f[1]]++
		}
	})
	// A settle is journaled after the store applied it, so a node killed
	// between its Complete's commit and the journal write leaves a settled
	// row with no line: the database (every row settled, above; settled is
	// final, so once) is the witness for those, the journal for the rest.
	unjournaled := 0
	for k := range c.rows {
		key := fmt.Sprintf("chaos-%06d", k)
		switch n := settles[key]; {
		case n > 1:
			c.t.Errorf("row %s settled %d times, want once", key, n)
		case n == 0:
			unjournaled++
		}
	}
	if unjournaled > 0 {
		c.t.Logf("%d settled rows had no journal line: their node was killed after the commit", unjournaled)
	}
}

// checkClaims: each claim (node, shard, database time) lies inside an
// epoch of that shard its node held: acquired at or before the claim, and
// the shard's next acquisition after it. Epochs partition each shard's
// time, so claims of two nodes on one shard never overlap.
func (c *chaos) checkClaims() int {
	type epoch struct {
		owner    string
		acquired time.Time
	}
	history := map[int][]epoch{}
	rows, err := adminPool.Query(c.ctx, `SELECT shard, owner, acquired_at FROM `+c.q+`.shard_epochs ORDER BY shard, epoch`)
	if err != nil {
		c.t.Fatal(err)
	}
	var (
		shard int
		e     epoch
	)
	if _, err := pgx.ForEachRow(rows, []any{&shard, &e.owner, &e.acquired}, func() error {
		if h := history[shard]; len(h) > 0 && !h[len(h)-1].acquired.Before(e.acquired) {
			c.t.Errorf("shard %d: epoch %d acquired at %v, not after the previous one", shard, len(h)+1, e.acquired)
		}
		history[shard] = append(history[shard], e)
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	n, bad := 0, 0
	c.eachLine(func(f []string) {
		if f[0] != "claim" || len(f) != 4 {
			return
		}
		shard, err1 := strconv.Atoi(f[2])
		us, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return // a line torn by SIGKILL
		}
		n++
		at := time.UnixMicro(us)
		h := history[shard]
		i, _ := slices.BinarySearchFunc(h, at, func(e epoch, at time.Time) int {
			if e.acquired.After(at) {
				return 1
			}
			return -1
		})
		if i == 0 || h[i-1].owner != f[1] {
			if bad++; bad <= 10 {
				owner := "nobody"
				if i > 0 {
					owner = h[i-1].owner
				}
				c.t.Errorf("%s claimed on shard %d at %v, when %s held it", f[1], shard, at, owner)
			}
		}
	})
	if n == 0 {
		c.t.Errorf("no claims journaled")
	}
	return n
}

func (c *chaos) eachLine(fn func([]string)) {
	f, err := os.Open(c.journal)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 {
			fn(fields)
		}
	}
}

// firstShards is [0, n).
func firstShards(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}
