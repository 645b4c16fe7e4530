package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// Failover test settings: a claim lease of 2s, a membership lease of 3s
// (heartbeat 750ms), a sweep retried after at most 1s.
const (
	failoverClaimLease  = 2 * time.Second
	failoverMemberLease = 3 * time.Second
	failoverBackoffMax  = time.Second
	failoverConnTimeout = 2 * time.Second // connect_timeout in FAILOVER_URL
	failoverNodes       = 3
	failoverNamespaces  = 10
	failoverSlowOutage  = failoverMemberLease + 2*time.Second
)

// TestFailover runs a fleet of dispatcher nodes, each with its own pool on
// a multi-host connection string (target_session_attrs=read-write), under
// a steady enqueue load, and fails the PostgreSQL primary over to its
// synchronous standby twice (a crash of the primary, then pg_ctl promote;
// the second time only after every lease has lapsed).
// No row whose enqueue committed is lost, none is settled twice, and after
// each promotion the fleet claims again within the membership lease plus
// the sweep's error backoff and two connect timeouts. `make failover` runs
// it (scripts/failover sets up the pair of servers); it is skipped
// otherwise.
func TestFailover(t *testing.T) {
	url, script := os.Getenv("FAILOVER_URL"), os.Getenv("FAILOVER_SCRIPT")
	if url == "" || script == "" {
		t.Skip("needs a primary and a standby: run make failover")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	step := func(args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, script, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
		}
	}

	f := newFailoverFleet(ctx, t, url)
	defer f.stop()
	prod := f.produce(ctx, t, url)

	f.waitSettled(ctx, t, 1000)
	t.Logf("failover 1: a (primary) crashes, b is promoted")
	r1 := f.failover(ctx, t, func() { step("kill", "a") }, func() { step("promote", "b") })
	step("follow", "a", "b") // a is b's synchronous standby again
	f.waitSettled(ctx, t, f.settledCount()+1000)
	// The second outage outlasts every lease: the claims and the nodes'
	// memberships lapse on the database's clock, so the rows in flight
	// are claimed again and their late results must be refused.
	t.Logf("failover 2: b (primary) crashes, a is promoted %v later", failoverSlowOutage)
	r2 := f.failover(ctx, t, func() { step("kill", "b") }, func() {
		time.Sleep(failoverSlowOutage)
		step("promote", "a")
	})
	f.waitSettled(ctx, t, f.settledCount()+1000)

	acked := prod.stop()
	lost := f.waitAllSettled(ctx, t, acked)
	f.stop()

	twice, reruns := f.tally()
	bound := failoverMemberLease + failoverBackoffMax + 2*failoverConnTimeout
	fmt.Printf("failover: %d rows enqueued and committed, %d lost, %d settled twice, %d run more than once (at least once)\n",
		len(acked), lost, twice, reruns)
	fmt.Printf("failover: %d sweeps and %d result writes failed meanwhile, each retried\n", f.sweepsFailed.Load(), f.writesFailed.Load())
	for i, r := range []failoverTimes{r1, r2} {
		fmt.Printf("failover %d: crash to promoted %v, crash to first claim %v (at most %v after the promotion)\n",
			i+1, r.promoted.Round(time.Millisecond), r.claimed.Round(time.Millisecond), bound)
		if r.claimed-r.promoted > bound {
			t.Errorf("failover %d: first claim %v after the promotion, above the bound %v", i+1, r.claimed-r.promoted, bound)
		}
	}
	if lost != 0 {
		t.Errorf("%d committed rows were not settled", lost)
	}
	if twice != 0 {
		t.Errorf("%d rows were settled twice", twice)
	}
}

// failoverFleet is the dispatcher nodes, their handlers' and metrics'
// records.
type failoverFleet struct {
	pools    []*pgxpool.Pool
	services []*dispatch.Service
	stopped  bool

	mu      sync.Mutex
	runs    map[string]int // handler runs per dispatch key
	settles map[string]int // applied settles per dispatch key
	settled atomic.Int64   // applied settles in all

	// cutAt is when the primary was killed (UnixNano), firstClaim the
	// end of the first sweep that started after it and claimed a row.
	cutAt      atomic.Int64
	firstClaim atomic.Int64

	sweepsFailed, writesFailed atomic.Int64
}

func newFailoverFleet(ctx context.Context, t *testing.T, url string) *failoverFleet {
	f := &failoverFleet{runs: map[string]int{}, settles: map[string]int{}}
	for i := range failoverNodes {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		f.pools = append(f.pools, pool)
		st, err := pgstore.New(ctx, pool, pgstore.Options{Schema: "failover", Lease: failoverClaimLease})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := dispatch.NewService(st, f.handle, dispatch.ServiceOptions{
			Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 40},
			Options: dispatch.Options{
				Workers:      32,
				ErrorBackoff: dispatch.Backoff{Base: 20 * time.Millisecond, Max: failoverBackoffMax},
				Metrics:      failoverMetrics{f: f},
				// The failed calls are counted, not logged line by line.
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			},
			Cluster: st.Cluster(pgstore.MembershipOptions{Lease: failoverMemberLease}),
			Node:    fmt.Sprintf("node-%d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		f.services = append(f.services, svc)
	}
	return f
}

func (f *failoverFleet) handle(ctx context.Context, row outbox.Row) error {
	f.mu.Lock()
	f.runs[row.DispatchKey]++
	f.mu.Unlock()
	select {
	case <-time.After(time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// failoverMetrics records applied settles, failed calls and the first
// claim after a cut.
type failoverMetrics struct {
	dispatch.NopMetrics
	f *failoverFleet
}

func (m failoverMetrics) Swept(ev dispatch.SweepEvent) {
	if ev.Err != nil {
		m.f.sweepsFailed.Add(1)
		return
	}
	if ev.Claimed == 0 {
		return
	}
	now := time.Now()
	cut := m.f.cutAt.Load()
	if cut != 0 && now.Add(-ev.Duration).UnixNano() > cut {
		m.f.firstClaim.CompareAndSwap(0, now.UnixNano())
	}
}

func (m failoverMetrics) Completed(ev dispatch.CompletionEvent) {
	if ev.State != outbox.StateSettled {
		return
	}
	m.f.mu.Lock()
	m.f.settles[ev.Row.DispatchKey]++
	m.f.mu.Unlock()
	m.f.settled.Add(1)
}

func (m failoverMetrics) StoreFailed(string, error) { m.f.writesFailed.Add(1) }

func (f *failoverFleet) settledCount() int { return int(f.settled.Load()) }

// waitSettled waits until the fleet has settled n rows in all.
func (f *failoverFleet) waitSettled(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for f.settledCount() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("only %d of %d rows settled", f.settledCount(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failoverTimes is one failover's timing, from the crash: to the end of
// the standby's promotion (pg_ctl promote -w), and to the end of the
// fleet's first sweep that started after the crash and claimed a row (on
// the new primary: the old one is down). A claim may come before promote
// returns.
type failoverTimes struct{ promoted, claimed time.Duration }

func (f *failoverFleet) failover(ctx context.Context, t *testing.T, kill, promote func()) failoverTimes {
	t.Helper()
	f.cutAt.Store(0)
	f.firstClaim.Store(0)
	kill() // returns once the primary is down
	cut := time.Now()
	f.cutAt.Store(cut.UnixNano())
	promote()
	promoted := time.Now()
	deadline := promoted.Add(2 * time.Minute)
	for f.firstClaim.Load() == 0 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no claim in %v after the promotion", time.Since(promoted))
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := time.Unix(0, f.firstClaim.Load())
	return failoverTimes{promoted: promoted.Sub(cut), claimed: first.Sub(cut)}
}

// waitAllSettled waits until every acked row is settled in the database
// (or two minutes pass) and returns how many are not.
func (f *failoverFleet) waitAllSettled(ctx context.Context, t *testing.T, acked []string) int {
	t.Helper()
	pool := f.pools[0]
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) k
			WHERE NOT EXISTS (SELECT 1 FROM failover.outbox o WHERE o.dispatch_key = k AND o.state = 'settled')`, acked).Scan(&left)
		if err == nil && (left == 0 || time.Now().After(deadline)) {
			return left
		}
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("counting unsettled rows: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tally returns the rows settled more than once and those run more than
// once.
func (f *failoverFleet) tally() (twice, reruns int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.settles {
		if n > 1 {
			twice++
		}
	}
	for _, n := range f.runs {
		if n > 1 {
			reruns++
		}
	}
	return twice, reruns
}

func (f *failoverFleet) stop() {
	if f.stopped {
		return
	}
	f.stopped = true
	for _, svc := range f.services {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_ = svc.Stop(ctx)
		cancel()
	}
	for _, p := range f.pools {
		p.Close()
	}
}

// failoverProducer enqueues batches of ten rows every 20ms (500 rows/s)
// over the namespaces, retrying a batch whose commit failed or is unknown
// (Enqueue ignores keys already in, so a retry never doubles a row).
type failoverProducer struct {
	cancel context.CancelFunc
	done   chan struct{}
	acked  []string
}

func (f *failoverFleet) produce(ctx context.Context, t *testing.T, url string) *failoverProducer {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(ctx, pool, pgstore.Options{Schema: "failover", Lease: failoverClaimLease})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &failoverProducer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer pool.Close()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; pctx.Err() == nil; {
			msgs := make([]outbox.Message, 10)
			for i := range msgs {
				msgs[i] = outbox.Message{
					DispatchKey: fmt.Sprintf("row-%07d", n+i),
					Namespace:   fmt.Sprintf("tenant-%02d", (n+i)%failoverNamespaces),
					TaskQueue:   "work",
				}
			}
			for pctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(pctx, 5*time.Second)
				_, err := st.Enqueue(cctx, msgs)
				ccancel()
				if err == nil {
					for _, m := range msgs {
						p.acked = append(p.acked, m.DispatchKey)
					}
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			n += len(msgs)
			select {
			case <-tick.C:
			case <-pctx.Done():
			}
		}
	}()
	return p
}

// stop ends the load and returns the keys of the rows whose enqueue
// committed.
func (p *failoverProducer) stop() []string {
	p.cancel()
	<-p.done
	return p.acked
}
