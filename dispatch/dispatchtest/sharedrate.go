package dispatchtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// SharedRate checks on a store that a rate set through the shared
// settings (outbox.Operator.PutSettings, what outboxctl set rate and the
// admin pages write) reaches every node of a cluster within the settings
// delay, and that the cluster-wide rate bound holds after it. Three
// dispatcher nodes, each on its own handle of the store and a third of the
// shards, run with shared settings on, while namespace "b" drains beside
// "r" through the same workers:
//
//   - Held: r's rate is set to 1e-9/s, burst 6, before r's 30 rows are
//     enqueued. Every node reports r under that rate, and applied it at
//     the first settings poll that saw its version (the settings delay:
//     one SettingsInterval and the read); no token accrues during the
//     test, so at most the burst plus one per node (the rounding of the
//     nodes' burst shares) of r's rows ever start, while b drains on every
//     node.
//   - Rate: r's rate is raised to 40/s, burst 4. Every node applies it at
//     its first poll that saw it, r's rows all start, and at each start s
//     of r's rows after the raise, the rows started so far are at most
//     40·(s − t) + 4 + 3, t the moment just before PutSettings was called
//     (every claim counted was made after it, and before its handler
//     started).
type SharedRate struct {
	// Open returns a new handle of the store under test (each node gets
	// its own, as a process would); the test's cleanup must close it.
	// Required.
	Open func(t *testing.T) SettingsStore
}

const rateNodes = 3

// rateRun is one run of [SharedRate].
type rateRun struct {
	t     *testing.T
	admin SettingsStore
	polls []*pollCounter

	mu      sync.Mutex
	started map[string][]time.Time // by namespace, each row's handler start
}

// pollCounter is a node's Operate.Store: it counts the node's settings
// polls that saw each version (outbox.Operator.SettingsVersion), and, as
// the node's dispatch.SettingsMetrics, the polls that had seen a version
// when the node applied it.
type pollCounter struct {
	outbox.Operator
	dispatch.NopMetrics

	mu      sync.Mutex
	seen    []int64         // the versions the node's polls returned, in order
	applied map[int64][]int // version → its polls seen so far, at SettingsApplied
}

func (p *pollCounter) SettingsVersion(ctx context.Context) (int64, error) {
	v, err := p.Operator.SettingsVersion(ctx)
	if err == nil {
		p.mu.Lock()
		p.seen = append(p.seen, v)
		p.mu.Unlock()
	}
	return v, err
}

// SettingsApplied records, for version v, how many of the node's polls so
// far returned each version from v on: at most one may have, the one that
// made the node read and apply the settings.
func (p *pollCounter) SettingsApplied(v int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.seen {
		if s >= v {
			n++
		}
	}
	p.applied[v] = append(p.applied[v], n)
}

func (p *pollCounter) SettingsRejected(int64, error) {}

// appliedAt returns whether the node applied a version ≥ v, and how many
// of its polls had seen such a version when it first did.
func (p *pollCounter) appliedAt(v int64) (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := int64(-1)
	for w := range p.applied {
		if w >= v && (best < 0 || w < best) {
			best = w
		}
	}
	if best < 0 {
		return false, 0
	}
	return true, p.applied[best][0]
}

// Run runs the check.
func (c SharedRate) Run(t *testing.T) {
	r := &rateRun{t: t, admin: c.Open(t), started: map[string][]time.Time{}}
	shards := r.admin.ShardCount()
	for i := range rateNodes {
		var owned []int
		for sh := i; sh < shards; sh += rateNodes {
			owned = append(owned, sh)
		}
		r.start(c.Open(t), fmt.Sprintf("node-%d", i), owned)
	}

	held := backpressure.Rate{PerSecond: 1e-9, Burst: 6}
	r.set(held)
	r.enqueue("r", 30)
	r.enqueue("b", 60)
	r.eventually("b drained on every node", func() bool { return r.count("b") == 60 })
	r.eventually("every node reports r held by its rate", func() bool {
		for i := range rateNodes {
			if !slices.ContainsFunc(r.report(fmt.Sprintf("node-%d", i)).Plan, func(e outbox.PlanEntry) bool {
				return e.Namespace == "r" && e.Rate == held && e.Reason == "rate"
			}) {
				return false
			}
		}
		return true
	})
	if n := r.count("r"); n > held.Burst+rateNodes {
		t.Fatalf("r started %d rows under rate %+v on %d nodes: more than the burst plus one per node", n, held, rateNodes)
	}

	before := r.count("r")
	raised := backpressure.Rate{PerSecond: 40, Burst: 4}
	from := r.set(raised)
	r.eventually("r drained under its raised rate", func() bool { return r.count("r") == 30 })
	r.mu.Lock()
	starts := slices.Clone(r.started["r"])
	r.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i, s := range starts[before:] {
		bound := raised.PerSecond*s.Sub(from).Seconds() + float64(raised.Burst+rateNodes)
		if float64(i+1) > bound {
			t.Errorf("%d of r's rows started %v after the raise to %+v: more than r·T + b + nodes = %.1f", i+1, s.Sub(from), raised, bound)
		}
	}
	t.Logf("r's %d rows after the raise started over %v at %+v", len(starts)-before, starts[len(starts)-1].Sub(from), raised)
}

// set writes r's rate through the settings API, waits until every node
// applied it, checks that each applied it at the first poll that saw its
// version, and returns the moment just before the write.
func (r *rateRun) set(rate backpressure.Rate) time.Time {
	r.t.Helper()
	from := time.Now()
	set, err := r.admin.PutSettings(r.t.Context(), outbox.NamespaceSettings{Namespace: "r", Rate: &rate})
	if err != nil {
		r.t.Fatalf("PutSettings(rate %+v): %v", rate, err)
	}
	for i, p := range r.polls {
		node := fmt.Sprintf("node-%d", i)
		r.eventually(node+" applied the rate", func() bool { ok, _ := p.appliedAt(set.Version); return ok })
		if _, polls := p.appliedAt(set.Version); polls > 1 {
			r.t.Errorf("%s applied settings version %d after %d polls had seen it, want the first", node, set.Version, polls)
		}
		r.eventually(node+" reports the version", func() bool { return r.report(node).SettingsVersion >= set.Version })
	}
	r.t.Logf("rate %+v (version %d) applied by %d nodes %v after the write began", rate, set.Version, len(r.polls), time.Since(from))
	return from
}

func (r *rateRun) enqueue(ns string, n int) {
	r.t.Helper()
	var ms []outbox.Message
	for i := range n {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("%s/%d", ns, i), Namespace: ns, TaskQueue: "q", Payload: []byte("x")})
	}
	if _, err := r.admin.Enqueue(r.t.Context(), ms); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rateRun) count(ns string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.started[ns])
}

// start runs a dispatcher node on s, owning shards, until the test ends.
func (r *rateRun) start(s SettingsStore, node string, shards []int) {
	owned, err := backpressure.NewOwnedShardFraction(shards, s.ShardCount())
	if err != nil {
		r.t.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited}, owned)
	if err != nil {
		r.t.Fatal(err)
	}
	p := &pollCounter{Operator: s, applied: map[int64][]int{}}
	r.polls = append(r.polls, p)
	d, err := dispatch.New(bp, s, func(_ context.Context, row outbox.Row) error {
		r.mu.Lock()
		r.started[row.Namespace] = append(r.started[row.Namespace], time.Now())
		r.mu.Unlock()
		return nil
	}, dispatch.Options{Workers: 4, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: p,
		Operate: &dispatch.Operate{Node: node, Store: p, SharedSettings: true, SettingsInterval: 50 * time.Millisecond, ReportInterval: 100 * time.Millisecond}})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
}

// eventually polls cond until it holds, failing after 20s (far above
// the delays it waits for, so a slow machine does not fail it).
func (r *rateRun) eventually(what string, cond func() bool) {
	r.t.Helper()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			r.t.Fatalf("%s: not after 20s", what)
		}
	}
}

// report is node's report, the zero report until it made one.
func (r *rateRun) report(node string) outbox.NodeReport {
	r.t.Helper()
	reps, err := r.admin.NodeReports(r.t.Context())
	if err != nil {
		r.t.Fatal(err)
	}
	if i := slices.IndexFunc(reps, func(rep outbox.NodeReport) bool { return rep.Node == node }); i >= 0 {
		return reps[i]
	}
	return outbox.NodeReport{}
}
