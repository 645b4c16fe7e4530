package ctl

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// TestAdminActionsAudited takes every action the admin pages offer (pause,
// resume, quota, rate, reset, requeue, purge) through the pages, behind an
// Authorize that names the operator from a header, on a SQLite file and on
// PostgreSQL, each as a different operator, and checks that the audit
// page lists every one of them, newest first, with its operator and
// action; and that a refused request (no operator) changed nothing and
// recorded nothing.
func TestAdminActionsAudited(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			fill(t, s, c)
			srv := httptest.NewServer(admin.NewHandler(s, admin.Options{Actions: true, Now: c.Now, Authorize: func(r *http.Request) (string, error) {
				if u := r.Header.Get("X-User"); u != "" {
					return u, nil
				}
				return "", http.ErrNoCookie
			}}))
			defer srv.Close()
			cl := newClient(t, srv)
			before, err := s.Audit(t.Context(), outbox.AuditParams{})
			if err != nil {
				t.Fatal(err)
			}
			gamma := settingsOf(t, s, "gamma")
			if code, _ := cl.do("POST", "/pause", url.Values{"ns": {"gamma"}}, "Origin", srv.URL); code != http.StatusUnauthorized {
				t.Errorf("a pause without an operator: %d, want 401", code)
			}
			if got := settingsOf(t, s, "gamma"); got != gamma {
				t.Errorf("gamma's settings after a refused pause: %s, want %s", got, gamma)
			}
			code, body := cl.do("GET", "/tenant?ns=gamma", nil, "X-User", "ann")
			m := csrfField.FindStringSubmatch(body)
			if code != 200 || m == nil {
				t.Fatalf("GET /tenant as ann: %d, no CSRF token", code)
			}
			actions := []struct {
				who, path, action string
				form              url.Values
			}{
				{"ann", "/pause", "pause", url.Values{"ns": {"gamma"}}},
				{"bob", "/resume", "resume", url.Values{"ns": {"gamma"}}},
				{"cho", "/quota", "set", url.Values{"ns": {"gamma"}, "quota": {"7"}}},
				{"dev", "/rate", "set", url.Values{"ns": {"gamma"}, "rate": {"20/s"}, "burst": {"10"}}},
				{"eve", "/reset", "reset", url.Values{"ns": {"gamma"}}},
				{"fay", "/dead/requeue", "requeue", url.Values{"key": {"beta-00"}}},
				{"gus", "/dead/purge", "purge", url.Values{"key": {"beta-01"}}},
			}
			for _, a := range actions {
				a.form.Set("csrf", m[1])
				if code, body := cl.do("POST", a.path, a.form, "X-User", a.who, "Origin", srv.URL); code != http.StatusSeeOther {
					t.Fatalf("POST %s as %s: %d %s", a.path, a.who, code, body)
				}
			}
			code, page := cl.do("GET", "/audit", nil, "X-User", "ann")
			if code != 200 {
				t.Fatalf("GET /audit: %d", code)
			}
			row := regexp.MustCompile(`<td class="l operator">(.*?)</td><td class="l action">([^<]*)</td>`)
			got := row.FindAllStringSubmatch(page, -1)
			if len(got) != len(before)+len(actions) {
				t.Fatalf("the audit page lists %d entries, want %d before and %d actions:\n%s", len(got), len(before), len(actions), page)
			}
			for i, a := range actions {
				g := got[len(actions)-1-i] // newest first
				if g[1] != a.who || g[2] != a.action {
					t.Errorf("the audit page's entry of %s %s: operator %q, action %q", a.who, a.path, g[1], g[2])
				}
			}
			if strings.Count(page, "gamma") < 5 {
				t.Errorf("the audit page does not name gamma in its settings entries:\n%s", page)
			}
		})
	}
}
