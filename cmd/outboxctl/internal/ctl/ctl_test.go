package ctl

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/sqlitestore"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// clock is a manual clock, shared by the fixture's store and outboxctl.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// backend is one store kind the tests run against, with the global flags
// that name it.
type backend struct {
	name  string
	flags []string
	open  func(t *testing.T, now func() time.Time) admin.Store
}

func databaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// backends returns a fresh SQLite file and a fresh PostgreSQL schema
// (skipped, or failed with PGSTORE_REQUIRE=1, when PostgreSQL is not
// reachable).
func backends(t *testing.T) []backend {
	path := filepath.Join(t.TempDir(), "outbox.db")
	bs := []backend{{name: "sqlite", flags: []string{"-sqlite", path}, open: func(t *testing.T, now func() time.Time) admin.Store {
		s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{Now: now, ShardCount: 16, Lease: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL())
	if err != nil {
		if os.Getenv("PGSTORE_REQUIRE") == "1" {
			t.Fatalf("PostgreSQL not reachable at %s: %v", databaseURL(), err)
		}
		t.Logf("PostgreSQL not reachable (%v): the PostgreSQL half is skipped", err)
		return bs
	}
	conn.Close(ctx)
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "outboxctl_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, databaseURL()); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(ctx)
		}
	})
	return append(bs, backend{name: "postgres", flags: []string{"-dsn", databaseURL(), "-schema", schema}, open: func(t *testing.T, now func() time.Time) admin.Store {
		s, err := pgstore.Open(t.Context(), databaseURL(), pgstore.Options{Schema: schema, Now: now, ShardCount: 16, Lease: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}})
}

// fill writes the fixture: three namespaces in every state, shared
// settings, and two nodes' reports.
func fill(t *testing.T, s admin.Store, c *clock) {
	t.Helper()
	ctx := t.Context()
	var ms []outbox.Message
	for i := range 10 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("alpha-%02d", i), Namespace: "alpha", TaskQueue: "email", Payload: []byte("x")})
	}
	for i := range 5 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("beta-%02d", i), Namespace: "beta", TaskQueue: "sms", Payload: []byte("x")})
	}
	for i := range 3 {
		ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("gamma-%02d", i), Namespace: "gamma", TaskQueue: "push", Payload: []byte("x"),
			RunAt: c.Now().Add(time.Hour)})
	}
	if _, err := s.Enqueue(ctx, ms); err != nil {
		t.Fatal(err)
	}
	c.Add(90 * time.Second)
	all, _ := backpressure.AllShards(s.ShardCount())
	rows, err := s.Claimer().ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{
		{Route: backpressure.Route{Namespace: "alpha", TaskQueue: "email"}, Limit: 2},
		{Route: backpressure.Route{Namespace: "beta", TaskQueue: "sms"}, Limit: 4},
	})
	if err != nil || len(rows) != 6 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	var cs []outbox.Completion
	for _, r := range rows {
		switch r.DispatchKey {
		case "beta-00", "beta-01":
			cs = append(cs, outbox.DeadLetterRow(r, errors.New("smtp: 550 mailbox unavailable")))
		case "beta-02":
			cs = append(cs, outbox.SettleRow(r))
		}
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	two := 2
	if _, err := s.PutSettings(ctx, outbox.NamespaceSettings{Namespace: "beta", Weight: &two}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutSettings(ctx, outbox.NamespaceSettings{Namespace: "delta", Paused: true}); err != nil {
		t.Fatal(err)
	}
	c.Add(30 * time.Second)
	for i, owned := range []int{10, 6} {
		rep := outbox.NodeReport{Node: fmt.Sprintf("node-%d", i), OwnedShards: owned, ShardCount: 16, Workers: 4, Busy: 2, SweepsPerSecond: 2, RowsPerSecond: 3.5,
			SettingsVersion: 2, Plan: []outbox.PlanEntry{
				{Namespace: "alpha", Quota: 2, Weight: 1, Ceiling: 1 + i%2, Claimed: 1, Pending: 8 / (i + 1), Held: 8 / (i + 1), Reason: "at-ceiling"},
				{Namespace: "beta", Quota: backpressure.Unlimited, Weight: 2, Ceiling: backpressure.Unlimited, Claimed: 1, Pending: 1, Granted: 1},
			}}
		if err := s.PutNodeReport(ctx, rep, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	c.Add(5 * time.Second)
}

var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)

// golden compares got with testdata/name, times masked.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = timestamp.ReplaceAllString(got, "<TIME>")
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// run runs outboxctl with the backend's flags and args.
func run(t *testing.T, b backend, c *clock, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Config{Stdout: &out, Stderr: &errb, Now: c.Now}.Run(t.Context(), append(append(append([]string{}, b.flags...), "-as", "tester"), args...))
	return code, out.String(), errb.String()
}

// TestCommands runs every command end to end against a real SQLite file
// and a real PostgreSQL schema holding the same fixture: the output of
// each must equal its golden file (one file for both stores: they must
// agree), with times masked.
func TestCommands(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			fill(t, b.open(t, c.Now), c)
			step := 0
			expect := func(wantCode int, args ...string) string {
				t.Helper()
				step++
				code, out, errOut := run(t, b, c, args...)
				if code != wantCode {
					t.Fatalf("outboxctl %s: exit %d, want %d; stderr:\n%s", strings.Join(args, " "), code, wantCode, errOut)
				}
				golden(t, fmt.Sprintf("%02d-%s.txt", step, strings.ReplaceAll(strings.Join(args, "_"), "/", "-")), out)
				return out
			}
			expect(0, "tenants")
			expect(0, "tenants", "-json")
			expect(0, "tenants", "-limit", "1")
			expect(0, "why", "alpha")
			expect(0, "why", "-json", "beta")
			expect(0, "why", "delta")
			expect(0, "dead", "list")
			expect(0, "dead", "list", "-json", "-namespace", "beta", "-limit", "1")
			expect(0, "stats")
			expect(0, "stats", "-json")
			expect(0, "nodes")
			expect(0, "nodes", "-json")
			expect(0, "dead", "requeue", "-dry-run", "-namespace", "beta")
			expect(0, "dead", "requeue", "beta-00")
			expect(0, "dead", "list")
			expect(0, "dead", "purge", "-all")
			expect(0, "pause", "alpha")
			expect(0, "set", "quota", "alpha", "5")
			expect(0, "set", "weight", "beta", "default")
			expect(0, "set", "quota", "gamma", "unlimited")
			expect(0, "resume", "delta")
			expect(0, "tenants")
			expect(0, "stats")
			expect(0, "migrate")
			expect(0, "set", "rate", "alpha", "20/s", "burst", "10")
			expect(0, "set", "rate", "beta", "300/m")
			expect(0, "set", "rate", "gamma", "none")
			expect(0, "why", "alpha")
			expect(0, "audit", "-limit", "10")
			expect(0, "audit", "-namespace", "alpha")
		})
	}
}

// TestUsage checks exit statuses and help: 2 for bad usage, 1 for a
// failure, 0 and a usage line on stderr for -h of every command.
func TestUsage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "outbox.db")
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b := backend{flags: []string{"-sqlite", file}}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{nil, ExitUsage, "no command"},
		{[]string{"frobnicate"}, ExitUsage, `unknown command "frobnicate"`},
		{[]string{"why"}, ExitUsage, "why takes [-json] NAMESPACE"},
		{[]string{"dead"}, ExitUsage, "dead needs a subcommand"},
		{[]string{"dead", "bury"}, ExitUsage, `unknown command "dead bury"`},
		{[]string{"dead", "requeue"}, ExitUsage, "exactly one"},
		{[]string{"dead", "requeue", "-all", "-namespace", "x"}, ExitUsage, "exactly one"},
		{[]string{"tenants", "-bogus"}, ExitUsage, "flag provided but not defined"},
		{[]string{"tenants", "-limit", "0"}, ExitUsage, "outside 1 to 1000"},
		{[]string{"set", "quota", "a", "lots"}, ExitUsage, `"lots" is not a number`},
		{[]string{"set", "weight", "a", "0"}, ExitUsage, "Weights"},
		{[]string{"set", "quota", "a", "-5"}, ExitUsage, "Quotas"},
		{[]string{"pause", "a\x00b"}, ExitUsage, "NUL"},
		{[]string{"stats", "extra"}, ExitUsage, "stats takes"},
	} {
		code, _, errOut := run(t, b, c, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.err) {
			t.Errorf("outboxctl %q: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.err)
		}
	}
	var out, errb bytes.Buffer
	if code := (Config{Stdout: &out, Stderr: &errb}).Run(t.Context(), []string{"tenants"}); code != ExitUsage || !strings.Contains(errb.String(), "no store") {
		t.Errorf("outboxctl tenants without a store: exit %d, %q", code, errb.String())
	}
	if code, _, errOut := run(t, backend{flags: []string{"-sqlite", filepath.Join(dir, "no", "such", "dir.db")}}, c, "stats"); code != ExitFailure {
		t.Errorf("outboxctl stats on a file that cannot be opened: exit %d, want 1; %s", code, errOut)
	}
	for _, cmd := range []string{"tenants", "why", "dead list", "dead requeue", "dead purge", "pause", "resume", "set quota", "set weight", "set rate", "set adaptive", "stats", "nodes", "migrate", "audit", "serve"} {
		code, _, errOut := run(t, b, c, append(strings.Fields(cmd), "-h")...)
		if code != ExitOK || !strings.Contains(errOut, "usage: outboxctl "+cmd) {
			t.Errorf("outboxctl %s -h: exit %d, stderr %q", cmd, code, errOut)
		}
	}
	if code, _, errOut := run(t, b, c, "-h"); code != ExitOK || !strings.Contains(errOut, "Commands:") {
		t.Errorf("outboxctl -h: exit %d, stderr %q", code, errOut)
	}
	untouched := filepath.Join(dir, "untouched.db")
	if code, out, _ := run(t, backend{flags: []string{"-sqlite", untouched}}, c, "migrate", "-print"); code != ExitOK || !strings.HasPrefix(out, "-- sqlitestore schema") {
		t.Errorf("outboxctl -sqlite F migrate -print: exit %d, %.60q", code, out)
	}
	if _, err := os.Stat(untouched); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("migrate -print touched its file: %v", err)
	}
	if code, out, _ := run(t, backend{flags: []string{"-dsn", "postgres://nowhere.invalid/x", "-schema", "ops"}}, c, "migrate", "-print"); code != ExitOK ||
		!strings.Contains(out, `CREATE TABLE "ops".outbox`) {
		t.Errorf("outboxctl -dsn URL -schema ops migrate -print: exit %d, %.200q", code, out)
	}
}
