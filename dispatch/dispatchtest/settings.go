package dispatchtest

import (
	"context"
	"errors"
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

// SettingsStore is a store with the operator extension, as [Settings]
// needs it.
type SettingsStore interface {
	outbox.Store
	outbox.Operator
}

// Settings checks on a store that a shared setting that cannot be read
// never loosens a limit: dispatchers with shared settings on, over settings
// rows written by other means (JSON null for a paused namespace, a quota
// of -5, [1, 2]), hold a namespace whose row is bad when they have no last
// good setting of it (at start-up too), keep its last good setting when
// they have one, apply every other namespace's settings (a pause among
// them), report the bad rows by namespace (node report, SettingsMetrics),
// and apply a PutSettings that overwrites them.
type Settings struct {
	// Open returns a new handle of the store under test (each node gets
	// its own, as a process would); the test's cleanup must close it.
	// Required.
	Open func(t *testing.T) SettingsStore
	// Raw writes settings rows with bodies verbatim, as an operator's SQL
	// would (see storetest.Harness.RawSettings). Required.
	Raw func(ctx context.Context, bodies map[string]string) error
}

// settingsMetrics records the namespaces of SettingsRejected.
type settingsMetrics struct {
	mu       sync.Mutex
	rejected map[string]bool
}

func (m *settingsMetrics) Swept(dispatch.SweepEvent)           {}
func (m *settingsMetrics) Completed(dispatch.CompletionEvent)  {}
func (m *settingsMetrics) LeaseLost(dispatch.LeaseLostEvent)   {}
func (m *settingsMetrics) LeasesExtended(int)                  {}
func (m *settingsMetrics) Panicked(outbox.Row)                 {}
func (m *settingsMetrics) StoreFailed(string, error)           {}
func (m *settingsMetrics) Adapted(dispatch.AdaptEvent)         {}
func (m *settingsMetrics) SettingsApplied(int64)               {}
func (m *settingsMetrics) SettingsRejected(_ int64, err error) { m.add(err) }

func (m *settingsMetrics) add(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var f *outbox.SettingsFault
	if errors.As(err, &f) {
		m.rejected[f.Namespace] = true
	}
}

func (m *settingsMetrics) has(ns string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rejected[ns]
}

// settingsRun is one run of [Settings].
type settingsRun struct {
	t     *testing.T
	admin SettingsStore
}

// Run runs the check.
func (c Settings) Run(t *testing.T) {
	r := &settingsRun{t: t, admin: c.Open(t)}
	ctx := t.Context()
	r.put(outbox.NamespaceSettings{Namespace: "p", Paused: true})
	r.put(outbox.NamespaceSettings{Namespace: "n", Paused: true})
	if err := c.Raw(ctx, map[string]string{"n": `null`, "x": `{"quota": -5}`}); err != nil {
		t.Fatalf("Raw: %v", err)
	}
	for _, ns := range []string{"p", "x", "n", "ok"} {
		r.enqueue(ns, 0, 5)
	}
	m := &settingsMetrics{rejected: map[string]bool{}}
	r.start(c.Open(t), "node-a", m)
	r.eventually("ok drained while x's and n's rows are bad", func() bool { return r.settled("ok") == 5 })
	r.eventually("node-a reports x and n held", r.reported("node-a", map[string]bool{"x": true, "n": true}))
	r.none("at start-up, with x's and n's rows bad", "p", "x", "n")
	for _, ns := range []string{"x", "n"} {
		if !m.has(ns) {
			t.Errorf("SettingsRejected was not called for namespace %s", ns)
		}
	}

	// A node with a last good setting keeps it.
	v := r.put(outbox.NamespaceSettings{Namespace: "q", Paused: true})
	r.eventually("node-a applied q's pause", r.applied("node-a", v))
	r.enqueue("q", 0, 5)
	if err := c.Raw(ctx, map[string]string{"q": `[1, 2]`}); err != nil {
		t.Fatalf("Raw: %v", err)
	}
	r.eventually("node-a reports q kept at its last good setting", r.reported("node-a", map[string]bool{"x": true, "n": true, "q": false}))
	r.enqueue("ok", 5, 5)
	r.eventually("ok drained while q's row is bad", func() bool { return r.settled("ok") == 10 })
	r.none("with q's row bad after its pause", "p", "x", "n", "q")

	// A write overwrites a bad row.
	u := backpressure.Unlimited
	r.put(outbox.NamespaceSettings{Namespace: "x", Quota: &u})
	r.put(outbox.NamespaceSettings{Namespace: "n"})
	r.eventually("x and n drained after PutSettings overwrote their rows", func() bool { return r.settled("x") == 5 && r.settled("n") == 5 })
	r.none("after x and n were fixed", "p", "q")
	r.overflow(c)
}

// overflow fills the settings past outbox.MaxSettings by SQL, so that
// the rows read are cap-00000 to cap-09999 and every earlier namespace's
// row is beyond them: node-a keeps their last good settings (the pauses of
// p, q and zz hold), a node that starts then holds them, both say so, and
// a namespace before the cap still drains.
func (r *settingsRun) overflow(c Settings) {
	v := r.put(outbox.NamespaceSettings{Namespace: "zz", Paused: true})
	r.eventually("node-a applied zz's pause", r.applied("node-a", v))
	r.enqueue("zz", 0, 5)
	full := map[string]string{}
	for i := range outbox.MaxSettings {
		full[fmt.Sprintf("cap-%05d", i)] = `{}`
	}
	if err := c.Raw(r.t.Context(), full); err != nil {
		r.t.Fatalf("Raw of %d rows: %v", len(full), err)
	}
	r.start(c.Open(r.t), "node-b", nil)
	for _, node := range []string{"node-a", "node-b"} {
		r.eventually(node+" reports the settings truncated, zz among the bad ones", func() bool {
			rep, ok := r.report(node)
			return ok && rep.SettingsTruncated && rep.SettingsError != "" &&
				slices.ContainsFunc(rep.BadSettings, func(f outbox.SettingsFault) bool { return f.Namespace == "zz" && f.Held == (node == "node-b") })
		})
	}
	r.enqueue("a-ok", 0, 5)
	r.eventually("a-ok drained with the settings truncated", func() bool { return r.settled("a-ok") == 5 })
	r.none("with the settings truncated", "p", "q", "zz")
}

func (r *settingsRun) put(s outbox.NamespaceSettings) int64 {
	r.t.Helper()
	got, err := r.admin.PutSettings(r.t.Context(), s)
	if err != nil {
		r.t.Fatalf("PutSettings(%+v): %v", s, err)
	}
	return got.Version
}

func (r *settingsRun) enqueue(ns string, from, n int) {
	r.t.Helper()
	var ms []outbox.Message
	for i := from; i < from+n; i++ {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("%s/%d", ns, i), Namespace: ns, TaskQueue: "q", Payload: []byte("x")})
	}
	if _, err := r.admin.Enqueue(r.t.Context(), ms); err != nil {
		r.t.Fatal(err)
	}
}

func (r *settingsRun) settled(ns string) int {
	r.t.Helper()
	st, err := r.admin.Namespaces(r.t.Context(), outbox.NamespacesParams{Namespace: ns})
	if err != nil {
		r.t.Fatal(err)
	}
	return st[0].Settled + st[0].Claimed
}

// none fails the test if a row of any of namespaces was claimed.
func (r *settingsRun) none(when string, namespaces ...string) {
	r.t.Helper()
	for _, ns := range namespaces {
		if n := r.settled(ns); n != 0 {
			r.t.Errorf("%s: %d rows of %s claimed, want none (held)", when, n, ns)
		}
	}
}

// start runs a dispatcher node on s until the test ends.
func (r *settingsRun) start(s SettingsStore, node string, m dispatch.Metrics) {
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil }, dispatch.Options{Workers: 4, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m,
		Operate: &dispatch.Operate{Node: node, SharedSettings: true, SettingsInterval: 50 * time.Millisecond, ReportInterval: 100 * time.Millisecond}})
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
func (r *settingsRun) eventually(what string, cond func() bool) {
	r.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 20*time.Second {
			r.t.Fatalf("%s: not after 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *settingsRun) report(node string) (outbox.NodeReport, bool) {
	r.t.Helper()
	reps, err := r.admin.NodeReports(r.t.Context())
	if err != nil {
		r.t.Fatal(err)
	}
	i := slices.IndexFunc(reps, func(rep outbox.NodeReport) bool { return rep.Node == node })
	if i < 0 {
		return outbox.NodeReport{}, false
	}
	return reps[i], true
}

// reported is whether node's report lists exactly the bad settings of
// want (namespace → held), with a SettingsError.
func (r *settingsRun) reported(node string, want map[string]bool) func() bool {
	return func() bool {
		rep, ok := r.report(node)
		if !ok || rep.SettingsError == "" || len(rep.BadSettings) != len(want) {
			return false
		}
		for _, f := range rep.BadSettings {
			if held, ok := want[f.Namespace]; !ok || held != f.Held || f.Reason == "" {
				return false
			}
		}
		return true
	}
}

// applied is whether node's report says it applied version v.
func (r *settingsRun) applied(node string, v int64) func() bool {
	return func() bool {
		rep, ok := r.report(node)
		return ok && rep.SettingsVersion >= v
	}
}
