package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// The environment of a TestSharedSettingsAcrossProcesses child.
const (
	settingsNode   = "PGSTORE_SETTINGS_NODE"
	settingsSchema = "PGSTORE_SETTINGS_SCHEMA"
)

// TestSharedSettingsAcrossProcesses runs three dispatcher processes (this
// test binary re-executed) on one schema, each with shared settings on, and
// acts as their operator through its own store: a pause it writes is
// applied by every process (each node's report says it plans with that
// version) within the stated delay, a SettingsInterval plus a statement,
// after which the paused namespace's rows stay ready on the table while
// another namespace's drain; a setting that does not validate is reported
// by every process, none of which exits, and they go on claiming under the
// last good configuration (the pause holds); a resume drains the paused
// namespace. The delays seen are logged; the test fails only beyond a 20s
// failsafe, not on speed.
func TestSharedSettingsAcrossProcesses(t *testing.T) {
	if node := os.Getenv(settingsNode); node != "" {
		settingsChild(t, node)
		return
	}
	const nodes = 3
	schema := testSchema(t)
	c := &cluster{t: t, ctx: t.Context(), schema: schema, ran: map[string]int{}}
	s, err := pgstore.New(c.ctx, newPool(t, nil, 4), pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	c.admin = s
	stderr := filepath.Join(t.TempDir(), "stderr")
	var procs []*exec.Cmd
	var stdins []io.WriteCloser
	exited := make(chan string, nodes)
	for i := range nodes {
		node := fmt.Sprintf("proc-%d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^TestSharedSettingsAcrossProcesses$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), settingsNode+"="+node, settingsSchema+"="+schema)
		errf, err := os.OpenFile(stderr, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = errf, errf
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = errf.Close()
		procs, stdins = append(procs, cmd), append(stdins, in)
		go func() { _ = cmd.Wait(); exited <- node }()
	}
	stopped := false
	t.Cleanup(func() {
		for _, in := range stdins {
			_ = in.Close() // a child stops when its stdin closes
		}
		for range procs {
			<-exited
		}
		if t.Failed() || !stopped {
			if b, _ := os.ReadFile(stderr); len(b) > 0 {
				t.Logf("children's output (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
			}
		}
	})
	alive := func() {
		t.Helper()
		select {
		case node := <-exited:
			t.Fatalf("%s exited", node)
		default:
		}
	}

	c.eventually("every process reported", c.applied(nodes, 0, false))
	v := c.put(outbox.NamespaceSettings{Namespace: "a", Paused: true})
	took := c.eventually("the pause applied in every process", c.applied(nodes, v, false))
	t.Logf("stated delay: SettingsInterval %v plus a statement; seen through the reports (every %v) %v", settingsInterval, 100*time.Millisecond, took.Round(time.Millisecond))
	c.enqueue("a", 0, 20)
	c.enqueue("b", 0, 20)
	c.eventually("b drained", func() bool { return c.state("b").Settled == 20 })
	if st := c.state("a"); st.Ready != 20 || st.Claimed != 0 || st.Settled != 0 {
		t.Fatalf("paused a: %+v, want 20 ready and none claimed or settled", st)
	}

	two := 2
	c.eventually("b's weight applied in every process", c.applied(nodes, c.put(outbox.NamespaceSettings{Namespace: "b", Weight: &two}), false))
	bad := c.putRaw("b", `{"weight": 0}`) // weights are 1 to MaxWeight
	c.eventually("every process reports the bad setting", c.applied(nodes, bad, true))
	c.enqueue("b", 20, 20)
	c.eventually("b drained again under the last good configuration", func() bool { return c.state("b").Settled == 40 })
	if st := c.state("a"); st.Ready != 20 || st.Settled != 0 {
		t.Fatalf("a after the bad setting: %+v, want still paused", st)
	}
	alive()

	one := 1
	c.put(outbox.NamespaceSettings{Namespace: "b", Weight: &one})
	v = c.put(outbox.NamespaceSettings{Namespace: "a"})
	c.eventually("the fix and the resume applied in every process", c.applied(nodes, v, false))
	c.eventually("a drained after the resume", func() bool { return c.state("a").Settled == 20 })
	alive()
	stopped = true
}

// settingsChild is one process: a dispatcher over every shard with shared
// settings and reports on, until its stdin closes.
func settingsChild(t *testing.T, node string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	s, err := pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: os.Getenv(settingsSchema)})
	if err != nil {
		t.Fatalf("child: Open: %v", err)
	}
	defer s.Close()
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	d, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil }, dispatch.Options{
		Workers: 4, PollInterval: 20 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Operate: &dispatch.Operate{Node: node, SharedSettings: true, SettingsInterval: settingsInterval, ReportInterval: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := d.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatalf("child: Run: %v", err)
	}
}
