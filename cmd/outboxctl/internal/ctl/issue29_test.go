package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// hostile is a namespace every layer of a link must carry intact: a space,
// a slash, %, +, ?, #, &, =, markup and non-ASCII letters.
const hostile = "acme corp/eu %2F+?#&=<b>ü"

// enqueueDead enqueues two rows of ns, claims both and dead-letters the
// first, with errText as its last error.
func enqueueDead(t *testing.T, s admin.Store, ns, errText string) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.Enqueue(ctx, []outbox.Message{
		{DispatchKey: ns + "-dead", Namespace: ns, TaskQueue: "q"},
		{DispatchKey: ns + "-live", Namespace: ns, TaskQueue: "q"},
	}); err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	rows, err := s.Claimer().ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: ns, TaskQueue: "q"}, Limit: 1}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v, %v", rows, err)
	}
	if _, err := s.Complete(ctx, []outbox.Completion{outbox.DeadLetterRow(rows[0], errors.New(errText))}); err != nil {
		t.Fatal(err)
	}
}

var hrefAttr = regexp.MustCompile(`href="([^"]*)"`)

// links returns the page's links that go to path, resolved, with their
// query parsed.
func links(t *testing.T, body, path string) []url.Values {
	t.Helper()
	var out []url.Values
	for _, m := range hrefAttr.FindAllStringSubmatch(body, -1) {
		u, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatalf("link %q: %v", m[1], err)
		}
		if p := strings.TrimPrefix(u.Path, "."); p == path || p == "" && path == "/" {
			out = append(out, u.Query())
		}
	}
	return out
}

var nsField = regexp.MustCompile(`name="ns" value="([^"]*)"`)

// TestAdminHostileNamespace (issue 29, item 14): every link to a
// namespace's page, its dead letters or the next page carries the name
// once escaped, so that following it shows that namespace, and its Pause
// button pauses it, not a namespace named after its escaped form.
func TestAdminHostileNamespace(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			enqueueDead(t, s, hostile, "boom")
			enqueueDead(t, s, "acme", "boom")
			srv := httptest.NewServer(admin.NewHandler(s, admin.Options{Actions: true, Now: c.Now}))
			defer srv.Close()
			a := newClient(t, srv)
			_, overview := a.do("GET", "/", nil)
			if strings.Contains(overview, "<b>") {
				t.Errorf("the overview shows markup of a namespace unescaped")
			}
			for _, path := range []string{"/tenant", "/dead"} {
				found := false
				for _, q := range links(t, overview, path) {
					found = found || q.Get("ns") == hostile
				}
				if !found {
					t.Fatalf("the overview has no link to %s of %q; links: %v", path, hostile, links(t, overview, path))
				}
			}
			code, page := a.do("GET", "/tenant?ns="+url.QueryEscape(hostile), nil)
			text := html.UnescapeString(page)
			if code != 200 || !strings.Contains(text, "<h1>"+hostile+"</h1>") || !strings.Contains(text, `class="payload-link">`+hostile+"-dead</a></td>") ||
				!strings.Contains(text, "<tr><td>1</td>") {
				t.Fatalf("the tenant page of %q: %d\n%s", hostile, code, page)
			}
			if got := links(t, page, "/dead"); len(got) == 0 || got[len(got)-1].Get("ns") != hostile {
				t.Errorf("the tenant page's dead-letter link: %v, want ns %q", got, hostile)
			}
			m := nsField.FindStringSubmatch(page)
			if m == nil || html.UnescapeString(m[1]) != hostile {
				t.Fatalf("the tenant page's Pause form names %v, want %q", m, hostile)
			}
			if code, body := a.do("POST", "/pause", url.Values{"csrf": {a.token("/tenant?ns=acme")}, "ns": {html.UnescapeString(m[1])}}); code != 303 {
				t.Fatalf("pause: %d %s", code, body)
			}
			ls, err := s.ListSettings(t.Context())
			if err != nil || len(ls) != 1 || ls[0].Namespace != hostile || !ls[0].Paused {
				t.Errorf("settings after Pause on the page of %q: %+v, %v", hostile, ls, err)
			}
			// Paging: the first page holds "acme" alone; its next-page link
			// and the column links of the next page carry After intact.
			_, first := a.do("GET", "/?limit=1", nil)
			next := links(t, first, "/")
			if len(next) == 0 || next[len(next)-1].Get("after") != "acme" {
				t.Fatalf("the first page's next-page link: %v", next)
			}
			_, second := a.do("GET", "/?limit=1&after=acme", nil)
			for _, q := range links(t, second, "/") {
				if q.Has("after") && q.Get("after") != "acme" && q.Get("after") != hostile {
					t.Errorf("a link of the second page carries after=%q", q.Get("after"))
				}
			}
			if got := links(t, second, "/"); len(got) == 0 || got[len(got)-1].Get("after") != hostile {
				t.Errorf("the second page's next-page link: %v, want after %q", got, hostile)
			}
		})
	}
}

// TestAdminEmptyQuota (issue 29, item 15): the quota form submitted empty
// (or blank) is refused with 400 and a message saying what to enter, and
// the shared quota stays.
func TestAdminEmptyQuota(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			seven := 7
			if _, err := s.PutSettings(t.Context(), outbox.NamespaceSettings{Namespace: "alpha", Quota: &seven}); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(admin.NewHandler(s, admin.Options{Actions: true, Now: c.Now}))
			defer srv.Close()
			a := newClient(t, srv)
			tok := a.token("/tenant?ns=alpha")
			for _, v := range []string{"", "   "} {
				code, body := a.do("POST", "/quota", url.Values{"csrf": {tok}, "ns": {"alpha"}, "quota": {v}})
				if code != 400 || !strings.Contains(body, "quota is empty") {
					t.Errorf("POST /quota with quota %q = %d %q, want 400 saying it is empty", v, code, body)
				}
			}
			if code, body := a.do("POST", "/quota", url.Values{"csrf": {tok}, "ns": {"alpha"}}); code != 400 {
				t.Errorf("POST /quota without a quota = %d %q, want 400", code, body)
			}
			ls, err := s.ListSettings(t.Context())
			if err != nil || len(ls) != 1 || ls[0].Quota == nil || *ls[0].Quota != 7 {
				t.Errorf("settings after refused quotas: %+v, %v; want alpha's quota 7", ls, err)
			}
		})
	}
}

// TestBadArguments (issue 29, item 16): every command refuses every
// namespace, key and number no store call could accept alike, with exit 2,
// before it opens the store: on a file that does not exist (and is not
// created) as on an existing outbox.
func TestBadArguments(t *testing.T) {
	long := strings.Repeat("n", 256)
	var cases [][]string
	for _, ns := range []string{"\xff", "a\x00b", long} {
		cases = append(cases,
			[]string{"why", ns}, []string{"pause", ns}, []string{"resume", ns}, []string{"reset", ns},
			[]string{"set", "quota", ns, "1"}, []string{"set", "weight", ns, "1"},
			[]string{"dead", "list", "-namespace", ns},
			[]string{"dead", "requeue", "-namespace", ns}, []string{"dead", "purge", "-namespace", ns},
			[]string{"tenants", "-after", ns})
	}
	cases = append(cases, []string{"why", ""}, []string{"pause", ""}, []string{"set", "quota", "", "1"},
		[]string{"dead", "requeue", ""}, []string{"dead", "purge", "-dry-run", "k", ""})
	for _, key := range []string{"\xff", "a\x00b", strings.Repeat("k", outbox.MaxDispatchKeyBytes+1)} {
		cases = append(cases, []string{"dead", "requeue", key}, []string{"dead", "purge", "-dry-run", key}, []string{"dead", "list", "-after", key})
	}
	for _, n := range []string{"0", "-1", "10001", "x"} {
		cases = append(cases, []string{"dead", "list", "-limit", n})
	}
	for _, n := range []string{"0", "-1", "1001", "x"} {
		cases = append(cases, []string{"tenants", "-limit", n})
	}
	cases = append(cases,
		[]string{"set", "quota", "a", "lots"}, []string{"set", "quota", "a", "-5"}, []string{"set", "quota", "a", "1.5"},
		[]string{"set", "weight", "a", "0"}, []string{"set", "weight", "a", "unlimited"},
		[]string{"dead", "requeue"}, []string{"dead", "purge", "-all", "k"},
		[]string{"serve", "-addr", "nowhere"}, []string{"-shards", "-1", "stats"}, []string{"-shards", "100000000", "tenants"},
		[]string{"-shards", "-1", "migrate"})
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	stores := []backend{{name: "missing file", flags: []string{"-sqlite", missing}}}
	for _, b := range backends(t) {
		b.open(t, c.Now).Close()
		stores = append(stores, b)
	}
	for _, b := range stores {
		cases := cases
		if b.name == "postgres" {
			cases = append(cases, []string{"-schema", "Not A Schema", "stats"}, []string{"-schema", "pg_x", "migrate"},
				[]string{"-schema", "Bad", "migrate", "-print"}, []string{"-dsn", "postgres://%zz", "stats"})
		}
		for _, args := range cases {
			code, out, errOut := run(t, b, c, args...)
			if code != ExitUsage || out != "" {
				t.Errorf("%s: outboxctl %q: exit %d, stdout %q, stderr %q; want exit 2", b.name, args, code, out, errOut)
			}
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bad arguments created the store's file: %v", err)
	}
}

// TestNothingThere (issue 29, item 17): a namespace with no rows and no
// settings is said to be so by why and by pause (which still pauses it);
// and no command but migrate creates an outbox: on a file or schema that
// does not exist each fails with exit 1, saying so and how to create it,
// and leaves it not existing.
func TestNothingThere(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			fill(t, b.open(t, c.Now), c)
			if code, out, _ := run(t, b, c, "why", "nosuch"); code != 0 || !strings.Contains(out, "no rows and no shared settings") {
				t.Errorf("why nosuch: exit %d:\n%s", code, out)
			}
			if code, out, _ := run(t, b, c, "why", "alpha"); code != 0 || strings.Contains(out, "no rows and no shared settings") {
				t.Errorf("why alpha: exit %d:\n%s", code, out)
			}
			code, out, _ := run(t, b, c, "pause", "nosuch")
			if code != 0 || !strings.Contains(out, "nosuch: paused") || !strings.Contains(out, "has no rows") {
				t.Errorf("pause nosuch: exit %d:\n%s", code, out)
			}
			if code, out, _ := run(t, b, c, "pause", "alpha"); code != 0 || strings.Contains(out, "has no rows") {
				t.Errorf("pause alpha: exit %d:\n%s", code, out)
			}
		})
	}
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	missing := filepath.Join(t.TempDir(), "typo.db")
	stores := []struct {
		b      backend
		exists func() bool
	}{{backend{name: "sqlite", flags: []string{"-sqlite", missing}}, func() bool { _, err := os.Stat(missing); return err == nil }}}
	for _, b := range backends(t) {
		if b.name != "postgres" {
			continue
		}
		schema := b.flags[len(b.flags)-1]
		stores = append(stores, struct {
			b      backend
			exists func() bool
		}{b, func() bool {
			conn, err := pgx.Connect(t.Context(), databaseURL())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.WithoutCancel(t.Context()))
			var ok bool
			if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			return ok
		}})
	}
	for _, st := range stores {
		for _, args := range [][]string{{"tenants"}, {"why", "a"}, {"dead", "list"}, {"dead", "requeue", "-all"}, {"dead", "purge", "k"},
			{"stats"}, {"nodes"}, {"pause", "a"}, {"resume", "a"}, {"set", "quota", "a", "1"}, {"serve", "-addr", "127.0.0.1:0"}} {
			code, out, errOut := run(t, st.b, c, args...)
			if code != ExitFailure || out != "" || !strings.Contains(errOut, "does not exist") || !strings.Contains(errOut, "migrate") {
				t.Errorf("%s: outboxctl %q on an outbox that does not exist: exit %d, stdout %q, stderr %q; want exit 1 saying so", st.b.name, args, code, out, errOut)
			}
			if st.exists() {
				t.Fatalf("%s: outboxctl %q created the outbox", st.b.name, args)
			}
		}
		if code, _, errOut := run(t, st.b, c, "migrate"); code != 0 || !st.exists() {
			t.Errorf("%s: migrate: exit %d (%s), exists %v", st.b.name, code, errOut, st.exists())
		}
		if code, out, errOut := run(t, st.b, c, "tenants"); code != 0 || !strings.Contains(out, "NAMESPACE") {
			t.Errorf("%s: tenants after migrate: exit %d, %q %q", st.b.name, code, out, errOut)
		}
	}
}

// TestControlCharacters (issue 29, item 18): names and error texts with
// control characters (or bytes a terminal acts on) are printed quoted, so
// no escape sequence reaches the terminal; -json stays JSON.
func TestControlCharacters(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			ns := "evil\x1b[31m\u009b\u202e"
			enqueueDead(t, s, ns, "upstream said \x1b]0;owned\x07 and \x1b[2J")
			if err := s.PutNodeReport(t.Context(), outbox.NodeReport{Node: "node\x1b[1A", ShardCount: s.ShardCount(), OwnedShards: 1,
				SettingsError: "bad\x1b[5m", Plan: []outbox.PlanEntry{{Namespace: ns, Quota: 1, Weight: 1, Ceiling: 1, Claimed: 1, Pending: 1, Held: 1, Reason: "at-ceiling\x1b[0m"}}}, time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"tenants"}, {"tenants", "-json"}, {"why", ns}, {"why", "-json", ns}, {"dead", "list"}, {"dead", "list", "-json"},
				{"nodes"}, {"nodes", "-json"}, {"pause", ns}, {"set", "weight", ns, "3"}, {"set", "quota", ns, "-5"}, {"frobnicate\x1b[0m"}, {"tenants", "-after", "x\x1b"}} {
				_, out, errOut := run(t, b, c, args...)
				for _, text := range []string{out, errOut} {
					if strings.ContainsAny(text, "\x1b\x07\u009b\u202e") {
						t.Errorf("outboxctl %q printed a control character raw:\n%q", args, text)
					}
				}
				quoted := `\x1b`
				if slices.Contains(args, "-json") {
					quoted = `\u001b`
					if !json.Valid([]byte(out)) {
						t.Errorf("outboxctl %q: not JSON:\n%s", args, out)
					}
				}
				if !strings.Contains(args[0], "\x1b") && args[len(args)-1] != "x\x1b" && !strings.Contains(out+errOut, quoted) {
					t.Errorf("outboxctl %q does not show the name quoted:\n%s%s", args, out, errOut)
				}
			}
			_, out, _ := run(t, b, c, "why", ns)
			if want := fmt.Sprintf("%q: ", ns); !strings.HasPrefix(out, want) {
				t.Errorf("why's first line: %q, want it to start %q", out, want)
			}
		})
	}
}
