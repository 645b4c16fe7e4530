package ctl

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// client is a browser-like client of one admin server: a cookie jar, no
// redirects followed.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, srv *httptest.Server) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: srv.URL, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values, header ...string) (int, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token loads path and returns the CSRF token of its forms.
func (c *client) token(path string) string {
	c.t.Helper()
	code, body := c.do("GET", path, nil)
	m := csrfField.FindStringSubmatch(body)
	if code != 200 || m == nil {
		c.t.Fatalf("GET %s: %d, no CSRF token in the page", path, code)
	}
	return m[1]
}

// TestAdminHandler checks the admin pages' HTTP behaviour against a real
// SQLite file and a real PostgreSQL schema: status codes of every page,
// read-only mode (no forms, every POST 403), CSRF (a POST without the
// page's token, with another browser's token, or from another origin is
// 403 and changes nothing), and that the actions act.
func TestAdminHandler(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			fill(t, s, c)

			ro := httptest.NewServer(admin.NewHandler(s, admin.Options{Now: c.Now}))
			defer ro.Close()
			r := newClient(t, ro)
			for _, p := range []struct {
				method, path string
				code         int
				want         string
			}{
				{"GET", "/", 200, "at-ceiling"},
				{"GET", "/?sort=ready&desc=1", 200, `ready ▼`},
				{"GET", "/?sort=bogus", 200, `namespace ▲`},
				{"GET", "/tenant?ns=alpha", 200, "held at its ceiling"},
				// alpha's one route, email: 8 ready, none scheduled, 2 claimed.
				{"GET", "/tenant?ns=alpha", 200, `<tr><td class="l">email</td><td>8</td><td>0</td><td>2</td></tr>`},
				{"GET", "/tenant?ns=nobody", 200, "no route has pending or claimed rows"},
				{"GET", "/tenant", 400, "ns is missing"},
				{"GET", "/tenant?ns=%00", 400, "NUL"},
				{"GET", "/dead", 200, "beta-00"},
				{"GET", "/dead", 200, `<td class="l err">smtp: 550 mailbox unavailable</td></tr>`},
				{"GET", "/dead", 200, "dead letters grouped."},
				{"GET", "/dead?ns=alpha", 200, "no dead letters"},
				{"GET", "/nodes", 200, "node-1"},
				{"GET", "/nowhere", 404, ""},
				{"DELETE", "/", 405, ""},
				{"POST", "/pause", 403, "actions are disabled"},
				{"POST", "/dead/requeue", 403, "actions are disabled"},
			} {
				code, body := r.do(p.method, p.path, url.Values{"ns": {"alpha"}})
				if code != p.code || !strings.Contains(body, p.want) {
					t.Errorf("read-only %s %s = %d, want %d with %q:\n%.400s", p.method, p.path, code, p.code, p.want, body)
				}
			}
			if _, body := r.do("GET", "/dead", nil); strings.Contains(body, `method="post"`) || strings.Contains(body, "csrf") {
				t.Errorf("read-only dead letters page has forms:\n%s", body)
			}
			if _, body := r.do("GET", "/", nil); !strings.Contains(body, `http-equiv="refresh" content="5"`) {
				t.Errorf("tenants page does not refresh itself every 5s")
			}

			rw := httptest.NewServer(admin.NewHandler(s, admin.Options{Actions: true, Now: c.Now}))
			defer rw.Close()
			a, other := newClient(t, rw), newClient(t, rw)
			tok, otherTok := a.token("/dead"), other.token("/dead")
			requeue := func(tok string, header ...string) int {
				code, _ := a.do("POST", "/dead/requeue", url.Values{"csrf": {tok}, "key": {"beta-00"}, "back": {"./dead"}}, header...)
				return code
			}
			for _, c := range []struct {
				name   string
				tok    string
				header []string
			}{
				{"no token", "", nil},
				{"another browser's token", otherTok, nil},
				{"a cross-site request", tok, []string{"Sec-Fetch-Site", "cross-site"}},
				{"another origin", tok, []string{"Origin", "https://evil.example"}},
			} {
				if code := requeue(c.tok, c.header...); code != 403 {
					t.Errorf("requeue with %s = %d, want 403", c.name, code)
				}
				if st := get(t, s, "beta-00").State; st != outbox.StateDead {
					t.Fatalf("after a refused requeue (%s), beta-00 is %s", c.name, st)
				}
			}
			if code := requeue(tok); code != 303 {
				t.Fatalf("requeue with the page's token = %d, want 303", code)
			}
			for _, c := range []struct{ path, back, want string }{
				{"/dead/requeue", "./dead?ns=beta", "../dead?ns=beta"},
				{"/pause", "./tenant?ns=beta", "./tenant?ns=beta"},
				{"/pause", "https://evil.example/", "./"},
				{"/dead/purge", "./../x", "../"},
			} {
				res, err := a.http.PostForm(rw.URL+c.path, url.Values{"csrf": {tok}, "back": {c.back}, "scope": {"ns"}, "ns": {"nobody"}})
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if loc := res.Header.Get("Location"); res.StatusCode != 303 || loc != c.want {
					t.Errorf("POST %s back=%q: %d to %q, want 303 to %q", c.path, c.back, res.StatusCode, loc, c.want)
				}
			}
			if st := get(t, s, "beta-00").State; st != outbox.StatePending {
				t.Errorf("after requeue, beta-00 is %s, want pending", st)
			}
			for _, p := range []struct {
				path string
				form url.Values
				code int
			}{
				{"/quota", url.Values{"ns": {"alpha"}, "quota": {"lots"}}, 400},
				{"/quota", url.Values{"ns": {"alpha"}, "quota": {"-3"}}, 400},
				{"/quota", url.Values{"ns": {""}, "quota": {"3"}}, 400},
				{"/dead/purge", url.Values{}, 400},
				{"/dead/purge", url.Values{"scope": {"everything"}}, 400},
				{"/quota", url.Values{"ns": {"alpha"}, "quota": {"7"}}, 303},
				{"/pause", url.Values{"ns": {"gamma"}}, 303},
				{"/dead/purge", url.Values{"scope": {"ns"}, "ns": {"beta"}}, 303},
			} {
				p.form.Set("csrf", tok)
				if code, body := a.do("POST", p.path, p.form); code != p.code {
					t.Errorf("POST %s %v = %d, want %d: %s", p.path, p.form, code, p.code, body)
				}
			}
			ls, err := s.ListSettings(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, l := range ls {
				got[l.Namespace] = settingsText(l)
			}
			if got["alpha"] != "quota=7" || got["gamma"] != "paused" {
				t.Errorf("settings after the actions: %v, want alpha quota=7, gamma paused", got)
			}
			if dead, _ := s.ListDead(t.Context(), outbox.ListDeadParams{}); len(dead) != 0 {
				t.Errorf("after purging beta's dead letters: %d left", len(dead))
			}
		})
	}
}

func get(t *testing.T, s admin.Store, key string) outbox.Row {
	t.Helper()
	r, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
