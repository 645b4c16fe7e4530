package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Config is one bpsim run. The zero value is not runnable: Scenario must be
// set (start from [DefaultScenario]).
type Config struct {
	// Scenario is the cluster and workload. Run validates it.
	Scenario Scenario

	// Seed draws the workload: the same scenario and seed replay the same
	// arrivals and service times, under every policy and on every run.
	Seed int64

	// DSN, when not empty, is a postgres:// URL: each policy runs in a fresh
	// schema of that database, dropped afterwards. Empty: each policy runs
	// on a fresh embedded SQLite file in a temporary directory, removed
	// afterwards.
	DSN string

	// TempDir is where the SQLite files' temporary directory goes. Empty:
	// the system's temporary directory.
	TempDir string

	// OutDir receives the charts and report.json. Empty: no files.
	OutDir string

	// Policies are the policies to run, in order. Nil: all three, or for
	// a scenario with a downstream its arms (see [CheckPolicies]).
	Policies []Policy

	// Quiet prints only the exactly-once verdict and the paths written,
	// not the tables.
	Quiet bool

	// Progress receives progress lines (see Terminal). Nil: none.
	Progress io.Writer

	// Terminal says Progress is a terminal: a status line is redrawn in
	// place during long runs. Otherwise plain lines are written.
	Terminal bool
}

// ErrExactlyOnce reports a run whose exactly-once audit failed. The report
// is returned with it.
var ErrExactlyOnce = errors.New("bpsim: exactly-once violated")

// Run runs cfg: the workload under each policy, each on a fresh outbox,
// then writes the tables and the verdict to stdout and the files to
// cfg.OutDir. It returns the report; the error is a *[ScenarioError] for a
// bad scenario (or one whose arrivals draw no rows), one matching
// [ErrOutDir] when cfg.OutDir cannot be used (found before simulating),
// [ErrExactlyOnce] (with the report) when the audit failed, ctx's error
// when cancelled, or a database error naming the database.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (*Report, error) {
	if err := cfg.Scenario.Validate(); err != nil {
		return nil, err
	}
	if _, err := CheckPolicies(cfg.Scenario, cfg.Policies); err != nil {
		return nil, err
	}
	return runValidated(ctx, cfg, stdout)
}

// runValidated is [Run] without the scenario's validation, so that a test
// can run a scenario Validate rejects, such as a lease shorter than the
// service time, and see the audit fail.
func runValidated(ctx context.Context, cfg Config, stdout io.Writer) (*Report, error) {
	w := newWorkload(cfg.Scenario, cfg.Seed)
	if len(w.arrivals) == 0 {
		return nil, &ScenarioError{Field: "tenants", Problem: fmt.Sprintf("the arrivals draw no rows with seed %d: raise a perSecond, widen from/until or add a burst", cfg.Seed)}
	}

	// The output directory is checked and made ready before the run, so
	// that a bad -out costs no simulation.
	var out *outDir
	if cfg.OutDir != "" {
		var err error
		if out, err = prepareOutDir(cfg.OutDir); err != nil {
			return nil, err
		}
	}
	committed := false
	defer func() {
		if out != nil && !committed {
			out.abort()
		}
	}()

	rep, err := simulate(ctx, cfg, w)
	if err != nil {
		return nil, err
	}
	if err := printResults(stdout, cfg.Quiet, rep); err != nil {
		return nil, err
	}
	if out != nil {
		committed = true
		paths, err := writeOutputs(out, rep)
		if err != nil {
			out.abort()
			return nil, err
		}
		rep.Files = paths
		fmt.Fprintln(stdout)
		for _, path := range paths {
			fmt.Fprintf(stdout, "wrote %s\n", path)
		}
	}
	if !rep.ExactlyOnce() {
		return rep, ErrExactlyOnce
	}
	return rep, nil
}

// simulate runs w under each of cfg's policies (every policy when it
// names none), one after the other on one database, which it closes.
func simulate(ctx context.Context, cfg Config, w *workload) (*Report, error) {
	policies, err := CheckPolicies(cfg.Scenario, cfg.Policies)
	if err != nil {
		return nil, err
	}
	var db database
	kind := "sqlite"
	if cfg.DSN != "" {
		kind = "postgres"
		db, err = openPostgres(ctx, cfg.DSN)
	} else {
		db, err = openSQLite(cfg.TempDir)
	}
	if err != nil {
		return nil, err
	}
	closeDB := func() error {
		if db == nil {
			return nil
		}
		err := db.Close()
		db = nil
		return err
	}
	defer closeDB()

	rep := &Report{Scenario: cfg.Scenario, Seed: cfg.Seed, Database: kind, Rows: len(w.arrivals)}
	pr := &progress{w: cfg.Progress, terminal: cfg.Terminal, now: time.Now}
	for i, p := range policies {
		pr.start(p, i+1, len(policies), len(w.arrivals))
		began := time.Now()
		r, err := runPolicy(ctx, cfg.Scenario, w, p, db, pr.tick)
		if err != nil {
			// Clear a status line, so the caller's error starts a line.
			pr.abort()
			return nil, prefix(err)
		}
		r.Wall = time.Since(began)
		pr.done(r)
		rep.Policies = append(rep.Policies, r)
	}
	if err := closeDB(); err != nil {
		return nil, prefix(err)
	}
	rep.compareArms()
	return rep, nil
}

// printResults writes the tables (unless quiet) and each policy's
// exactly-once verdict.
func printResults(stdout io.Writer, quiet bool, rep *Report) error {
	if !quiet {
		if err := rep.WriteTables(stdout); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	for _, p := range rep.Policies {
		fmt.Fprintf(stdout, "%-13s %s\n", string(p.Policy)+":", p.Audit)
	}
	return nil
}

// prefix makes sure an error reads "bpsim: …".
func prefix(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || strings.HasPrefix(err.Error(), "bpsim: ") {
		return err
	}
	return fmt.Errorf("bpsim: %w", err)
}
