package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/sqlitestore"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser test's screenshots to docs/ of the repository")

// chromiumPath finds Debian's Chromium, or "".
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestBrowser drives headless Chromium over the admin pages of a live
// dispatcher on a real SQLite file: namespace alpha is held at its
// ceiling by long-running handlers, beta's rows fail permanently into dead
// letters. The test loads the tenants page and sees alpha held at its
// ceiling, clicks Pause on beta's page, waits for the dispatcher to apply
// it, clicks Requeue on one of beta's dead letters, and checks in the store
// that the row is pending again (paused, so nothing claims it) and on the
// page that beta shows it ready. It saves a screenshot of each page
// (-update-screenshots copies them to docs/). Without Chromium it skips.
func TestBrowser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("browser test skipped: no chromium on PATH (make browser installs Debian's)")
	}
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ms []outbox.Message
	for i := range 12 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("alpha-%02d", i), Namespace: "alpha", TaskQueue: "email", Payload: []byte("x")})
	}
	for i := range 4 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("beta-%02d", i), Namespace: "beta", TaskQueue: "webhook", Payload: []byte("x")})
	}
	for i := range 5 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("gamma-%02d", i), Namespace: "gamma", TaskQueue: "push", Payload: []byte("x")})
	}
	if _, err := s.Enqueue(t.Context(), ms); err != nil {
		t.Fatal(err)
	}

	// The live dispatcher: alpha's handlers run until the test ends (so
	// alpha stays at its ceiling of 2), beta's fail for good, gamma's
	// succeed.
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 8, DefaultQuota: backpressure.Unlimited, Quotas: map[string]int{"alpha": 2}}, all)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var applied atomic.Int64
	d, err := dispatch.New(bp, s, func(ctx context.Context, row outbox.Row) error {
		switch row.Namespace {
		case "alpha":
			select {
			case <-stop:
			case <-ctx.Done():
			}
			return nil
		case "beta":
			return dispatch.Permanent(errors.New("webhook: 410 Gone"))
		}
		return nil
	}, dispatch.Options{Workers: 6, PollInterval: 50 * time.Millisecond, ShutdownTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: settingsSeen{&applied},
		Operate: &dispatch.Operate{Node: "node-a", SharedSettings: true, SettingsInterval: 100 * time.Millisecond, ReportInterval: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	defer func() { close(stop); cancel(); <-done }()
	waitFor(t, "beta's rows dead and alpha held at its ceiling", func() bool {
		st, _ := s.Namespaces(t.Context(), outbox.NamespacesParams{})
		reps, _ := s.NodeReports(t.Context())
		return len(st) == 3 && st[1].Dead == 4 && st[2].Settled == 5 && len(reps) == 1 && strings.Contains(fmt.Sprint(reps[0].Plan), "at-ceiling")
	})

	// Mounted under a prefix, as a service would, behind outboxctl serve's
	// credentials: the token made at start (no credentials given, -actions
	// on loopback), the operator named by -as.
	cr, token, err := loadCreds(&cmdArgs{addr: "127.0.0.1:0", actions: true}, true)
	if err != nil || !cr.made {
		t.Fatalf("loadCreds for -actions on loopback: made %v, %v; want a token made", cr.made, err)
	}
	g := guard{c: cr, as: "browser-op", cookie: "outboxctl_token_test"}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", admin.NewHandler(s, admin.Options{Actions: true, Refresh: -1, Authorize: g.authorize})))
	srv := httptest.NewServer(g.wrap(mux))
	defer srv.Close()
	base := srv.URL + "/ops"

	actx, acancel := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 700))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 90*time.Second)
	defer tcancel()

	shots := t.TempDir()
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		if *updateScreenshots {
			if err := os.WriteFile(filepath.Join("..", "..", "..", "..", "docs", name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Without the token: 401, and the page shows nothing of the outbox.
	res, err := chromedp.RunResponse(bctx, chromedp.Navigate(base+"/"))
	if err != nil || res.Status != http.StatusUnauthorized {
		t.Fatalf("loading the tenants page without the token: %v, %v; want 401", res, err)
	}
	if body := text(`body`); strings.Contains(body, "alpha") || !strings.Contains(body, "not authorised") {
		t.Errorf("the 401 page shows %q; want a refusal and no tenant", body)
	}
	// The URL serve prints: the token becomes a cookie and leaves the URL.
	do("loading the URL with the token", chromedp.Navigate(base+"/?token="+token), chromedp.WaitVisible(chromedp.CSS(`#tenants`)))
	if loc, err := chromedp.Run(bctx, chromedp.Location()); err != nil || loc != base+"/" {
		t.Errorf("after the URL with the token, the browser is at %q, %v; want %q, without the token", loc, err, base+"/")
	}
	cookies, err := chromedp.Run(bctx, func(ctx context.Context, tg *chromedp.Target) (*network.GetCookiesResult, error) {
		r, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{})
		return &r, err
	})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cookies.Cookies {
		if c.Name == g.cookie {
			found = c.HTTPOnly && c.SameSite == network.CookieSameSiteStrict
		}
	}
	if !found {
		t.Errorf("no HttpOnly SameSite=Strict cookie %s among the browser's cookies %+v", g.cookie, cookies.Cookies)
	}
	do("loading the tenants page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#tenants`)))
	if row := text(`tr[data-ns="alpha"]`); !strings.Contains(row, "at-ceiling") {
		t.Errorf("alpha's row on the tenants page does not show it held at its ceiling: %q", row)
	}
	shot("admin-tenants.png")

	// Pause beta from its page, and wait for the dispatcher to apply it.
	do("pausing beta", chromedp.Navigate(base+"/tenant?ns=beta"), chromedp.WaitVisible(chromedp.CSS(`#pause`)),
		chromedp.Click(chromedp.CSS(`#pause`)), chromedp.WaitVisible(chromedp.CSS(`#resume`)))
	v, err := s.SettingsVersion(t.Context())
	if err != nil || v < 1 {
		t.Fatalf("after clicking Pause: settings version %d, %v", v, err)
	}
	waitFor(t, "the dispatcher applied the pause", func() bool {
		reps, err := s.NodeReports(t.Context())
		return err == nil && len(reps) == 1 && reps[0].SettingsVersion >= v && reps[0].SettingsError == "" && applied.Load() >= v
	})

	// Requeue one dead letter with its row's button.
	do("loading beta's dead letters", chromedp.Navigate(base+"/dead?ns=beta"), chromedp.WaitVisible(chromedp.CSS(`tr[data-key="beta-02"]`)))
	if dead := text(`#dead`); !strings.Contains(dead, "webhook: 410 Gone") {
		t.Errorf("dead letters page does not show the last error: %q", dead)
	}
	shot("admin-dead.png")
	do("clicking Requeue", chromedp.Click(chromedp.CSS(`tr[data-key="beta-02"] button.requeue-one`)),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-key="beta-02"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-key="beta-03"]`)))
	row, err := s.Get(t.Context(), "beta-02")
	if err != nil {
		t.Fatal(err)
	}
	if row.State != outbox.StatePending || row.Attempts != 0 {
		t.Errorf("after clicking Requeue, beta-02 is %s with %d attempts, want pending with 0", row.State, row.Attempts)
	}
	do("loading beta's page", chromedp.Navigate(base+"/tenant?ns=beta"), chromedp.WaitVisible(chromedp.CSS(`#rows`)))
	if ready := text(`#rows tr:nth-of-type(2) td:first-child`); strings.TrimSpace(ready) != "1" {
		t.Errorf("beta's page shows %q ready, want 1", ready)
	}
	shot("admin-tenant.png")

	// Both actions are in the audit trail, newest first, with their operator.
	do("loading the audit trail", chromedp.Navigate(base+"/audit?ns=beta"), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	first, second := text(`#audit tr:nth-of-type(2)`), text(`#audit tr:nth-of-type(3)`)
	if !strings.Contains(first, "browser-op") || !strings.Contains(first, "requeue") || !strings.Contains(second, "browser-op") || !strings.Contains(second, "pause") {
		t.Errorf("beta's audit trail shows %q then %q; want browser-op's requeue, then browser-op's pause", first, second)
	}
	shot("admin-audit.png")
	t.Logf("screenshots in %s", shots)
}

// settingsSeen records the newest shared settings version the dispatcher
// applied.
type settingsSeen struct{ n *atomic.Int64 }

func (settingsSeen) Swept(dispatch.SweepEvent)                 {}
func (settingsSeen) Completed(dispatch.CompletionEvent)        {}
func (settingsSeen) Adapted(dispatch.AdaptEvent)               {}
func (settingsSeen) LeaseLost(dispatch.LeaseLostEvent)         {}
func (settingsSeen) LeasesExtended(int)                        {}
func (settingsSeen) Panicked(outbox.Row)                       {}
func (settingsSeen) StoreFailed(string, error)                 {}
func (m settingsSeen) SettingsApplied(v int64)                 { m.n.Store(v) }
func (settingsSeen) SettingsRejected(version int64, err error) {}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
