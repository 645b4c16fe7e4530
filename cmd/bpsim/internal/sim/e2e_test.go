package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// smallScenario is a noisy neighbour small enough for a test: a bursty
// tenant with a backlog over 4 queues and two quiet tenants with a
// trickle. 60 shards over 3 nodes divide every quota exactly (12 → 4 per
// node, 6 → 2), so the per-node ceilings add up to the quota itself and
// backpressure must keep every tenant at or under its quota cluster-wide.
// The cluster runs 30 rows at once, well over the bursty tenant's quota.
func smallScenario() Scenario {
	return Scenario{
		Nodes:          3,
		ShardCount:     60,
		BatchSize:      5,
		WorkersPerNode: 10,
		Tick:           100 * time.Millisecond,
		Duration:       4 * time.Second,
		Lease:          time.Minute,
		ServiceTime:    ServiceTime{Min: 200 * time.Millisecond, Max: 600 * time.Millisecond},
		Tenants: []Tenant{
			{Name: "bursty", Quota: 12, Queues: 4, Arrivals: []Arrival{{Pattern: PatternBurst, Rows: 150}}},
			{Name: "quiet-1", Quota: 6, Queues: 1, Arrivals: []Arrival{{Pattern: PatternSteady, PerSecond: 2}}},
			{Name: "quiet-2", Quota: 6, Queues: 1, Arrivals: []Arrival{{Pattern: PatternSteady, PerSecond: 2}}},
		},
	}
}

// TestRunSQLite runs the small scenario end to end on SQLite, under all
// three policies, and checks what the simulation is for.
func TestRunSQLite(t *testing.T) {
	t.Parallel() // simulated time, its own files or schemas: independent of every other test
	checkRun(t, Config{Scenario: smallScenario(), Seed: 1, TempDir: t.TempDir(), OutDir: filepath.Join(t.TempDir(), "out")})
}

// TestRunPostgres runs the same on PostgreSQL, when one is reachable,
// without the files (TestRunSQLite checks those).
func TestRunPostgres(t *testing.T) {
	t.Parallel() // simulated time, its own files or schemas: independent of every other test
	dsn := testDatabaseURL(t)
	checkRun(t, Config{Scenario: smallScenario(), Seed: 1, DSN: dsn})
}

func checkRun(t *testing.T, cfg Config) *Report {
	t.Helper()
	var stdout, progress bytes.Buffer
	cfg.Progress = &progress
	rep, err := Run(context.Background(), cfg, &stdout)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stdout.String())
	}
	if testing.Verbose() {
		t.Log("\n" + stdout.String())
	}
	if len(rep.Policies) != 3 {
		t.Fatalf("report has %d policies, want 3", len(rep.Policies))
	}
	for _, p := range rep.Policies {
		// Exactly-once, read back from the database, under every policy.
		if !p.Audit.OK() || p.Audit.Keys != rep.Rows || p.Audit.SettledOnce != rep.Rows || p.Audit.Redelivered != rep.Rows {
			t.Errorf("%s: audit %+v, want all %d keys settled once and redelivery ignored", p.Policy, p.Audit, rep.Rows)
		}
		if p.Settled != rep.Rows {
			t.Errorf("%s: settled %d rows, want %d", p.Policy, p.Settled, rep.Rows)
		}
		claimed := 0
		for _, tn := range p.Tenants {
			claimed += tn.Claimed
			if tn.Claimed != tn.Rows {
				t.Errorf("%s: %s claimed %d of its %d rows", p.Policy, tn.Name, tn.Claimed, tn.Rows)
			}
		}
		if claimed != rep.Rows {
			t.Errorf("%s: %d claims, want one per row (%d)", p.Policy, claimed, rep.Rows)
		}
	}

	un, rr, bp := rep.Policy(Unscoped), rep.Policy(RoundRobin), rep.Policy(Backpressure)
	for i, tn := range bp.Tenants {
		// Backpressure: no tenant ever holds more claimed rows than its quota.
		if tn.PeakInflight > tn.Quota {
			t.Errorf("backpressure: %s peaked at %d claimed rows, over its quota %d", tn.Name, tn.PeakInflight, tn.Quota)
		}
		if tn.ClusterCeiling != tn.Quota {
			t.Errorf("backpressure: %s cluster ceiling %d, want the quota %d (60 shards over 3 nodes divide it)", tn.Name, tn.ClusterCeiling, tn.Quota)
		}
		if i == 0 {
			// The bursty tenant has the backlog: it sat at its ceiling.
			if tn.PeakInflight != tn.Quota || tn.HeldAtCeiling == 0 {
				t.Errorf("backpressure: bursty peak %d, held at ceiling %d: want it held at its quota %d", tn.PeakInflight, tn.HeldAtCeiling, tn.Quota)
			}
			continue
		}
		// The quiet tenants' p99 wait is far below what unscoped gives them.
		u := un.Tenants[i]
		if u.WaitP99 < time.Second || tn.WaitP99*4 > u.WaitP99 {
			t.Errorf("%s p99 wait: backpressure %v, unscoped %v: want unscoped ≥ 1s and backpressure ≤ a quarter of it", tn.Name, tn.WaitP99, u.WaitP99)
		}
	}
	// Without quotas the bursty tenant runs far over its quota.
	if b := un.Tenants[0]; b.PeakInflight <= b.Quota {
		t.Errorf("unscoped: bursty peaked at %d, want over its quota %d (the noisy neighbour)", b.PeakInflight, b.Quota)
	}
	if b := rr.Tenants[0]; b.PeakInflight <= b.Quota {
		t.Errorf("round-robin: bursty peaked at %d, want over its quota %d (fair per queue, not per tenant)", b.PeakInflight, b.Quota)
	}
	if !(bp.Fairness > rr.Fairness && rr.Fairness > un.Fairness) {
		t.Errorf("Jain's fairness: unscoped %.3f, round-robin %.3f, backpressure %.3f: want increasing", un.Fairness, rr.Fairness, bp.Fairness)
	}
	for _, p := range rep.Policies {
		if n := len(p.Timeline.Inflight); n != len(rep.Scenario.Tenants) {
			t.Fatalf("%s: timeline has %d tenants", p.Policy, n)
		}
		if got := len(p.Timeline.Inflight[0]); got != p.Ticks || p.Timeline.Tick != rep.Scenario.Tick {
			t.Errorf("%s: timeline has %d samples of %v, want one per tick (%d of %v)", p.Policy, got, p.Timeline.Tick, p.Ticks, rep.Scenario.Tick)
		}
	}

	// The tables, the verdict and the files.
	out := stdout.String()
	for _, want := range []string{"== unscoped", "== round-robin", "== backpressure", "quiet-2", "Jain's fairness", "exactly-once: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if cfg.OutDir != "" {
		checkOutDir(t, cfg.OutDir, rep)
	}
	if got := strings.Count(progress.String(), "\n"); got != 6 {
		t.Errorf("non-terminal progress wrote %d lines, want a start and a done line per policy:\n%s", got, progress.String())
	}
	return rep
}

func checkOutDir(t *testing.T, dir string, rep *Report) {
	t.Helper()
	want := []string{ReportFile, ChartFile, PolicyChartFile(Unscoped), PolicyChartFile(RoundRobin), PolicyChartFile(Backpressure)}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v, want exactly %v (no staging left behind)", dir, names, want)
	}
	for i, name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if i < len(rep.Files) && rep.Files[i] != filepath.Join(dir, name) {
			t.Errorf("report.Files[%d] = %q, want %q", i, rep.Files[i], filepath.Join(dir, name))
		}
		if strings.HasSuffix(name, ".png") && !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", name)
		}
	}
	var j struct {
		Scenario json.RawMessage `json:"scenario"`
		Rows     int             `json:"rows"`
		Policies []struct {
			Policy      string           `json:"policy"`
			Database    *string          `json:"database"`
			ExactlyOnce bool             `json:"exactlyOnce"`
			Tenants     []map[string]any `json:"tenants"`
			Timeline    map[string][]int `json:"inflightTimeline"`
		} `json:"policies"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	if _, err := ParseScenario(j.Scenario); err != nil {
		t.Errorf("report.json's scenario does not parse back: %v", err)
	}
	if j.Rows != rep.Rows || len(j.Policies) != 3 {
		t.Errorf("report.json: rows %d, %d policies", j.Rows, len(j.Policies))
	}
	for _, p := range j.Policies {
		if p.Database != nil && rep.Database == "sqlite" {
			t.Errorf("report.json policy %s names its database %q, a temporary file removed after the run", p.Policy, *p.Database)
		}
		if !p.ExactlyOnce || len(p.Tenants) != 3 || len(p.Timeline["bursty"]) == 0 {
			t.Errorf("report.json policy %s: exactlyOnce %v, %d tenants, %d samples", p.Policy, p.ExactlyOnce, len(p.Tenants), len(p.Timeline["bursty"]))
		}
		for _, k := range []string{"waitP99Ms", "peakInflight", "heldAtCeiling", "clusterCeiling"} {
			if _, ok := p.Tenants[0][k]; !ok {
				t.Errorf("report.json policy %s tenant lacks %q", p.Policy, k)
			}
		}
	}
}

// TestRunIsReproducible runs the same scenario and seed twice: the figures
// are the same, because time is simulated and the workload drawn from the
// seed.
func TestRunIsReproducible(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s := smallScenario()
	s.Duration = 2 * time.Second
	s.Tenants[0].Arrivals[0].Rows = 40
	cfg := Config{Scenario: s, Seed: 3, TempDir: t.TempDir(), Policies: []Policy{Backpressure}}
	var a, b bytes.Buffer
	ra, err := Run(context.Background(), cfg, &a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Run(context.Background(), cfg, &b)
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("two runs differ:\n%s\n---\n%s", a.String(), b.String())
	}
	ja, _ := json.Marshal(ra.Policies[0].Timeline.Inflight)
	jb, _ := json.Marshal(rb.Policies[0].Timeline.Inflight)
	if !bytes.Equal(ja, jb) {
		t.Error("two runs drew different timelines")
	}
}

func TestRunRejectsBadScenario(t *testing.T) {
	s := smallScenario()
	s.Tenants[1].Quota = -2
	dir := filepath.Join(t.TempDir(), "out")
	_, err := Run(context.Background(), Config{Scenario: s, OutDir: dir}, &bytes.Buffer{})
	var se *ScenarioError
	if !errors.As(err, &se) || se.Field != "tenants[1].quota" {
		t.Fatalf("Run(quota -2) = %v, want a ScenarioError for tenants[1].quota", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rejected run created %s", dir)
	}
}

// TestRunCancelled checks that a cancelled run stops with ctx's error,
// writes no output and removes its temporary database.
func TestRunCancelled(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Scenario: smallScenario(), TempDir: tmp, OutDir: dir}, &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled run created %s", dir)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("a cancelled run left %d entries in its temporary directory", len(left))
	}
}

// TestRunNamesTheDatabase checks that a database error says which database.
func TestRunNamesTheDatabase(t *testing.T) {
	_, err := Run(context.Background(), Config{Scenario: smallScenario(), DSN: "postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=2"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "postgres database 127.0.0.1:1/nowhere") {
		t.Errorf("Run(unreachable postgres) = %v, want an error naming the database", err)
	}
	_, err = Run(context.Background(), Config{Scenario: smallScenario(), TempDir: filepath.Join(t.TempDir(), "missing")}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "sqlite database") {
		t.Errorf("Run(sqlite in a missing directory) = %v, want an error naming the sqlite database", err)
	}
}

// testDatabaseURL returns the PostgreSQL URL for tests: TEST_DATABASE_URL,
// else a local default. It skips the test when that database does not
// answer, or fails it when PGSTORE_REQUIRE=1.
func testDatabaseURL(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(ctx)
	}
	if err != nil {
		if os.Getenv("PGSTORE_REQUIRE") == "1" {
			t.Fatalf("PostgreSQL required (PGSTORE_REQUIRE=1) but not reachable: %v", err)
		}
		t.Skipf("no PostgreSQL at TEST_DATABASE_URL or the local default: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	return dsn
}

// TestRunSQLite64Shards runs the small scenario over 64 shards, which do
// not divide its quotas: each of the 3 nodes rounds its ceiling up, so a
// tenant's cluster-wide cap is the sum of the per-node ceilings, between
// the quota and quota + nodes − 1 (quota 12 → 5 + 4 + 4 = 13). Under
// backpressure no tenant's cluster-wide peak exceeds that sum.
func TestRunSQLite64Shards(t *testing.T) {
	t.Parallel() // simulated time, its own files: independent of every other test
	s := smallScenario()
	s.ShardCount = 64
	rep, err := Run(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir(), Policies: []Policy{Backpressure}}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	bp := rep.Policy(Backpressure)
	for _, tn := range bp.Tenants {
		if tn.ClusterCeiling < tn.Quota || tn.ClusterCeiling > tn.Quota+s.Nodes-1 {
			t.Errorf("%s: cluster ceiling %d, want within [quota %d, quota + nodes − 1 = %d]", tn.Name, tn.ClusterCeiling, tn.Quota, tn.Quota+s.Nodes-1)
		}
		if tn.PeakInflight > tn.ClusterCeiling {
			t.Errorf("backpressure: %s peaked at %d claimed rows, over the sum of its per-node ceilings %d", tn.Name, tn.PeakInflight, tn.ClusterCeiling)
		}
	}
	if b := bp.Tenants[0]; b.ClusterCeiling != 13 || b.HeldAtCeiling == 0 {
		t.Errorf("bursty: cluster ceiling %d, held at ceiling %d: want 13 (5 + 4 + 4), and held there", b.ClusterCeiling, b.HeldAtCeiling)
	}
}

// TestAuditCanFail runs a scenario whose lease is shorter than some service
// times, which Validate forbids, through the runner behind Run: rows are
// claimed again while their first worker still runs them, the stale
// settles are refused, and the exactly-once verdict must say FAILED with
// rows run twice. It is the proof that the check can fail.
func TestAuditCanFail(t *testing.T) {
	s := Scenario{
		Nodes: 2, ShardCount: 8, BatchSize: 4, WorkersPerNode: 8,
		Tick: 100 * time.Millisecond, Duration: time.Second,
		Lease:       350 * time.Millisecond,                                                // 3.5 ticks
		ServiceTime: ServiceTime{Min: 200 * time.Millisecond, Max: 600 * time.Millisecond}, // 2..6 ticks
		Tenants: []Tenant{
			{Name: "a", Quota: 4, Queues: 2, Arrivals: []Arrival{{Pattern: PatternBurst, Rows: 20}}},
			{Name: "b", Quota: 2, Queues: 1, Arrivals: []Arrival{{Pattern: PatternSteady, PerSecond: 4}}},
		},
	}
	if err := s.Validate(); err == nil {
		t.Fatal("Validate accepted a lease shorter than the service time; the test needs one it rejects")
	}
	var stdout bytes.Buffer
	rep, err := runValidated(context.Background(), Config{Scenario: s, Seed: 1, TempDir: t.TempDir(), Policies: []Policy{Unscoped}}, &stdout)
	if testing.Verbose() {
		t.Log("\n" + stdout.String())
	}
	if !errors.Is(err, ErrExactlyOnce) || rep == nil {
		t.Fatalf("run = %v, want ErrExactlyOnce with the report\n%s", err, stdout.String())
	}
	p := rep.Policies[0]
	a := p.Audit
	if a.OK() || a.RunTwice == 0 || a.ClaimedAgain == 0 || a.LeaseLost == 0 {
		t.Errorf("audit %+v: want FAILED with rows run twice, claimed again and settles refused", a)
	}
	// Only settles the store accepted count, and each key once.
	if p.Settled > rep.Rows || p.Settled != a.Keys-a.Lost-a.Unsettled {
		t.Errorf("settled %d of %d rows; the database holds %d settled", p.Settled, rep.Rows, a.Keys-a.Lost-a.Unsettled)
	}
	// Rows whose every claim outlives the lease never settle: the run gives
	// up on them rather than going round for ever.
	if !p.GaveUp || a.Unsettled == 0 {
		t.Errorf("gave up %v with %d rows unsettled: want the run given up with rows left", p.GaveUp, a.Unsettled)
	}
	out := stdout.String()
	if !strings.Contains(out, "exactly-once: FAILED") || strings.Contains(out, " 0 run twice") || !strings.Contains(out, "gave up after") {
		t.Errorf("output does not report the failure:\n%s", out)
	}
}

// TestRunRejectsNoRows checks that a scenario whose arrivals draw no rows
// is a scenario error, not an empty report.
func TestRunRejectsNoRows(t *testing.T) {
	s := smallScenario()
	s.Tenants = []Tenant{{Name: "rare", Quota: 1, Queues: 1, Arrivals: []Arrival{{Pattern: PatternSteady, PerSecond: 1e-9}}}}
	_, err := Run(context.Background(), Config{Scenario: s, TempDir: t.TempDir()}, &bytes.Buffer{})
	var se *ScenarioError
	if !errors.As(err, &se) || se.Field != "tenants" || !strings.Contains(se.Problem, "no rows") {
		t.Errorf("Run(no rows) = %v, want a ScenarioError for tenants", err)
	}
}

// TestRunChecksOutDirFirst checks that an -out that is a file fails before
// the run: the database is never opened (its temporary directory is
// missing, which would fail too, later).
func TestRunChecksOutDirFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: smallScenario(), TempDir: filepath.Join(t.TempDir(), "missing")}
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		cfg.OutDir = dir
		var stdout bytes.Buffer
		_, err := Run(context.Background(), cfg, &stdout)
		if !errors.Is(err, ErrOutDir) || stdout.Len() != 0 {
			t.Errorf("Run(-out %s) = %v, stdout %q; want ErrOutDir before anything runs", dir, err, stdout.String())
		}
	}
}

// TestRunSkipsIdleTicks runs two bursts far apart: the idle ticks between
// them are recorded in the timeline, with nothing in flight, and the run
// ends when the second burst has settled.
func TestRunSkipsIdleTicks(t *testing.T) {
	s := smallScenario()
	s.Duration = 100 * time.Second
	s.ServiceTime = ServiceTime{Min: 200 * time.Millisecond, Max: 200 * time.Millisecond}
	s.Tenants = []Tenant{{Name: "a", Quota: 6, Queues: 1, Arrivals: []Arrival{
		{Pattern: PatternBurst, Rows: 3, At: 0},
		{Pattern: PatternBurst, Rows: 3, At: 90 * time.Second},
	}}}
	rep, err := Run(context.Background(), Config{Scenario: s, TempDir: t.TempDir(), Policies: []Policy{Backpressure}}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Policies[0]
	// The second burst arrives at tick 900, is claimed then and settles at
	// tick 902; the timeline has one sample per tick, 0..902.
	if p.Ticks != 903 || len(p.Timeline.Inflight[0]) != 903 || p.Settled != 6 {
		t.Fatalf("ticks %d, samples %d, settled %d: want 903, 903, 6", p.Ticks, len(p.Timeline.Inflight[0]), p.Settled)
	}
	tl := p.Timeline.Inflight[0]
	if tl[0] != 3 || tl[1] != 3 || tl[2] != 0 || tl[500] != 0 || tl[900] != 3 || tl[902] != 0 {
		t.Errorf("timeline around the bursts: %v … %v … %v", tl[:4], tl[499:502], tl[899:])
	}
	if p.Makespan != 90200*time.Millisecond {
		t.Errorf("makespan %v, want 1m30.2s from the first arrival to the last settle", p.Makespan)
	}
}
