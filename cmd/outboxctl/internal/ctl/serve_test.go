package ctl

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// syncBuffer is a bytes.Buffer safe for serve's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// served runs outboxctl with args (serve and its flags) on the backend
// until the test ends, listening on loopback whatever -addr says, and
// returns the server's base URL and what it printed.
func served(t *testing.T, b backend, c *clock, args ...string) (string, *syncBuffer) {
	t.Helper()
	addrs := make(chan string, 1)
	var errb syncBuffer
	cfg := Config{Stdout: &errb, Stderr: &errb, Now: c.Now, Listen: func(network, _ string) (net.Listener, error) {
		l, err := net.Listen(network, "127.0.0.1:0")
		if err == nil {
			addrs <- l.Addr().String()
		}
		return l, err
	}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- cfg.Run(ctx, append(append(append([]string{}, b.flags...), "-as", "tester"), args...))
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addrs:
		waitFor(t, "serve's first line", func() bool { return strings.Contains(errb.String(), "serving") })
		return "http://" + a, &errb
	case code := <-done:
		t.Fatalf("outboxctl %v exited %d before listening: %s", args, code, errb.String())
	}
	return "", nil
}

// rawClient is a client of one server that follows no redirect.
func rawClient(t *testing.T, base string) *client {
	return newClient(t, &httptest.Server{URL: base})
}

var printedToken = regexp.MustCompile(`\?token=([A-Za-z0-9_-]+)`)

// TestServeCredentials checks serve's credentials on both stores: off
// loopback it refuses to start without them; with -actions on loopback
// and none given it prints a URL with a token made at start; a request
// without the token is 401 and changes nothing (a POST pause included);
// the token in the URL becomes an HttpOnly SameSite=Strict cookie and a
// 303 to the URL without it; with the cookie an action is recorded in the
// audit trail under -as. A token from $OUTBOXCTL_TOKEN works as a Bearer
// header; basic auth from a file names its user in the trail.
func TestServeCredentials(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			fill(t, s, c)
			t.Setenv(tokenEnv, "")
			t.Setenv(basicEnv, "")
			if code, _, errOut := run(t, b, c, "serve", "-addr", "0.0.0.0:0"); code != ExitUsage || !strings.Contains(errOut, "not loopback") {
				t.Errorf("serve -addr 0.0.0.0:0 without credentials: exit %d, %q; want %d, refusing", code, errOut, ExitUsage)
			}

			base, out := served(t, b, c, "serve", "-addr", "127.0.0.1:0", "-actions")
			m := printedToken.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("serve -actions on loopback printed no URL with a token: %q", out.String())
			}
			cl := rawClient(t, base)
			before := settingsOf(t, s, "beta")
			for _, req := range []struct {
				method, path string
				form         url.Values
			}{{"GET", "/", nil}, {"GET", "/tenant?ns=beta", nil}, {"GET", "/audit", nil}, {"GET", "/?token=wrong", nil},
				{"POST", "/pause", url.Values{"ns": {"beta"}, "csrf": {"x"}}}} {
				if code, _ := cl.do(req.method, req.path, req.form, "Origin", base); code != http.StatusUnauthorized {
					t.Errorf("%s %s without credentials: %d, want 401", req.method, req.path, code)
				}
			}
			if got := settingsOf(t, s, "beta"); got != before {
				t.Errorf("beta's settings after an unauthorised pause: %s, want %s", got, before)
			}

			res := noRedirect(t, base+"/?sort=dead&token="+m[1])
			ck := res.Cookies()
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/?sort=dead" || len(ck) != 1 ||
				!ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Value != m[1] {
				t.Fatalf("GET with the token: %d, Location %q, cookies %v; want 303 to /?sort=dead with the token's HttpOnly SameSite=Strict cookie",
					res.StatusCode, res.Header.Get("Location"), ck)
			}
			u, _ := url.Parse(base)
			cl.http.Jar.SetCookies(u, ck)
			csrf := cl.token("/tenant?ns=beta")
			if code, body := cl.do("POST", "/pause", url.Values{"ns": {"beta"}, "csrf": {csrf}, "back": {"./tenant?ns=beta"}}, "Origin", base); code != http.StatusSeeOther {
				t.Fatalf("pause with the cookie: %d %s", code, body)
			}
			es, err := s.Audit(t.Context(), outbox.AuditParams{Namespace: "beta", Limit: 1})
			if err != nil || len(es) != 1 || es[0].Operator != "tester" || es[0].Action != outbox.ActionPause {
				t.Errorf("beta's newest audit entry = %+v, %v; want tester's pause", es, err)
			}
			if code, body := cl.do("GET", "/audit?ns=beta", nil); code != 200 || !strings.Contains(body, `<td class="l operator">tester</td><td class="l action">pause</td>`) {
				t.Errorf("GET /audit?ns=beta: %d; the page does not list tester's pause:\n%s", code, body)
			}
		})
	}
}

// TestServeTokenAndBasicAuth checks credentials given by the environment
// (a token, sent as a Bearer header) and by a file (basic auth, whose
// user the trail names), off loopback.
func TestServeTokenAndBasicAuth(t *testing.T) {
	b := backends(t)[0]
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := b.open(t, c.Now)
	fill(t, s, c)
	t.Setenv(tokenEnv, "s3cret-token")
	t.Setenv(basicEnv, "")
	base, out := served(t, b, c, "serve", "-addr", "0.0.0.0:0")
	if strings.Contains(out.String(), "s3cret") {
		t.Errorf("serve printed the token it was given: %q", out.String())
	}
	cl := rawClient(t, base)
	if code, _ := cl.do("GET", "/", nil); code != http.StatusUnauthorized {
		t.Errorf("GET / without the token: %d, want 401", code)
	}
	if code, _ := cl.do("GET", "/", nil, "Authorization", "Bearer s3cret-tokeN"); code != http.StatusUnauthorized {
		t.Errorf("GET / with a wrong Bearer token: %d, want 401", code)
	}
	if code, _ := cl.do("GET", "/", nil, "Authorization", "Bearer s3cret-token"); code != 200 {
		t.Errorf("GET / with the Bearer token: %d, want 200", code)
	}

	t.Setenv(tokenEnv, "")
	file := filepath.Join(t.TempDir(), "basic")
	if err := os.WriteFile(file, []byte("erin:pa55word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ = served(t, b, c, "serve", "-addr", "0.0.0.0:0", "-actions", "-basic-auth-file", file)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("GET / without basic auth: %d, WWW-Authenticate %q; want 401 and a Basic challenge", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	u, _ := url.Parse(base)
	u.User = url.UserPassword("erin", "pa55word")
	cl = rawClient(t, u.String())
	csrf := cl.token("/tenant?ns=gamma")
	if code, body := cl.do("POST", "/quota", url.Values{"ns": {"gamma"}, "quota": {"7"}, "csrf": {csrf}}, "Origin", base); code != http.StatusSeeOther {
		t.Fatalf("set quota with basic auth: %d %s", code, body)
	}
	es, err := s.Audit(t.Context(), outbox.AuditParams{Namespace: "gamma", Limit: 1})
	if err != nil || len(es) != 1 || es[0].Operator != "erin" || es[0].Action != outbox.ActionSet {
		t.Errorf("gamma's newest audit entry = %+v, %v; want erin's set", es, err)
	}
}

// TestAdminAuthorize checks admin.Options.Authorize as a host
// application uses it: a request it refuses is 401 and changes nothing;
// the name it gives is the operator the audit trail records.
func TestAdminAuthorize(t *testing.T) {
	b := backends(t)[0]
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := b.open(t, c.Now)
	fill(t, s, c)
	h := admin.NewHandler(s, admin.Options{Actions: true, Authorize: func(r *http.Request) (string, error) {
		if u := r.Header.Get("X-User"); u != "" {
			return u, nil
		}
		return "", http.ErrNoCookie
	}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	cl := newClient(t, srv)
	before := settingsOf(t, s, "alpha")
	if code, _ := cl.do("POST", "/pause", url.Values{"ns": {"alpha"}}, "Origin", srv.URL); code != http.StatusUnauthorized {
		t.Errorf("POST /pause refused by Authorize: %d, want 401", code)
	}
	if got := settingsOf(t, s, "alpha"); got != before {
		t.Errorf("alpha's settings after a refused pause: %s, want %s", got, before)
	}
	code, body := cl.do("GET", "/tenant?ns=alpha", nil, "X-User", "dana")
	m := csrfField.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("GET /tenant as dana: %d, no CSRF token", code)
	}
	if code, body := cl.do("POST", "/rate", url.Values{"ns": {"alpha"}, "rate": {"20/s"}, "burst": {"10"}, "csrf": {m[1]}}, "X-User", "dana", "Origin", srv.URL); code != http.StatusSeeOther {
		t.Fatalf("POST /rate as dana: %d %s", code, body)
	}
	es, err := s.Audit(t.Context(), outbox.AuditParams{Namespace: "alpha", Limit: 1})
	if err != nil || len(es) != 1 || es[0].Operator != "dana" || es[0].Action != outbox.ActionSet || !strings.Contains(es[0].After, `"rate":{"per_second":20,"burst":10}`) {
		t.Errorf("alpha's newest audit entry = %+v, %v; want dana's set of rate 20/s burst 10", es, err)
	}
}

// settingsOf is ns's shared settings row as text.
func settingsOf(t *testing.T, s admin.Store, ns string) string {
	t.Helper()
	list, err := s.ListSettings(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range list {
		if set.Namespace == ns {
			return string(outbox.EncodeSettings(set)) + " version " + strconv.FormatInt(set.Version, 10)
		}
	}
	return "none"
}

// noRedirect fetches u without following redirects.
func noRedirect(t *testing.T, u string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// TestMigrateRecorded: outboxctl migrate of a new outbox records the
// migration in the audit trail under -as, on both stores, and a migrate
// with nothing to do records nothing.
func TestMigrateRecorded(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			for range 2 {
				if code, _, errOut := run(t, b, c, "-shards", "16", "migrate"); code != ExitOK {
					t.Fatalf("migrate: exit %d: %s", code, errOut)
				}
			}
			es, err := b.open(t, c.Now).Audit(t.Context(), outbox.AuditParams{})
			if err != nil || len(es) != 1 || es[0].Operator != "tester" || es[0].Action != outbox.ActionMigrate || es[0].Before != "schema version 0" {
				t.Errorf("the trail after two migrates of a new outbox = %+v, %v; want tester's one migration from version 0", es, err)
			}
		})
	}
}
