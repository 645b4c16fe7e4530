// Command bpsim simulates a multi-tenant dispatcher cluster draining one
// transactional outbox, and compares three claim policies on the same
// seeded workload: unscoped oldest-first batches, per-route round-robin, and
// the backpressure library. It prints a table per policy and an
// exactly-once verdict read back from the database, and writes charts and a
// JSON report.
//
// Usage:
//
//	go run ./cmd/bpsim [flags]
//
// Run bpsim -h for the flags and the scenario file format.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/outboxkit/backpressure/cmd/bpsim/internal/sim"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // a run that failed: database, exactly-once, interrupted
	exitUsage = 2 // bad flags or a bad scenario
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, term.IsTerminal(int(os.Stderr.Fd())))
	stop()
	os.Exit(code)
}

// run is bpsim with its arguments, outputs and whether stderr is a
// terminal; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, terminal bool) int {
	fl := flag.NewFlagSet("bpsim", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var (
		scenarioPath = fl.String("scenario", "", "scenario `FILE` (JSON, format below); default: the built-in noisy-neighbour scenario")
		seed         = fl.Int64("seed", 1, "seed of the workload's random draws; the same seed replays the same arrivals")
		seeds        = fl.Int("seeds", 1, "run `N` seeds, -seed to -seed+N−1 (1..100): the tables and files are the first seed's, then each seed's verdicts and, for a scenario with a downstream, the arms' figures across the seeds")
		dsn          = fl.String("dsn", "", "run on the PostgreSQL database at this `postgres://…` URL, in fresh schemas dropped afterwards, instead of on SQLite files in a temporary directory")
		duration     = fl.Duration("duration", 0, "simulated arrival window, overriding the scenario's (e.g. 30s); the run goes on until every row settles")
		out          = fl.String("out", "./bpsim-out", "`DIR` for the charts and report.json; files are rendered first and then renamed in, so none is left half-written; empty: write no files")
		quiet        = fl.Bool("quiet", false, "print only the exactly-once verdict and the files written: no progress, no tables")
		policies     = fl.String("policies", "", "comma-separated `LIST` of the policies to run, in order (unscoped, round-robin, backpressure; for a scenario with a downstream its arms: no-signals, static, oracle, adaptive); default: all three, or the scenario's \"arms\"")
	)
	fl.Usage = func() {
		w := fl.Output()
		fmt.Fprint(w, `bpsim simulates dispatcher nodes draining one transactional outbox shared by
many tenants, and runs the same seeded workload under three claim policies:

  unscoped      one oldest-first batch per sweep, whoever owns the rows
  round-robin   an equal share of the batch per task queue (fair per queue, not per tenant)
  backpressure  dispatch.Dispatcher nodes: a weighted share per tenant, each capped at its quota

It prints, per policy and tenant, rows claimed, wait from enqueue to claim
(p50, p99, max), peak rows claimed at once against the quota and rows held at
the ceiling; overall throughput and Jain's fairness index; and an exactly-once
verdict read back from the database. It writes a chart per policy of rows in
flight per tenant, a combined chart, and report.json with every figure,
including per tenant the longest run of sweeps that claimed none of its rows
while it waited under its quota (starvation).

Time is simulated: every node sweeps at most once a tick, and the stores read
the simulated clock, so a run is reproducible from its scenario and -seed.
Under backpressure each node is the shipped dispatch.Dispatcher, its sweeps
and settles stepped in lockstep with the simulated clock. Jain's index (1 =
fair) is averaged over the ticks in which two or more tenants are entitled to
rows and one at least holds some, of x = min(1, in-flight ÷ entitlement) per
such tenant, the entitlement being its weighted max-min fair share of the
cluster's workers capped by min(quota, in-flight + waiting): an unlimited
tenant is entitled to what the workers can run after the others' shares, a
tenant over its entitlement counts 1, a paused one takes no part.

A scenario whose tenants call a downstream with a capacity (a concurrency
beyond which it answers 429 with Retry-After, and slows down) compares arms
instead: no-signals (the same scenario with no downstream limit), static (the
quotas as given, above the capacity), oracle (each such tenant's quota set
to the capacity, following its changes), adaptive (dispatch.Options.Adaptive
set: each node learns the tenant's ceiling from the 429s). It adds, per arm and tenant,
goodput (and its ratio to the oracle's), 429s per 1,000 calls, overall and
after convergence, convergence times after each change of capacity, and the
other tenants' waits against the no-signals arm's, with downstream.png.

Usage: bpsim [flags]

Flags:
`)
		fl.PrintDefaults()
		fmt.Fprint(w, "\n", sim.ScenarioHelp, `
Exit status: 0 when every policy kept exactly-once; 1 when a run failed (a
database error, an exactly-once violation, an interrupt); 2 for bad flags (a
malformed -dsn, an -out that is a file or cannot be created, checked before
the run) or a bad scenario.
`)
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "bpsim: unexpected argument %q (see bpsim -h)\n", fl.Arg(0))
		return exitUsage
	}

	if *seeds < 1 || *seeds > 100 {
		fmt.Fprintf(stderr, "bpsim: -seeds %d is out of range: want 1..100\n", *seeds)
		return exitUsage
	}
	if *duration < 0 {
		fmt.Fprintf(stderr, "bpsim: -duration %v is negative\n", *duration)
		return exitUsage
	}
	if *dsn != "" {
		if err := sim.CheckDSN(*dsn); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return exitUsage
		}
	}

	// Read the file without validating it, apply -duration, then validate
	// once: -duration can rescue a file, and is named when it breaks one.
	s := sim.DefaultScenario()
	if *scenarioPath != "" {
		var err error
		if s, err = sim.ReadScenario(*scenarioPath); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return exitUsage
		}
	}
	fileValid := s.Validate() == nil
	if *duration > 0 {
		s.Duration = *duration
	}
	if err := s.Validate(); err != nil {
		var se *sim.ScenarioError
		if *duration > 0 && (fileValid || errors.As(err, &se) && se.Field == "duration") {
			fmt.Fprintf(stderr, "%v (with -duration %v)\n", err, *duration)
		} else {
			fmt.Fprintf(stderr, "%v\n", err)
		}
		return exitUsage
	}

	var list []sim.Policy
	if *policies != "" {
		for _, p := range strings.Split(*policies, ",") {
			list = append(list, sim.Policy(strings.TrimSpace(p)))
		}
	}
	if _, err := sim.CheckPolicies(s, list); err != nil {
		fmt.Fprintf(stderr, "%v (-policies %q)\n", err, *policies)
		return exitUsage
	}

	cfg := sim.Config{
		Policies: list,
		Scenario: s,
		Seed:     *seed,
		DSN:      *dsn,
		OutDir:   *out,
		Quiet:    *quiet,
		Terminal: terminal,
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	began := time.Now()
	rep, err := sim.Run(ctx, cfg, stdout)
	reps := []*sim.Report{rep}
	for k := 1; k < *seeds && err == nil; k++ {
		cfg.Seed, cfg.OutDir, cfg.Quiet = *seed+int64(k), "", true
		fmt.Fprintf(stdout, "\nseed %d:\n", cfg.Seed)
		rep, err = sim.Run(ctx, cfg, stdout)
		reps = append(reps, rep)
	}
	if err == nil && *seeds > 1 {
		fmt.Fprintln(stdout)
		err = sim.WriteSeedSummary(stdout, reps)
	}
	switch {
	case err == nil:
		if !*quiet {
			fmt.Fprintf(stderr, "bpsim: done in %.1fs\n", time.Since(began).Seconds())
		}
		return exitOK
	case errors.Is(err, sim.ErrScenario), errors.Is(err, sim.ErrOutDir):
		fmt.Fprintf(stderr, "%v\n", err)
		return exitUsage
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		fmt.Fprintln(stderr, "bpsim: interrupted; nothing was written")
		return exitError
	}
	fmt.Fprintf(stderr, "%v\n", err)
	return exitError
}
