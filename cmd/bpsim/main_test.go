package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// small is a scenario file small enough for a test.
const small = `{
  "nodes": 2, "shardCount": 8, "batchSize": 4, "workersPerNode": 8,
  "tick": "100ms", "duration": "1s", "lease": "1m",
  "serviceTime": {"min": "200ms", "max": "400ms"},
  "tenants": [
    {"name": "big", "quota": 4, "queues": 3, "arrivals": [{"pattern": "burst", "rows": 24}]},
    {"name": "small", "quota": 2, "arrivals": [{"pattern": "steady", "perSecond": 2}]}
  ]
}`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, false)
	return code, out.String(), errOut.String()
}

func TestHelpDocumentsEveryFlagAndTheFormat(t *testing.T) {
	code, stdout, stderr := runMain(t, "-h")
	if code != exitOK || stdout != "" {
		t.Fatalf("bpsim -h: exit %d, stdout %q", code, stdout)
	}
	for _, want := range []string{"-scenario", "-seed", "-seeds", "-policies", "-dsn", "-duration", "-out", "-quiet", `"downstream"`, `"arms"`, "downstream.json",
		`"nodes"`, `"shardCount"`, `"batchSize"`, `"quota"`, `"queues"`, `"arrivals"`, `"serviceTime"`,
		`"burst"`, `"steady"`, "scenario.sample.json", "Exit status"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("bpsim -h does not mention %s", want)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	bad := writeFile(t, "bad.json", `{"tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3, "at": "1h"}]}]}`)
	zero := writeFile(t, "zero.json", `{"nodes": 0, "tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3}]}]}`)
	typed := writeFile(t, "typed.json", `{"tenants": [{"name": "a", "quota": 1.5}]}`)
	window := writeFile(t, "window.json", `{"tenants": [{"name": "a", "quota": 5, "arrivals": [{"pattern": "burst", "rows": 3, "at": "30s"}]}]}`)
	broken := writeFile(t, "broken.json", `{"nodes": `)
	file := writeFile(t, "file", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-nosuchflag"}, "flag provided but not defined"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-scenario", bad}, "tenants[0].arrivals[0].at"},
		{[]string{"-scenario", broken}, "truncated JSON"},
		{[]string{"-scenario", filepath.Join(t.TempDir(), "missing.json")}, "reading scenario"},
		{[]string{"-duration", "-3s"}, "-duration -3s is negative"},
		{[]string{"-seeds", "0"}, "-seeds 0 is out of range"},
		{[]string{"-policies", "static"}, `policy "static" is an arm of a scenario with a downstream`},
		{[]string{"-scenario", "scenarios/downstream.json", "-policies", "backpressure"}, `policy "backpressure" does not model the tenants' downstreams`},
		{[]string{"-duration", "1ms"}, "bpsim: scenario: duration: 1ms is shorter than one tick (100ms) (with -duration 1ms)"},
		{[]string{"-scenario", zero}, "bpsim: scenario: nodes: 0 is out of range"},
		{[]string{"-scenario", typed}, "bpsim: scenario: tenants[0].quota: want an integer, got 1.5"},
		{[]string{"-scenario", window, "-duration", "10s"}, "tenants[0].arrivals[0].at: 30s is outside the arrival window [0, 10s) (with -duration 10s)"},
		{[]string{"-dsn", "postgres://a:secret@host:notaport/db"}, "bpsim: bad -dsn"},
		{[]string{"-dsn", "::nonsense"}, "bpsim: bad -dsn"},
		{[]string{"-scenario", bad, "-out", file}, "bpsim: scenario: tenants[0].arrivals[0].at"},
		{[]string{"-out", file}, "not a directory"},
		{[]string{"-out", filepath.Join(file, "sub")}, "bpsim: bad output directory"},
	}
	for i, tt := range tests {
		args := tt.args
		if !slices.Contains(args, "-out") {
			args = append(args, "-out", filepath.Join(t.TempDir(), "out"))
		}
		code, stdout, stderr := runMain(t, args...)
		if strings.Contains(stderr, "secret") {
			t.Errorf("step %d: stderr shows the password: %q", i, stderr)
		}
		if code != exitUsage || !strings.Contains(stderr, tt.want) || stdout != "" {
			t.Errorf("step %d: bpsim %v: exit %d, stderr %q, stdout %q; want exit 2 and %q", i, tt.args, code, stderr, stdout, tt.want)
		}
	}
}

func TestRunScenarioFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runMain(t, "-scenario", writeFile(t, "s.json", small), "-seed", "5", "-out", out)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"== unscoped", "== round-robin", "== backpressure", "exactly-once: ok", "wrote " + filepath.Join(out, "bpsim.png"), "wrote " + filepath.Join(out, "report.json")} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "bpsim: [3/3] backpressure:") || strings.Contains(stderr, "\r") {
		t.Errorf("stderr (not a terminal) should hold plain progress lines:\n%q", stderr)
	}

	code, stdout, stderr = runMain(t, "-scenario", writeFile(t, "s.json", small), "-quiet", "-out", "")
	if code != exitOK || stderr != "" || strings.Contains(stdout, "==") || strings.Contains(stdout, "wrote") ||
		strings.Count(stdout, "exactly-once: ok") != 3 {
		t.Errorf("-quiet -out '': exit %d, stderr %q, stdout:\n%s\nwant only the three verdicts", code, stderr, stdout)
	}
}

func TestInterruptedRunExits1(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-scenario", writeFile(t, "s.json", small), "-out", out}, &stdout, &stderr, false)
	if code != exitError || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("cancelled run: exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a cancelled run created %s", out)
	}
}

// TestDurationRescuesAFile checks that -duration is applied before the
// file is validated: a file whose own window is shorter than a tick runs
// with a -duration that fixes it.
func TestDurationRescuesAFile(t *testing.T) {
	short := strings.Replace(small, `"duration": "1s"`, `"duration": "50ms"`, 1)
	path := writeFile(t, "short.json", short)
	if code, _, stderr := runMain(t, "-scenario", path, "-out", ""); code != exitUsage || !strings.Contains(stderr, "shorter than one tick") {
		t.Fatalf("the file alone: exit %d, stderr %q; want it rejected", code, stderr)
	}
	if code, stdout, stderr := runMain(t, "-scenario", path, "-duration", "1s", "-quiet", "-out", ""); code != exitOK {
		t.Errorf("with -duration 1s: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
