package ctl

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// fillHistory appends a minute of node-1's history for alpha: 10 rows
// started and settled per 2 s point, the backlog falling from 40 by 10 a
// point, the newest point 10 s before now.
func fillHistory(t *testing.T, s admin.Store, c *clock) {
	t.Helper()
	h, ok := s.(outbox.Historian)
	if !ok {
		t.Fatalf("%T keeps no history", s)
	}
	var pts []outbox.HistoryPoint
	for i := range 4 {
		pts = append(pts, outbox.HistoryPoint{Node: "node-1", At: c.Now().Add(time.Duration(i-3)*2*time.Second - 10*time.Second), Interval: 2 * time.Second,
			NamespaceCounters: outbox.NamespaceCounters{Namespace: "alpha", Started: 10, Settled: 10, Backlog: 40 - 10*i, Held: map[string]int{"at-ceiling": 3}}})
	}
	if err := h.AppendHistory(t.Context(), pts); err != nil {
		t.Fatal(err)
	}
}

// TestAdminHistoryPages checks the charts and figures from the history on
// the tenants and tenant pages, their age labels, "≥" on capped counts,
// and the dead letters' payload view, on both stores.
func TestAdminHistoryPages(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			fill(t, s, c)
			fillHistory(t, s, c)
			srv := httptest.NewServer(admin.NewHandler(s, admin.Options{Now: c.Now}))
			defer srv.Close()
			r := newClient(t, srv)
			for _, p := range []struct {
				path string
				code int
				want []string
			}{
				{"/", 200, []string{`<svg id="overview-rates"`, `<svg id="overview-backlog"`, `<polyline`, "newest point 10s old", "<th>started/s</th>", "<td>5.0</td>", `id="ages"`, "live, read from the table now"}},
				{"/tenant?ns=alpha", 200, []string{`<svg id="tenant-rates"`, `<svg id="tenant-held"`, ">at-ceiling</text>", "Started 5.0/s, settled 5.0/s (history, newest point 10s old)", "Time to drain: "}},
				{"/tenant?ns=beta", 200, []string{"no history"}},
				{"/dead", 200, []string{`href="./payload?key=beta-00"`}},
				{"/payload?key=beta-00", 200, []string{`<pre id="payload"`, ">x</pre>", "1 bytes", "smtp: 550 mailbox unavailable"}},
				{"/payload?key=alpha-00", 404, []string{"not a dead letter"}},
				{"/payload", 400, []string{"key is missing"}},
			} {
				code, body := r.do("GET", p.path, nil)
				for _, w := range p.want {
					if code != p.code || !strings.Contains(body, w) {
						t.Errorf("GET %s = %d, want %d with %q:\n%.3000s", p.path, code, p.code, w, body)
						break
					}
				}
			}
		})
	}
}

// TestCommandsPrintRates checks that tenants and why print the rates and
// the drain estimate from the history, with its age, on both stores; and
// nothing of it without history (the golden outputs).
func TestCommandsPrintRates(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := b.open(t, c.Now)
			fill(t, s, c)
			if _, out, _ := run(t, b, c, "why", "alpha"); strings.Contains(out, "history:") {
				t.Errorf("why without history prints rates:\n%s", out)
			}
			fillHistory(t, s, c)
			code, out, errOut := run(t, b, c, "tenants")
			if code != 0 || !strings.Contains(out, "STARTED/S") || !regexpMatch(`alpha\s+5\.0\s+5\.0\s+\S+.*\s+10s ago`, out) {
				t.Errorf("tenants = %d:\n%s%s", code, out, errOut)
			}
			code, out, errOut = run(t, b, c, "why", "alpha")
			if code != 0 || !strings.Contains(out, "history: 5.0 started/s, 5.0 settled/s (newest point 10s old); time to drain: ") {
				t.Errorf("why alpha = %d:\n%s%s", code, out, errOut)
			}
		})
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
