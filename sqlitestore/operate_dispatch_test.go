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
