package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// cluster is a few dispatchers over one schema, each with its own pool and
// store, as separate processes would be, with shared settings and reports on.
type cluster struct {
	t      *testing.T
	ctx    context.Context
	admin  *pgstore.Store // the operator's own store, as outboxctl would open it
	schema string
	mu     sync.Mutex
	ran    map[string]int // rows run, by namespace
	hold   chan struct{}  // namespace c's handlers run until it is closed
}

const settingsInterval = 50 * time.Millisecond

func newCluster(t *testing.T, nodes int) *cluster {
	t.Helper()
	schema := testSchema(t)
	c := &cluster{t: t, ctx: t.Context(), schema: schema, ran: map[string]int{}, hold: make(chan struct{})}
	open := func() *pgstore.Store {
		s, err := pgstore.New(c.ctx, newPool(t, nil, 4), pgstore.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c.admin = open()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { close(c.hold); cancel(); wg.Wait() })
	for i := range nodes {
		s := open()
		all, _ := backpressure.AllShards(s.ShardCount())
		bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited}, all)
		if err != nil {
			t.Fatal(err)
		}
		d, err := dispatch.New(bp, s, func(ctx context.Context, row outbox.Row) error {
			if row.Namespace == "c" {
				select {
				case <-c.hold:
				case <-ctx.Done():
				}
			}
			c.mu.Lock()
			c.ran[row.Namespace]++
			c.mu.Unlock()
			return nil
		}, dispatch.Options{Workers: 4, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Operate: &dispatch.Operate{Node: fmt.Sprintf("node-%d", i), SharedSettings: true, SettingsInterval: settingsInterval, ReportInterval: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = d.Run(ctx) })
	}
	return c
}

// eventually polls cond until it holds or 20s pass (a bound far above the
// stated delay, so a slow machine does not fail the test; the delay seen
// is logged).
func (c *cluster) eventually(what string, cond func() bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 20*time.Second {
			c.t.Fatalf("%s: not after 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	c.t.Logf("%s after %v", what, took.Round(time.Millisecond))
	return took
}

// applied reports whether every node's report says it runs settings version
// v or later, with error state bad.
func (c *cluster) applied(nodes int, v int64, bad bool) func() bool {
	return func() bool {
		reps, err := c.admin.NodeReports(c.ctx)
		if err != nil {
			c.t.Fatal(err)
		}
		n := 0
		for _, r := range reps {
			if r.SettingsVersion >= v && (r.SettingsError != "") == bad {
				n++
			}
		}
		return n == nodes
	}
}

func (c *cluster) put(s outbox.NamespaceSettings) int64 {
	c.t.Helper()
	got, err := c.admin.PutSettings(c.ctx, s)
	if err != nil {
		c.t.Fatal(err)
	}
	return got.Version
}

// putRaw writes namespace ns's settings row with body verbatim, by SQL (as
// an operator's manual fix would, past PutSettings' checks), and returns
// the settings version after it.
func (c *cluster) putRaw(ns, body string) int64 {
	c.t.Helper()
	if err := rawSettings(c.ctx, newPool(c.t, nil, 1), c.schema, map[string]string{ns: body}); err != nil {
		c.t.Fatal(err)
	}
	v, err := c.admin.SettingsVersion(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

func (c *cluster) state(ns string) outbox.NamespaceState {
	c.t.Helper()
	st, err := c.admin.Namespaces(c.ctx, outbox.NamespacesParams{Namespace: ns})
	if err != nil {
		c.t.Fatal(err)
	}
	return st[0]
}

func (c *cluster) enqueue(ns string, from, n int) {
	c.t.Helper()
	var ms []outbox.Message
	for i := from; i < from+n; i++ {
		ms = append(ms, message(ns, "q", fmt.Sprintf("%s/%d", ns, i)))
	}
	if _, err := c.admin.Enqueue(c.ctx, ms); err != nil {
		c.t.Fatal(err)
	}
}

// TestSharedSettingsAcrossDispatchers runs three dispatchers on one schema:
// a pause written by an operator stops a namespace's claims on every node
// (its rows stay ready while another namespace drains), each node's report
// shows the namespace held as paused, a setting that does not validate
// (written by SQL: PutSettings refuses it) is reported by every node while
// they keep the namespace's last good setting (and the pause holds), a namespace whose rows run forever
// shows held at its ceiling, with the ceilings summed over the nodes, in
// the operator's tenants view, and a resume drains the paused namespace.
func TestSharedSettingsAcrossDispatchers(t *testing.T) {
	const nodes = 3
	c := newCluster(t, nodes)
	c.eventually("every node reported", c.applied(nodes, 0, false))

	v := c.put(outbox.NamespaceSettings{Namespace: "a", Paused: true})
	c.eventually("the pause applied on every node", c.applied(nodes, v, false))
	c.enqueue("a", 0, 20)
	c.enqueue("b", 0, 20)
	c.eventually("b drained", func() bool { st := c.state("b"); return st.Settled == 20 })
	// Every node has swept since b's rows came: a's rows are still there.
	if st := c.state("a"); st.Ready != 20 || st.Claimed != 0 || st.Settled != 0 {
		t.Fatalf("paused a: %+v, want 20 ready and none claimed or settled", st)
	}
	c.eventually("every node reports a held as paused", func() bool {
		reps, _ := c.admin.NodeReports(c.ctx)
		n := 0
		for _, r := range reps {
			for _, e := range r.Plan {
				if e.Namespace == "a" && e.Reason == "paused" && e.Held > 0 && e.Quota == 0 {
					n++
				}
			}
		}
		return n == nodes
	})

	two := 2
	c.eventually("b's weight applied", c.applied(nodes, c.put(outbox.NamespaceSettings{Namespace: "b", Weight: &two}), false))
	bad := c.putRaw("b", `{"weight": 0}`) // weights are 1 to MaxWeight
	c.eventually("every node reports the bad setting", c.applied(nodes, bad, true))
	c.enqueue("b", 20, 20)
	c.eventually("b drained again under the last good configuration", func() bool { return c.state("b").Settled == 40 })
	if st := c.state("a"); st.Ready != 20 || st.Settled != 0 {
		t.Fatalf("a after the bad setting: %+v, want still paused", st)
	}

	one := 1
	c.put(outbox.NamespaceSettings{Namespace: "b", Weight: &one})
	v = c.put(outbox.NamespaceSettings{Namespace: "a"})
	c.eventually("the fix and the resume applied on every node", c.applied(nodes, v, false))
	c.eventually("a drained after the resume", func() bool { return c.state("a").Settled == 20 })

	// A shared quota of 1 for c, whose handlers never finish: every node
	// holds c's rows at its ceiling, and the operator's tenants view (what
	// outboxctl tenants prints) says so.
	quota := 1
	c.eventually("c's quota applied", c.applied(nodes, c.put(outbox.NamespaceSettings{Namespace: "c", Quota: &quota}), false))
	c.enqueue("c", 0, 20)
	c.eventually("c shows held at its ceiling in the tenants view", func() bool {
		page, err := admin.Tenants(c.ctx, c.admin, admin.TenantsParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range page.Tenants {
			if tn.Namespace == "c" {
				return tn.Reason == "at-ceiling" && tn.Nodes == nodes && tn.Held > 0 && tn.Quota == 1 && tn.Ceiling == nodes &&
					tn.Rows.Claimed >= 1 && tn.Rows.Claimed <= tn.Ceiling // every node owns every shard here, so each sees the others' claims
			}
		}
		return false
	})

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran["a"] != 20 || c.ran["b"] != 40 || c.ran["c"] != 0 {
		t.Errorf("rows run: %v, want a 20, b 40, c none finished", c.ran)
	}
}
