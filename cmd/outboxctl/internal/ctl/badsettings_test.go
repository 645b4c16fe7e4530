package ctl

import (
	"database/sql"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// rawWriter writes rows into b's store by SQL, past the store's checks, as
// an operator's manual fix or a bad migration would.
type rawWriter struct {
	t *testing.T
	b backend
}

// exec runs one statement on b's database; {schema} names the schema.
func (w rawWriter) exec(sqlite, postgres string, args ...any) {
	w.t.Helper()
	switch w.b.flags[0] {
	case "-sqlite":
		db, err := sql.Open("sqlite", "file:"+w.b.flags[1]+"?_pragma=busy_timeout(10000)")
		if err != nil {
			w.t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(w.t.Context(), sqlite, args...); err != nil {
			w.t.Fatalf("raw SQL: %v", err)
		}
	default:
		conn, err := pgx.Connect(w.t.Context(), w.b.flags[1])
		if err != nil {
			w.t.Fatal(err)
		}
		defer conn.Close(w.t.Context())
		if _, err := conn.Exec(w.t.Context(), strings.ReplaceAll(postgres, "{schema}", w.b.flags[3]), args...); err != nil {
			w.t.Fatalf("raw SQL: %v", err)
		}
	}
}

// settings writes settings rows with bodies verbatim.
func (w rawWriter) settings(bodies map[string]string) {
	w.t.Helper()
	arg, _ := json.Marshal(bodies)
	w.exec(`INSERT INTO namespace_settings (namespace, body, version, updated_at)
SELECT key, value, (SELECT value FROM outbox_meta WHERE key = 'settings_version'), 0 FROM json_each(?1) WHERE true
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body`,
		`INSERT INTO {schema}.namespace_settings (namespace, body, version, updated_at)
SELECT e.key, e.value::jsonb, (SELECT version FROM {schema}.settings_clock), now() FROM jsonb_each_text($1::jsonb) e
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body`, string(arg))
}

// report writes node's report row with body verbatim, live for an hour.
func (w rawWriter) report(node, body string, now time.Time) {
	w.t.Helper()
	w.exec(`INSERT INTO node_reports (node, body, reported_at, expires_at) VALUES (?1, ?2, ?3, ?4)`,
		`INSERT INTO {schema}.node_reports (node, body, reported_at, expires_at) VALUES ($1, $2::jsonb, $3, $4)`,
		node, body, now.UnixNano(), now.Add(time.Hour).UnixNano())
}

// badRows writes the fixture plus settings rows and a node report only SQL
// can write, and a node's report of the bad settings it holds.
func badRows(t *testing.T, b backend, c *clock) admin.Store {
	s := b.open(t, c.Now)
	fill(t, s, c)
	w := rawWriter{t, b}
	w.settings(map[string]string{"xneg": `{"quota": -5}`, "xnull": `null`, "xarr": `[1, 2]`})
	if b.flags[0] == "-sqlite" {
		w.report("node-bad", `[1, 2]`, c.Now())
	} else {
		w.exec("", `INSERT INTO {schema}.node_reports (node, body, reported_at, expires_at) VALUES ($1, $2::jsonb, now(), now() + interval '1 hour')`, "node-bad", `[1, 2]`)
	}
	rep := outbox.NodeReport{Node: "node-2", Workers: 1, SettingsVersion: 3, SettingsError: "settings of 1 namespaces not applied",
		BadSettings: []outbox.SettingsFault{{Namespace: "xneg", Version: 3, Reason: "Quotas = -5", Held: true}}}
	if err := s.PutNodeReport(t.Context(), rep, time.Hour); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBadSettingsRows checks outboxctl on a store holding settings rows and
// a node report only SQL can write: every command keeps working, lists the
// bad rows as bad with their fault (dead list and audit of a bad namespace
// too), and set, pause, resume and reset
// overwrite them; a quota of -5 is refused on a paused namespace too.
func TestBadSettingsRows(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			badRows(t, b, c)
			expect := func(code int, want []string, args ...string) {
				t.Helper()
				got, out, errOut := run(t, b, c, args...)
				if got != code {
					t.Errorf("outboxctl %s: exit %d, want %d; stderr: %s", strings.Join(args, " "), got, code, errOut)
				}
				for _, w := range want {
					if !strings.Contains(out+errOut, w) {
						t.Errorf("outboxctl %s: output lacks %q:\n%s%s", strings.Join(args, " "), w, out, errOut)
					}
				}
			}
			expect(0, []string{"xneg", "BAD", "xnull", "xarr"}, "tenants")
			expect(0, []string{`"Fault"`}, "tenants", "-json")
			expect(0, []string{"BAD", "Quotas", "node-2"}, "why", "xneg")
			expect(0, []string{"node-bad", "UNREADABLE", "xneg"}, "nodes")
			expect(0, []string{"BAD", "xneg", "node-2: Quotas = -5 (held)"}, "dead", "list", "-namespace", "xneg")
			expect(0, []string{"BAD", "xnull", "settings row"}, "audit", "-namespace", "xnull")
			for _, args := range [][]string{{"dead", "list", "-namespace", "delta"}, {"audit", "-namespace", "delta"}, {"dead", "list"}} {
				if _, out, _ := run(t, b, c, args...); strings.Contains(out, "BAD") {
					t.Errorf("outboxctl %s shows a settings fault:\n%s", strings.Join(args, " "), out)
				}
			}
			expect(2, []string{"Quotas"}, "set", "quota", "delta", "-5") // delta is paused
			expect(0, []string{"paused"}, "why", "delta")
			expect(0, []string{"xnull: paused"}, "pause", "xnull")
			expect(0, []string{"xneg: quota=3"}, "set", "quota", "xneg", "3")
			expect(0, []string{"xarr: -"}, "resume", "xarr")
			expect(0, []string{"delta: - "}, "reset", "delta")
			expect(0, []string{"usage: outboxctl reset"}, "reset", "-h")
			expect(2, []string{"reset takes NAMESPACE"}, "reset")
			got, out, _ := run(t, b, c, "tenants")
			if got != 0 || strings.Contains(out, "settings row") { // node-2's report of xneg stands until it reports again
				t.Errorf("tenants after the bad rows were overwritten: exit %d\n%s", got, out)
			}
		})
	}
}

// TestBadSettingsAdmin checks the admin pages on the same store: the
// tenants, tenant and nodes pages, and a bad namespace's dead letters and
// audit trail, answer 200 and show the bad rows as bad (and a good
// namespace's pages no fault),
// and the tenant page's Reset overwrites a bad row.
func TestBadSettingsAdmin(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			s := badRows(t, b, c)
			srv := httptest.NewServer(admin.NewHandler(s, admin.Options{Actions: true, Now: c.Now}))
			defer srv.Close()
			cl := newClient(t, srv)
			for _, p := range []struct{ path, want string }{
				{"/", "xneg"}, {"/", `class="err"`}, {"/tenant?ns=xnull", "cannot be applied"}, {"/tenant?ns=xneg", "node-2"},
				{"/tenant?ns=xnull", `id="reset"`}, {"/nodes", "node-bad"}, {"/nodes", "cannot be read"},
				{"/dead?ns=xnull", `id="faults"`}, {"/dead?ns=xneg", "node-2: Quotas = -5 (held)"},
				{"/audit?ns=xarr", `id="faults"`}, {"/audit?ns=xneg", "node-2: Quotas = -5 (held)"},
			} {
				if code, body := cl.do("GET", p.path, nil); code != 200 || !strings.Contains(body, p.want) {
					t.Errorf("GET %s = %d, want 200 with %q:\n%.600s", p.path, code, p.want, body)
				}
			}
			for _, path := range []string{"/dead?ns=delta", "/audit?ns=delta", "/dead", "/audit"} {
				if code, body := cl.do("GET", path, nil); code != 200 || strings.Contains(body, `id="faults"`) {
					t.Errorf("GET %s = %d, want 200 without a settings fault:\n%.600s", path, code, body)
				}
			}
			tok := cl.token("/tenant?ns=xnull")
			if code, body := cl.do("POST", "/reset", url.Values{"csrf": {tok}, "ns": {"xnull"}, "back": {"./tenant?ns=xnull"}}); code != 303 {
				t.Errorf("POST /reset = %d: %s", code, body)
			}
			if code, body := cl.do("POST", "/quota", url.Values{"csrf": {tok}, "ns": {"delta"}, "quota": {"-5"}}); code != 400 {
				t.Errorf("POST /quota -5 on paused delta = %d, want 400: %s", code, body)
			}
			list, err := s.ListSettings(t.Context())
			for _, set := range list {
				if set.Namespace == "xnull" && (set.Fault != "" || !set.Empty()) || set.Namespace == "delta" && (!set.Paused || set.Quota != nil) {
					t.Errorf("after reset and a refused quota: %+v, %v", set, err)
				}
			}
		})
	}
}
