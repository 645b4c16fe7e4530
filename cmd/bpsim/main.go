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
	f, code, ok := parseFlags(args, stderr)
	if !ok {
		return code
	}
	s, ok := loadScenario(f, stderr)
	if !ok {
		return exitUsage
	}
	list, ok := parsePolicies(s, f.policies, stderr)
	if !ok {
		return exitUsage
	}
	cfg := sim.Config{
		Policies: list,
		Scenario: s,
		Seed:     f.seed,
		DSN:      f.dsn,
		OutDir:   f.out,
		Quiet:    f.quiet,
		Terminal: terminal,
	}
	if !f.quiet {
		cfg.Progress = stderr
	}
	began := time.Now()
	err := runSeeds(ctx, cfg, f.seeds, stdout)
	if err == nil && !f.quiet {
		fmt.Fprintf(stderr, "bpsim: done in %.1fs\n", time.Since(began).Seconds())
	}
	return exitStatus(ctx, err, stderr)
}

// flags are bpsim's parsed command line.
type flags struct {
	scenarioPath string
	seed         int64
	seeds        int
	dsn          string
	duration     time.Duration
	out          string
	quiet        bool
	policies     string
}

// parseFlags parses args and checks the flags that need no scenario. When
// ok is false bpsim stops with code: exitOK after -h, exitUsage otherwise,
// the reason written to stderr.
func parseFlags(args []string, stderr io.Writer) (f flags, code int, ok bool) {
	fl := flag.NewFlagSet("bpsim", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&f.scenarioPath, "scenario", "", "scenario `FILE` (JSON, format below); default: the built-in noisy-neighbour scenario")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the workload's random draws; the same seed replays the same arrivals")
	fl.IntVar(&f.seeds, "seeds", 1, "run `N` seeds, -seed to -seed+N−1 (1..100): the tables and files are the first seed's, then each seed's verdicts and, for a scenario with a downstream, the arms' figures across the seeds")
	fl.StringVar(&f.dsn, "dsn", "", "run on the PostgreSQL database at this `postgres://…` URL, in fresh schemas dropped afterwards, instead of on SQLite files in a temporary directory")
	fl.DurationVar(&f.duration, "duration", 0, "simulated arrival window, overriding the scenario's (e.g. 30s); the run goes on until every row settles")
	fl.StringVar(&f.out, "out", "./bpsim-out", "`DIR` for the charts and report.json; files are rendered first and then renamed in, so none is left half-written; empty: write no files")
	fl.BoolVar(&f.quiet, "quiet", false, "print only the exactly-once verdict and the files written: no progress, no tables")
	fl.StringVar(&f.policies, "policies", "", "comma-separated `LIST` of the policies to run, in order (unscoped, round-robin, backpressure; for a scenario with a downstream its arms: no-signals, static, oracle, adaptive); default: all three, or the scenario's \"arms\"")
	fl.Usage = func() { printUsage(fl) }
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f, exitOK, false
		}
		return f, exitUsage, false
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "bpsim: unexpected argument %q (see bpsim -h)\n", fl.Arg(0))
		return f, exitUsage, false
	}
	if f.seeds < 1 || f.seeds > 100 {
		fmt.Fprintf(stderr, "bpsim: -seeds %d is out of range: want 1..100\n", f.seeds)
		return f, exitUsage, false
	}
	if f.duration < 0 {
		fmt.Fprintf(stderr, "bpsim: -duration %v is negative\n", f.duration)
		return f, exitUsage, false
	}
	if f.dsn != "" {
		if err := sim.CheckDSN(f.dsn); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return f, exitUsage, false
		}
	}
	return f, exitOK, true
}

// usageText is bpsim -h's text before the flags.
const usageText = `bpsim simulates dispatcher nodes draining one transactional outbox shared by
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
`

// usageTail is bpsim -h's text after the flags and the scenario format.
const usageTail = `
Exit status: 0 when every policy kept exactly-once; 1 when a run failed (a
database error, an exactly-once violation, an interrupt); 2 for bad flags (a
malformed -dsn, an -out that is a file or cannot be created, checked before
the run) or a bad scenario.
`

// printUsage writes bpsim -h to fl's output: what bpsim does, its flags,
// the scenario format and the exit statuses.
func printUsage(fl *flag.FlagSet) {
	w := fl.Output()
	fmt.Fprint(w, usageText)
	fl.PrintDefaults()
	fmt.Fprint(w, "\n", sim.ScenarioHelp, usageTail)
}

// loadScenario reads the scenario (the built-in one when f names no file),
// applies -duration and validates it; when ok is false the reason is
// written to stderr. The file is read without validating it, -duration
// applied, then validated once: -duration can rescue a file, and is named
// when it breaks one.
func loadScenario(f flags, stderr io.Writer) (s sim.Scenario, ok bool) {
	s = sim.DefaultScenario()
	if f.scenarioPath != "" {
		var err error
		if s, err = sim.ReadScenario(f.scenarioPath); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return s, false
		}
	}
	fileValid := s.Validate() == nil
	if f.duration > 0 {
		s.Duration = f.duration
	}
	if err := s.Validate(); err != nil {
		var se *sim.ScenarioError
		if f.duration > 0 && (fileValid || errors.As(err, &se) && se.Field == "duration") {
			fmt.Fprintf(stderr, "%v (with -duration %v)\n", err, f.duration)
		} else {
			fmt.Fprintf(stderr, "%v\n", err)
		}
		return s, false
	}
	return s, true
}

// parsePolicies splits -policies (arg) and checks the list against s; an
// empty arg is a nil list (the scenario's default). When ok is false the
// reason is written to stderr.
func parsePolicies(s sim.Scenario, arg string, stderr io.Writer) (list []sim.Policy, ok bool) {
	if arg != "" {
		for _, p := range strings.Split(arg, ",") {
			list = append(list, sim.Policy(strings.TrimSpace(p)))
		}
	}
	if _, err := sim.CheckPolicies(s, list); err != nil {
		fmt.Fprintf(stderr, "%v (-policies %q)\n", err, arg)
		return nil, false
	}
	return list, true
}

// runSeeds runs cfg for seeds seeds from cfg.Seed: the first with cfg's
// files and tables, the others quiet and writing no files, each headed by
// its seed; with more than one seed it ends with the summary across them.
// It stops at the first error.
func runSeeds(ctx context.Context, cfg sim.Config, seeds int, stdout io.Writer) error {
	first := cfg.Seed
	rep, err := sim.Run(ctx, cfg, stdout)
	reps := []*sim.Report{rep}
	for k := 1; k < seeds && err == nil; k++ {
		cfg.Seed, cfg.OutDir, cfg.Quiet = first+int64(k), "", true
		fmt.Fprintf(stdout, "\nseed %d:\n", cfg.Seed)
		rep, err = sim.Run(ctx, cfg, stdout)
		reps = append(reps, rep)
	}
	if err == nil && seeds > 1 {
		fmt.Fprintln(stdout)
		err = sim.WriteSeedSummary(stdout, reps)
	}
	return err
}

// exitStatus is the exit status for a run that ended with err, writing the
// reason for a failure to stderr: a bad scenario or output directory found
// during the run is a usage error, an interrupt or any other failure an
// error.
func exitStatus(ctx context.Context, err error, stderr io.Writer) int {
	switch {
	case err == nil:
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
