package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// TestSharedSettingsAcrossDispatchers runs two dispatchers, each on its own
// Store of one SQLite file (as two processes would be): a pause stops a
// namespace's claims on both while another drains, a setting that does not
// validate (written by SQL: PutSettings refuses it) is reported by both
// while the pause holds and the namespace keeps its last good setting, and
// a resume drains the namespace.
func TestSharedSettingsAcrossDispatchers(t *testing.T) {
	const nodes = 2
	path := filepath.Join(t.TempDir(), "outbox.db")
	open := func() *sqlitestore.Store {
		s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	admin := open()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range nodes {
		s := open()
		all, _ := backpressure.AllShards(s.ShardCount())
		bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited}, all)
		if err != nil {
			t.Fatal(err)
		}
		d, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil }, dispatch.Options{Workers: 4, PollInterval: 20 * time.Millisecond,
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Operate: &dispatch.Operate{Node: fmt.Sprintf("node-%d", i), SharedSettings: true, SettingsInterval: 50 * time.Millisecond, ReportInterval: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = d.Run(ctx) })
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%s: not after 20s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
	}
	applied := func(v int64, bad bool) func() bool {
		return func() bool {
			reps, err := admin.NodeReports(t.Context())
			if err != nil {
				t.Fatal(err)
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
	put := func(s outbox.NamespaceSettings) int64 {
		got, err := admin.PutSettings(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		return got.Version
	}
	state := func(ns string) outbox.NamespaceState {
		st, err := admin.Namespaces(t.Context(), outbox.NamespacesParams{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return st[0]
	}
	enqueue := func(ns string, from, n int) {
		var ms []outbox.Message
		for i := from; i < from+n; i++ {
			ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("%s/%d", ns, i), Namespace: ns, TaskQueue: "q", Payload: []byte("x")})
		}
		if _, err := admin.Enqueue(t.Context(), ms); err != nil {
			t.Fatal(err)
		}
	}

	eventually("the pause applied on every node", applied(put(outbox.NamespaceSettings{Namespace: "a", Paused: true}), false))
	enqueue("a", 0, 10)
	enqueue("b", 0, 10)
	eventually("b drained", func() bool { return state("b").Settled == 10 })
	if st := state("a"); st.Ready != 10 || st.Settled != 0 {
		t.Fatalf("paused a: %+v, want 10 ready, none settled", st)
	}
	two := 2
	eventually("b's weight applied on every node", applied(put(outbox.NamespaceSettings{Namespace: "b", Weight: &two}), false))
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := rawSettings(t.Context(), db, map[string]string{"b": `{"weight": 0}`}); err != nil {
		t.Fatal(err)
	}
	v, err := admin.SettingsVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	eventually("every node reports the bad setting", applied(v, true))
	enqueue("b", 10, 10)
	eventually("b drained under the last good configuration", func() bool { return state("b").Settled == 20 })
	if st := state("a"); st.Ready != 10 || st.Settled != 0 {
		t.Fatalf("a after the bad setting: %+v, want still paused", st)
	}
	put(outbox.NamespaceSettings{Namespace: "b"})
	eventually("the fix and the resume applied", applied(put(outbox.NamespaceSettings{Namespace: "a"}), false))
	eventually("a drained after the resume", func() bool { return state("a").Settled == 10 })
}

// TestSharedRateReachesNode sets a namespace's rate through the settings
// API (PutSettings) on a live dispatcher node and checks, by counting
// rows, that the node applies it and the bound holds after it: the rate is
// so low (1e-9/s) that no token accrues during the test, so at most the
// burst (3) plus one for rounding of r's rows ever start, while another
// namespace drains through the same workers. The node's report shows the
// rate and the reason. A rate row that cannot be read (written by SQL)
// then keeps the last good rate: still no more of r's rows start. Lifting
// the rate (the zero Rate, "none") drains r.
func TestSharedRateReachesNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	started := map[string]int{}
	d, err := dispatch.New(bp, s, func(_ context.Context, r outbox.Row) error {
		mu.Lock()
		started[r.Namespace]++
		mu.Unlock()
		return nil
	}, dispatch.Options{Workers: 4, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Operate: &dispatch.Operate{Node: "node-0", SharedSettings: true, SettingsInterval: 50 * time.Millisecond, ReportInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%s: not after 20s", what)
			}
		}
	}
	startedOf := func(ns string) int { mu.Lock(); defer mu.Unlock(); return started[ns] }
	report := func() outbox.NodeReport { // the zero report until the node made one
		reps, err := s.NodeReports(t.Context())
		if err != nil || len(reps) > 1 {
			t.Fatalf("NodeReports = %+v, %v; want one node's", reps, err)
		}
		if len(reps) == 0 {
			return outbox.NodeReport{}
		}
		return reps[0]
	}
	enqueue := func(ns string, from, n int) {
		var ms []outbox.Message
		for i := from; i < from+n; i++ {
			ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("%s/%d", ns, i), Namespace: ns, TaskQueue: "q", Payload: []byte("x")})
		}
		if _, err := s.Enqueue(t.Context(), ms); err != nil {
			t.Fatal(err)
		}
	}
	const burst = 3
	rate := backpressure.Rate{PerSecond: 1e-9, Burst: burst}
	set, err := s.PutSettings(t.Context(), outbox.NamespaceSettings{Namespace: "r", Rate: &rate})
	if err != nil {
		t.Fatal(err)
	}
	eventually("the node applied the rate", func() bool { return report().SettingsVersion >= set.Version })
	enqueue("r", 0, 30)
	enqueue("b", 0, 20)
	eventually("b drained", func() bool { return startedOf("b") == 20 })
	eventually("the node reports r held by its rate", func() bool {
		for _, e := range report().Plan {
			if e.Namespace == "r" && e.Rate == rate && e.Reason == "rate" {
				return true
			}
		}
		return false
	})
	if n := startedOf("r"); n > burst+1 {
		t.Fatalf("r started %d rows under rate %+v: more than the burst plus one", n, rate)
	}

	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := rawSettings(t.Context(), db, map[string]string{"r": `{"rate": {"per_second": "fast", "burst": 1000}}`}); err != nil {
		t.Fatal(err)
	}
	v, err := s.SettingsVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	eventually("the node reports r's bad rate row", func() bool {
		r := report()
		return r.SettingsVersion >= v && len(r.BadSettings) == 1 && r.BadSettings[0].Namespace == "r" && !r.BadSettings[0].Held
	})
	enqueue("b", 20, 20)
	eventually("b drained again", func() bool { return startedOf("b") == 40 })
	if n := startedOf("r"); n > burst+1 {
		t.Fatalf("r started %d rows after its rate row became unreadable: more than the last good rate's burst plus one", n)
	}

	none := backpressure.Rate{}
	if _, err := s.PutSettings(t.Context(), outbox.NamespaceSettings{Namespace: "r", Rate: &none}); err != nil {
		t.Fatal(err)
	}
	eventually("r drained once its rate is lifted", func() bool { return startedOf("r") == 30 })
}

// TestAuditRetention fills the trail with outbox.MaxAuditEntries entries
// (written by SQL, in one statement, to keep the test short), records 5
// more changes through the store (purges that find no dead row: one entry
// each), and checks that the store keeps the newest MaxAuditEntries, the
// oldest pruned: the trail is bounded.
func TestAuditRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
INSERT INTO audit_log (at, operator, action, namespace, before, after, rows, detail)
SELECT 0, 'sql' || i, 'set', 'a', '', '{}', 0, '' FROM n`, outbox.MaxAuditEntries); err != nil {
		t.Fatal(err)
	}
	const extra = 5
	for i := range extra {
		ctx := outbox.WithOperation(t.Context(), outbox.Operation{Operator: fmt.Sprint("op", i)})
		if _, err := s.DeleteDead(ctx, []string{"none"}); err != nil {
			t.Fatal(err)
		}
	}
	var kept []outbox.AuditEntry
	for before := int64(0); ; {
		page, err := s.Audit(t.Context(), outbox.AuditParams{Before: before, Limit: outbox.MaxAuditPage})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, page...)
		if len(page) < outbox.MaxAuditPage {
			break
		}
		before = page[len(page)-1].ID
	}
	// The migration's entry (ID 1) and the first 5 by SQL (IDs 2 to 6) are pruned.
	newest, oldest := kept[0], kept[len(kept)-1]
	if len(kept) != outbox.MaxAuditEntries || newest.Operator != fmt.Sprint("op", extra-1) || oldest.Operator != fmt.Sprint("sql", extra) {
		t.Errorf("after %d entries the store keeps %d, newest %q, oldest %q; want %d, op%d to sql%d",
			1+outbox.MaxAuditEntries+extra, len(kept), newest.Operator, oldest.Operator, outbox.MaxAuditEntries, extra-1, extra)
	}
}
