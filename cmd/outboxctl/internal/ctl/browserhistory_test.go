package ctl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// The seeded drain of TestBrowserHistory: drainRows rows of "drain" left
// when the test starts, after drainSeeded of draining at drainRate rows/s
// (the history a node left), and drained at that rate (the namespace's
// rate limit) by a live node with history on.
const (
	drainRows   = 500
	drainRate   = 50
	drainSeeded = 40 * time.Minute
)

// TestBrowserHistory drives headless Chromium over the admin pages of a
// live dispatcher with history on, on a SQLite file and on PostgreSQL:
// tenant "drain" is draining at its rate of 50 rows/s, with 40 minutes of
// history behind it, and tenant "big" (paused) holds more rows than the
// pages count. On drain's page it checks that the three charts are there
// (rows/s, backlog, held by reason), that the backlog's line falls from
// bucket to bucket and says it is a lower bound (≥) when a node capped the
// backlog it counted, that the time to drain and the ages of the figures
// are shown, and that the time to drain was within 25% of the time the drain
// then took; on the tenants page, the overview charts and big's counts
// marked ≥ (capped). It saves a screenshot of drain's page
// (-update-screenshots copies it to docs/admin-history.png; only the
// SQLite run's). Without Chromium it skips.
func TestBrowserHistory(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("browser test skipped: no chromium on PATH (make browser installs Debian's)")
	}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { browserHistory(t, chromium, b) })
	}
}

// historyStore is what the live node needs of a store.
type historyStore interface {
	admin.Store
	dispatch.Store
	outbox.Historian
}

func browserHistory(t *testing.T, chromium string, b backend) {
	s, ok := b.open(t, time.Now).(historyStore)
	if !ok {
		t.Fatalf("the %s store does not keep history", b.name)
	}
	ctx := t.Context()
	var ms []outbox.Message
	for i := range drainRows {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("drain-%04d", i), Namespace: "drain", TaskQueue: "email", Payload: []byte("x")})
	}
	for i := range outbox.DefaultCountCap + 50 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("big-%05d", i), Namespace: "big", TaskQueue: "bulk", Payload: []byte("x")})
	}
	for len(ms) > 0 {
		n := min(len(ms), 2000)
		if _, err := s.Enqueue(ctx, ms[:n]); err != nil {
			t.Fatal(err)
		}
		ms = ms[n:]
	}
	seedDrainHistory(t, s, time.Now())

	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 1000, DefaultQuota: backpressure.Unlimited, Quotas: map[string]int{"big": 0},
		Rates: map[string]backpressure.Rate{"drain": {PerSecond: drainRate, Burst: 5}}}, all)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil }, dispatch.Options{Workers: 8, PollInterval: 20 * time.Millisecond,
		ShutdownTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Operate: &dispatch.Operate{Node: "node-a", ReportInterval: 200 * time.Millisecond, History: true}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	backlog := func() int {
		st, err := s.Namespaces(ctx, outbox.NamespacesParams{Namespace: "drain"})
		if err != nil || len(st) != 1 {
			t.Fatalf("Namespaces(drain) = %+v, %v", st, err)
		}
		return st[0].Ready + st[0].Scheduled + st[0].Claimed
	}
	waitFor(t, "drain two seconds into its live drain", func() bool { return backlog() <= drainRows-2*drainRate })

	srv := httptest.NewServer(admin.NewHandler(s, admin.Options{Refresh: -1}))
	defer srv.Close()
	bctx := browserContext(t, chromium)
	eval := func(what, js string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/tenant?ns=drain"), chromedp.WaitVisible(chromedp.CSS(`#drain`))); err != nil {
		t.Fatalf("loading drain's page: %v", err)
	}
	loaded, atLoad := time.Now(), backlog()
	charts := eval("the charts", `Array.from(document.querySelectorAll('#history svg.chart')).map(e => e.id).join(' ')`)
	if charts != "tenant-rates tenant-backlog tenant-held" {
		t.Errorf("drain's page charts %q, want tenant-rates tenant-backlog tenant-held", charts)
	}
	checkFalls(t, eval("the backlog's line", `document.querySelector('#tenant-backlog polyline').getAttribute('points')`))
	pts, err := s.History(ctx, outbox.HistoryParams{Namespace: "drain", Since: loaded.Add(-admin.ChartSpan)})
	if err != nil {
		t.Fatal(err)
	}
	capped := slices.ContainsFunc(pts, func(p outbox.HistoryPoint) bool { return p.BacklogCapped })
	if label := eval("the backlog chart", `document.querySelector('#tenant-backlog').textContent`); strings.Contains(label, "≥ (capped)") != capped {
		t.Errorf("the backlog chart says %q; the node capped a point's backlog: %v", label, capped)
	}
	if held := eval("the held chart", `document.querySelector('#tenant-held').textContent`); !strings.Contains(held, "rate") {
		t.Errorf("the held-by-reason chart does not name the reason rate: %q", held)
	}
	text := eval("the drain paragraph", `document.querySelector('#drain').textContent`)
	m := regexp.MustCompile(`newest point (\S+) old\)\. Time to drain: (\d[^ .(]*)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("drain's page says %q; want the newest point's age and a time to drain", text)
	}
	estimate, err := time.ParseDuration(m[2])
	if err != nil {
		t.Fatalf("time to drain %q: %v", m[2], err)
	}
	if nodes := eval("the nodes table", `document.querySelector('#nodes').textContent`); !strings.Contains(nodes, " ago") {
		t.Errorf("drain's nodes table does not say how old the report is: %q", nodes)
	}
	if b.name == "sqlite" {
		screenshot(t, bctx, "admin-history.png")
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#tenants`))); err != nil {
		t.Fatalf("loading the tenants page: %v", err)
	}
	if ov := eval("the overview", `Array.from(document.querySelectorAll('#overview svg.chart')).map(e => e.id).join(' ')`); ov != "overview-rates overview-backlog overview-held" {
		t.Errorf("the tenants page's overview charts %q, want overview-rates overview-backlog overview-held", ov)
	}
	if big := eval("big's row", `document.querySelector('tr[data-ns="big"]').textContent`); !strings.Contains(big, "≥ "+strconv.Itoa(outbox.DefaultCountCap)) {
		t.Errorf("big's row on the tenants page does not mark its count capped: %q", big)
	}
	if ages := eval("the ages", `document.querySelector('#ages').textContent + document.querySelector('#overview-age').textContent`); !strings.Contains(ages, "newest point") || !strings.Contains(ages, "old") {
		t.Errorf("the tenants page does not say how old its figures are: %q", ages)
	}

	waitFor(t, "drain empty", func() bool { return backlog() == 0 })
	took := time.Since(loaded)
	off := math.Abs(estimate.Seconds()-took.Seconds()) / took.Seconds()
	// The estimate extrapolates the rate the history shows (drainRate). A
	// machine too busy to hold that rate after the page loaded (below 80%
	// of it) makes any extrapolation wrong, so the accuracy is judged only
	// when the drain kept its rate.
	if held := float64(atLoad) / took.Seconds(); held < 0.8*drainRate {
		t.Logf("the drain held %.1f rows/s of its %d after the page loaded (machine busy): the estimate's accuracy is not judged", held, drainRate)
	} else if off > 0.25 {
		t.Errorf("drain's page said %v to drain; it took %v (off by %.0f%%, above 25%%)", estimate, took, 100*off)
	}
	t.Logf("drain's page said %v to drain (newest point %s old, backlog capped %v); it took %v (off by %.1f%%)", estimate, m[1], capped, took, 100*off)
}

// seedDrainHistory appends the history node-a left before now: a point
// every 10 s for drainSeeded, drain settling drainRate rows/s with its
// backlog falling to drainRows at now, held by its rate.
func seedDrainHistory(t *testing.T, s outbox.Historian, now time.Time) {
	const every = 10 * time.Second
	var pts []outbox.HistoryPoint
	for at := now.Add(-drainSeeded); at.Before(now); at = at.Add(every) {
		backlog := drainRows + int(now.Sub(at).Seconds()*drainRate)
		n := int64(every.Seconds() * drainRate)
		pts = append(pts, outbox.HistoryPoint{Node: "node-a", At: at, Interval: every, NamespaceCounters: outbox.NamespaceCounters{
			Namespace: "drain", Started: n, Settled: n, Backlog: backlog, Held: map[string]int{"rate": backlog - 5}}})
	}
	if err := s.AppendHistory(t.Context(), pts); err != nil {
		t.Fatal(err)
	}
}

// checkFalls fails t unless the polyline points pts (SVG coordinates, y
// down) fall from point to point, and by a tenth of the chart at least.
func checkFalls(t *testing.T, pts string) {
	t.Helper()
	var ys []float64
	for _, p := range strings.Fields(pts) {
		_, y, ok := strings.Cut(p, ",")
		v, err := strconv.ParseFloat(y, 64)
		if !ok || err != nil {
			t.Fatalf("the backlog's point %q in %q", p, pts)
		}
		ys = append(ys, v)
	}
	if len(ys) < 10 {
		t.Fatalf("the backlog's line has %d points, want one a minute over the seeded %v: %q", len(ys), drainSeeded, pts)
	}
	for i := 1; i < len(ys); i++ {
		if ys[i] < ys[i-1] {
			t.Errorf("the backlog's line rises from point %d to %d (y %.1f to %.1f): %q", i-1, i, ys[i-1], ys[i], pts)
		}
	}
	if ys[len(ys)-1]-ys[0] < admin.ChartHeight/10 {
		t.Errorf("the backlog's line falls by %.1f px only: %q", ys[len(ys)-1]-ys[0], pts)
	}
}

// browserContext starts headless Chromium for t.
func browserContext(t *testing.T, chromium string) context.Context {
	actx, acancel := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 700))
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	bctx, tcancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(tcancel)
	return bctx
}

// screenshot saves the page as name in a temporary directory, and in
// docs/ with -update-screenshots.
func screenshot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if *updateScreenshots {
		dir = filepath.Join("..", "..", "..", "..", "docs")
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", filepath.Join(dir, name))
}
