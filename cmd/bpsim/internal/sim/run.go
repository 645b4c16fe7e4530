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

	// Policies are the policies to run, in order. Nil: all three.
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
// bad scenario, [ErrExactlyOnce] (with the report) when the audit failed,
// ctx's error when cancelled, or a database error naming the database.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (*Report, error) {
	s := cfg.Scenario
	if err := s.Validate(); err != nil {
		return nil, err
	}
	policies := cfg.Policies
	if policies == nil {
		policies = Policies
	}
	w := newWorkload(s, cfg.Seed)

	var db database
	var err error
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

	rep := &Report{Scenario: s, Seed: cfg.Seed, Database: kind, Rows: len(w.arrivals)}
	pr := &progress{w: cfg.Progress, terminal: cfg.Terminal, now: time.Now}
	for i, p := range policies {
		pr.start(p, i+1, len(policies), len(w.arrivals))
		began := time.Now()
		r, err := runPolicy(ctx, s, w, p, db, pr.tick)
		if err != nil {
			return nil, prefix(err)
		}
		r.Wall = time.Since(began)
		pr.done(r)
		rep.Policies = append(rep.Policies, r)
	}
	if err := closeDB(); err != nil {
		return nil, prefix(err)
	}

	if !cfg.Quiet {
		if err := rep.WriteTables(stdout); err != nil {
			return nil, err
		}
		fmt.Fprintln(stdout)
	}
	for _, p := range rep.Policies {
		fmt.Fprintf(stdout, "%-13s %s\n", string(p.Policy)+":", p.Audit)
	}
	if cfg.OutDir != "" {
		paths, err := writeOutputs(cfg.OutDir, rep)
		if err != nil {
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

// prefix makes sure an error reads "bpsim: …".
func prefix(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || strings.HasPrefix(err.Error(), "bpsim: ") {
		return err
	}
	return fmt.Errorf("bpsim: %w", err)
}
