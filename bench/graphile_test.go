package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// graphileSetup drains with graphile-worker 0.18.0 (npm), run by Node from
// graphile/drain.mjs on the same database, in a schema of its own. The
// Makefile's bench-drain target installs it (npm ci in bench/graphile).
type graphileSetup struct {
	dir    string // bench/graphile
	schema string
	app    string // application_name prefix of its connections
}

// newGraphile returns a graphile-worker setup, or nil (with a log line
// saying why) when Node or the installed package is missing.
func newGraphile(tb testing.TB, pool *pgxpool.Pool) *graphileSetup {
	tb.Helper()
	dir, err := filepath.Abs("graphile")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		tb.Logf("graphile-worker arms skipped: no node on PATH")
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "graphile-worker")); err != nil {
		tb.Logf("graphile-worker arms skipped: run npm ci in bench/graphile (make bench-drain does)")
		return nil
	}
	schema := freshSchema(tb, pool, "graphile")
	return &graphileSetup{dir: dir, schema: schema, app: "bench-" + strings.TrimPrefix(schema, "bench_")}
}

// drain runs one drain of rows no-op jobs in mode ("local": its local
// queue with batched completion; "plain"): enqueue and migration untimed,
// then from the worker's start until every job's deletion is written.
func (g *graphileSetup) drain(tb testing.TB, rows int, mode string) (time.Duration, drainStats) {
	tb.Helper()
	url := databaseURL()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	cmd := exec.Command("node", "drain.mjs", url+sep+"application_name="+g.app, g.schema, strconv.Itoa(rows), mode)
	cmd.Dir = g.dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("node drain.mjs: %v", err)
	}
	defer func() { _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	expect := func(prefix string) string {
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(l, prefix))
			}
		}
		_ = cmd.Process.Kill()
		tb.Fatalf("graphile-worker %s: no %q line: %v; stderr: %s", mode, prefix, lines.Err(), stderr.String())
		return ""
	}
	expect("READY")
	cpu := startAppCPU(cpuAdmin, g.app+"-worker")
	if _, err := io.WriteString(stdin, "GO\n"); err != nil {
		tb.Fatal(err)
	}
	ms, err := strconv.ParseFloat(expect("DONE"), 64)
	if err != nil {
		tb.Fatalf("graphile-worker %s: %v", mode, err)
	}
	st := drainStats{pgCPU: cpu.stop()}
	if _, err := io.WriteString(stdin, "STOP\n"); err != nil {
		tb.Fatal(err)
	}
	_ = stdin.Close()
	return time.Duration(ms * float64(time.Millisecond)), st
}

func (g *graphileSetup) String() string { return fmt.Sprintf("graphile-worker in %s", g.schema) }
