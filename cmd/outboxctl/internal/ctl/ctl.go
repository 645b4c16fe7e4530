// Package ctl is outboxctl: an operator's command line over an outbox in
// PostgreSQL (pgstore) or SQLite (sqlitestore). main.go only calls
// [Config.Run]; tests drive it with buffers.
package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// Exit statuses of Run.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command failed (the store, the database, a refused change)
	ExitUsage   = 2 // bad usage: unknown command, bad flag, missing argument
)

// Config is one run of outboxctl. The zero value writes nowhere; set
// Stdout and Stderr.
type Config struct {
	Stdout, Stderr io.Writer
	// Now is the stores' clock and what ages are measured from. Nil: the
	// database's clock (pgstore) or time.Now (sqlitestore), and time.Now.
	Now func() time.Time
	// Listen, when not nil, replaces net.Listen for serve (tests listen
	// on a port of their own and learn the address).
	Listen func(network, addr string) (net.Listener, error)
}

const usage = `usage: outboxctl (-dsn URL [-schema NAME] | -sqlite FILE) [-as NAME] COMMAND [flags] [args]

Commands:
  tenants                  one line per namespace: quota, weight, ceiling over live nodes,
                           claimed, ready, scheduled, dead, oldest ready, and why rows wait
  why NAMESPACE            what holds a namespace, node by node
  dead list                list dead letters [-namespace N] [-limit K] [-after KEY]
  dead requeue             requeue dead letters: KEY... | -namespace N | -all  [-dry-run]
  dead purge               delete dead letters:  KEY... | -namespace N | -all  [-dry-run]
  pause NAMESPACE          stop claims of a namespace on every node (shared settings)
  resume NAMESPACE         undo pause
  set quota|weight NAMESPACE VALUE
                           set a shared quota (a number, or unlimited) or weight; VALUE default clears it
  set rate NAMESPACE RATE [burst N]
                           set a shared rate limit: 20/s, 300/m, 1000/h or none; default clears it
  reset NAMESPACE          remove every shared override of a namespace (the code's configuration)
  stats                    rows by state, whole outbox
  nodes                    the live dispatcher nodes' reports
  migrate                  apply the schema [-print: print its SQL instead, touching nothing]
  audit                    the changes made (who, when, what, before, after), newest first [-namespace N]
  serve                    serve the admin pages [-addr 127.0.0.1:8080] [-actions] [-token-file F | -basic-auth-file F]

Every change (pause, resume, set, reset, requeue, purge, migrate) is recorded in the store's audit
trail with the operator -as names (default: the OS user). Read commands take -json. Every command
takes -h. Exit status: 0 ok, 1 failure, 2 bad usage
(checked before the store is opened). Only migrate creates an outbox: every other command on a
file or schema that does not hold one fails (exit 1), saying so, and creates nothing. Names with
control characters are printed quoted ("a\x1b[0m").

Global flags:
`

// Run runs outboxctl with args (without the program name) and returns its
// exit status.
func (c Config) Run(ctx context.Context, args []string) int {
	err := c.run(ctx, args)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(c.Stderr, "outboxctl: %s\n(outboxctl -h for help)\n", displayText(ue.msg))
		return ExitUsage
	}
	fmt.Fprintf(c.Stderr, "outboxctl: %s\n", displayText(err.Error()))
	return ExitFailure
}

// global are the flags before the command.
type global struct {
	dsn, schema, sqlite string
	shardCount          int
	as                  string // the operator the audit trail records
}

func (c Config) run(ctx context.Context, args []string) error {
	var g global
	fs := flag.NewFlagSet("outboxctl", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&g.dsn, "dsn", os.Getenv("OUTBOXCTL_DSN"), "PostgreSQL URL (postgres://…); default $OUTBOXCTL_DSN")
	fs.StringVar(&g.schema, "schema", pgstore.DefaultSchema, "PostgreSQL schema of the outbox")
	fs.StringVar(&g.sqlite, "sqlite", "", "SQLite database file of the outbox")
	fs.IntVar(&g.shardCount, "shards", 0, "shard count for migrate of a new outbox (0: the store's default, 64)")
	fs.StringVar(&g.as, "as", osUser(), "the operator the audit trail records for a change (default: the OS user)")
	fs.Usage = func() { fmt.Fprint(c.Stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("no command")
	}
	cmd, rest := rest[0], rest[1:]
	if cmd == "dead" || cmd == "set" {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
				fmt.Fprint(c.Stderr, subUsage[cmd])
				return flag.ErrHelp
			}
			return usagef("%s needs a subcommand: %s", cmd, subUsage[cmd])
		}
		cmd, rest = cmd+" "+rest[0], rest[1:]
	}
	h, ok := commands[cmd]
	if !ok {
		return usagef("unknown command %q", cmd)
	}
	cf := flag.NewFlagSet("outboxctl "+cmd, flag.ContinueOnError)
	cf.SetOutput(c.Stderr)
	a := &cmdArgs{fs: cf}
	if h.json {
		cf.BoolVar(&a.json, "json", false, "print JSON")
	}
	if h.flags != nil {
		h.flags(a)
	}
	cf.Usage = func() {
		fmt.Fprintf(c.Stderr, "usage: outboxctl %s %s\n\n%s\n", cmd, h.args, h.doc)
		cf.PrintDefaults()
	}
	if err := cf.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%s: %v", cmd, err)
	}
	a.rest = cf.Args()
	if h.nargs >= 0 && len(a.rest) != h.nargs {
		return usagef("%s takes %s", cmd, h.args)
	}
	if err := checkArgs(cmd, a); err != nil {
		return err
	}
	ctx = outbox.WithOperation(ctx, outbox.Operation{Operator: g.as})
	if err := outbox.CheckOperation(ctx, "outboxctl"); err != nil {
		return usagef("-as: %v", err)
	}
	if cmd == "migrate" && a.print {
		return openFailure(g, c.printSchema(g))
	}
	s, err := c.open(ctx, g, cmd == "migrate")
	if err != nil {
		return openFailure(g, err)
	}
	defer s.Close()
	return h.run(ctx, c, s, a)
}

var subUsage = map[string]string{
	"dead": "list, requeue or purge\n",
	"set":  "quota, weight or rate\n",
}

// open opens the store the global flags name; unless create, only an
// existing outbox (Options.MustExist).
func (c Config) open(ctx context.Context, g global, create bool) (admin.Store, error) {
	switch {
	case g.dsn != "" && g.sqlite != "":
		return nil, usagef("give -dsn or -sqlite, not both")
	case g.sqlite != "":
		s, err := sqlitestore.Open(ctx, g.sqlite, sqlitestore.Options{Now: c.Now, ShardCount: g.shardCount, MustExist: !create})
		if err != nil {
			return nil, err
		}
		return s, nil
	case g.dsn != "":
		s, err := pgstore.Open(ctx, g.dsn, pgstore.Options{Schema: g.schema, Now: c.Now, ShardCount: g.shardCount, MustExist: !create})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, usagef("no store: give -dsn postgres://… or -sqlite FILE")
}

func (c Config) printSchema(g global) error {
	var script string
	var err error
	switch {
	case g.dsn != "" && g.sqlite != "":
		return usagef("give -dsn or -sqlite, not both")
	case g.sqlite != "":
		script, err = sqlitestore.SchemaSQL(g.shardCount)
	case g.dsn != "":
		script, err = pgstore.SchemaSQL(g.schema, g.shardCount)
	default:
		return usagef("migrate -print: give -dsn (with -schema) or -sqlite to say which store's SQL")
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.Stdout, script)
	return err
}

// cmdArgs are one command's flags and arguments.
type cmdArgs struct {
	fs        *flag.FlagSet
	rest      []string
	json      bool
	namespace string
	after     string
	limit     int
	all       bool
	dryRun    bool
	print     bool
	addr      string
	actions   bool
	tokenFile string
	basicFile string
	before    int64
}

type command struct {
	args  string
	doc   string
	nargs int // exact positional arguments; -1 for any
	json  bool
	flags func(*cmdArgs)
	run   func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error
}

var commands map[string]command

func init() {
	selection := func(a *cmdArgs) {
		a.fs.StringVar(&a.namespace, "namespace", "", "every dead letter of this namespace")
		a.fs.BoolVar(&a.all, "all", false, "every dead letter")
		a.fs.BoolVar(&a.dryRun, "dry-run", false, "count what would change, change nothing")
	}
	commands = map[string]command{
		"tenants": {args: "[-json] [-after NAMESPACE] [-limit N]", doc: "One line per namespace with rows or shared settings: the quota and weight the live nodes apply,\n" +
			"the sum of their ceilings, claimed, ready, scheduled and dead rows (counts stop at 10,000: shown as ≥10000),\n" +
			"the age of the oldest ready row, rows held by the nodes' last plans and the reason.",
			nargs: 0, json: true, flags: func(a *cmdArgs) {
				a.fs.StringVar(&a.after, "after", "", "start after this namespace (paging)")
				a.fs.IntVar(&a.limit, "limit", 100, "the most namespaces (1 to 1000)")
			}, run: tenants},
		"why": {args: "[-json] NAMESPACE", doc: "What holds NAMESPACE: its rows, its shared settings, and each live node's last plan of it.", nargs: 1, json: true, run: why},
		"dead list": {args: "[-json] [-namespace N] [-limit K] [-after KEY]", doc: "Dead letters in dispatch-key order.", nargs: 0, json: true, flags: func(a *cmdArgs) {
			a.fs.StringVar(&a.namespace, "namespace", "", "only this namespace")
			a.fs.StringVar(&a.after, "after", "", "only keys after this one (paging)")
			a.fs.IntVar(&a.limit, "limit", 100, "the most rows (1 to 10000)")
		}, run: deadList},
		"dead requeue": {args: "[-dry-run] (KEY... | -namespace N | -all)", doc: "Move dead letters back to pending, claimable at once with attempts reset.", nargs: -1, flags: selection,
			run: func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
				return deadAction(ctx, c, s, a, "requeued", admin.Requeue)
			}},
		"dead purge": {args: "[-dry-run] (KEY... | -namespace N | -all)", doc: "Delete dead letters (their keys may then be enqueued again).", nargs: -1, flags: selection,
			run: func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
				return deadAction(ctx, c, s, a, "purged", admin.Purge)
			}},
		"pause": {args: "NAMESPACE", doc: "Pause NAMESPACE on every dispatcher node with shared settings on: its rows are held, reason paused.", nargs: 1,
			run: func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
				return setting(ctx, c, s, admin.Setting{Namespace: a.rest[0], Pause: true})
			}},
		"resume": {args: "NAMESPACE", doc: "Undo pause.", nargs: 1,
			run: func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
				return setting(ctx, c, s, admin.Setting{Namespace: a.rest[0], Resume: true})
			}},
		"reset": {args: "NAMESPACE", doc: "Remove every shared override of NAMESPACE (pause, quota, weight), overwriting a row that cannot be read: the code's configuration applies.", nargs: 1,
			run: func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
				return setting(ctx, c, s, admin.Setting{Namespace: a.rest[0], Reset: true})
			}},
		"set quota":  {args: "NAMESPACE (N | unlimited | default)", doc: "Set NAMESPACE's shared quota: N ≥ 0 (0 pauses), unlimited, or default to clear it.", nargs: 2, run: setValue("quota")},
		"set weight": {args: "NAMESPACE (N | default)", doc: "Set NAMESPACE's shared weight: 1 to 1048576, or default to clear it.", nargs: 2, run: setValue("weight")},
		"set rate": {args: "NAMESPACE (RATE [burst N] | none | default)", doc: "Set NAMESPACE's shared rate limit, cluster-wide: RATE is N/s, N/m or N/h (rows started per second, minute, hour),\n" +
			"burst N the most started at once (default: one second's worth, at least 1); none lifts the limit, default clears the setting.", nargs: -1, run: setRate},
		"set adaptive": {args: "NAMESPACE (pin N | auto)", doc: "Pin NAMESPACE's adaptive ceiling at N rows per node (1 to 1048576; still capped by its ceiling) on every node with\n" +
			"dispatch.Options.Adaptive, or auto to let each node's controller steer it again.", nargs: -1, run: setAdaptive},
		"audit": {args: "[-json] [-namespace N] [-limit K] [-before ID]", doc: "The audit trail: every change made through the store (settings, requeue, purge, migrate), newest first.", nargs: 0, json: true,
			flags: func(a *cmdArgs) {
				a.fs.StringVar(&a.namespace, "namespace", "", "only this namespace's changes")
				a.fs.IntVar(&a.limit, "limit", 50, "the most entries (1 to 1000)")
				a.fs.Int64Var(&a.before, "before", 0, "only entries older than this ID (paging)")
			}, run: audit},
		"stats": {args: "[-json]", doc: "Rows by state over the whole outbox (one full count: O(rows)).", nargs: 0, json: true, run: stats},
		"nodes": {args: "[-json]", doc: "The live dispatcher nodes' reports.", nargs: 0, json: true, run: nodes},
		"migrate": {args: "[-print]", doc: "Create or migrate the outbox schema to this version. -print prints the SQL that creates it from nothing, touching no database.", nargs: 0,
			flags: func(a *cmdArgs) { a.fs.BoolVar(&a.print, "print", false, "print the schema's SQL instead") },
			run: func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
				_, err := fmt.Fprintln(c.Stdout, "schema is current") // opening the store migrated it
				return err
			}},
		"serve": {args: "[-addr 127.0.0.1:8080] [-actions] [-token-file FILE | -basic-auth-file FILE]", doc: serveDoc, nargs: 0,
			flags: func(a *cmdArgs) {
				a.fs.StringVar(&a.addr, "addr", "127.0.0.1:8080", "listen address (an address off loopback needs credentials)")
				a.fs.BoolVar(&a.actions, "actions", false, "enable requeue, purge, pause, resume, set and reset (needs credentials; on loopback a token is made if none is given)")
				a.fs.StringVar(&a.tokenFile, "token-file", "", "file holding the token (default $"+tokenEnv+")")
				a.fs.StringVar(&a.basicFile, "basic-auth-file", "", "file holding USER:PASSWORD for basic auth (default $"+basicEnv+")")
			}, run: serve},
	}
}

func (c Config) json(v any) error {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetIndent("", "  ")
	if err := e.Encode(v); err != nil {
		return err
	}
	_, err := c.Stdout.Write(jsonText(b.Bytes()))
	return err
}

func capped(n int, capped bool) string {
	if capped && n >= outbox.DefaultCountCap {
		return "≥" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

func settingsText(s outbox.NamespaceSettings) string {
	if s.Fault != "" {
		return "BAD: " + oneLine(s.Fault, 60)
	}
	var parts []string
	if s.Paused {
		parts = append(parts, "paused")
	}
	if s.Quota != nil {
		parts = append(parts, "quota="+admin.Count(*s.Quota))
	}
	if s.Weight != nil {
		parts = append(parts, "weight="+strconv.Itoa(*s.Weight))
	}
	if s.Rate != nil {
		rate := "none"
		if s.Rate.PerSecond > 0 {
			rate = shortRate(*s.Rate)
		}
		parts = append(parts, "rate="+rate)
	}
	if s.AdaptivePin != nil {
		parts = append(parts, "adaptive=pin:"+strconv.Itoa(*s.AdaptivePin))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// tenantSettingsText is the SETTINGS column of t: its settings, or BAD
// and the first fault where they do not apply.
func tenantSettingsText(t admin.Tenant) string {
	if t.Faults == "" {
		return settingsText(t.Settings)
	}
	return "BAD: " + displayText(oneLine(t.Faults, 60))
}

// nodeSettingsText is the SETTINGS column of r: its version, and what of
// it did not apply.
func nodeSettingsText(r outbox.NodeReport) string {
	settings := strconv.FormatInt(r.SettingsVersion, 10)
	if r.SettingsError != "" {
		settings += " REJECTED: " + displayText(oneLine(r.SettingsError, 60))
	}
	for i, f := range r.BadSettings {
		if i == 5 {
			settings += fmt.Sprintf("; +%d more", len(r.BadSettings)-i)
			break
		}
		what := "kept last good"
		if f.Held {
			what = "held"
		}
		settings += fmt.Sprintf("; %s %s", display(f.Namespace), what)
	}
	return settings
}

func tenants(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	page, err := admin.Tenants(ctx, s, admin.TenantsParams{After: a.after, Limit: a.limit})
	if err != nil {
		return err
	}
	if a.json {
		return c.json(page)
	}
	now := c.now()
	w := table(c.Stdout)
	fmt.Fprintln(w, "NAMESPACE\tQUOTA\tWEIGHT\tRATE\tCEILING\tCLAIMED\tREADY\tSCHEDULED\tDEAD\tOLDEST\tHELD\tREASON\tSETTINGS")
	for _, t := range page.Tenants {
		quota, weight, rate, ceiling := "-", "-", "-", "-"
		if t.Nodes > 0 {
			quota, weight, rate, ceiling = admin.Count(t.Quota), strconv.Itoa(t.Weight), shortRate(t.Rate), admin.Count(t.Ceiling)
			if t.Mixed {
				quota += "*"
			}
		}
		reason := display(t.Reason)
		if reason == "" {
			reason = "-"
		}
		if text := admin.AdaptiveText(t); text != "" {
			reason += " (" + text + ")"
		}
		r := t.Rows
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", display(t.Namespace), quota, weight, rate, ceiling,
			capped(r.Claimed, r.Capped), capped(r.Ready, r.Capped), capped(r.Scheduled, r.Capped), capped(r.Dead, r.Capped),
			admin.Age(now, r.ReadySince), t.Held, reason, tenantSettingsText(t))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := printRates(ctx, c, s, "", page.Tenants, true); err != nil {
		return err
	}
	if page.SettingsTruncated {
		fmt.Fprintf(c.Stdout, "(the store holds more shared settings rows than it reads, %d: the nodes hold the namespaces after them or keep their last good settings)\n", outbox.MaxSettings)
	}
	if page.More {
		fmt.Fprintf(c.Stdout, "(more: outboxctl tenants -after %s)\n", display(page.Tenants[len(page.Tenants)-1].Namespace))
	}
	if len(page.Nodes) == 0 {
		fmt.Fprintln(c.Stdout, "(no live node reports: quotas, ceilings and reasons come from dispatchers run with Options.Operate)")
	}
	return nil
}

func why(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	ex, err := admin.Why(ctx, s, a.rest[0])
	if err != nil {
		return err
	}
	if a.json {
		return c.json(ex)
	}
	t, r := ex.Tenant, ex.Tenant.Rows
	fmt.Fprintf(c.Stdout, "%s: %s\n", display(t.Namespace), ex.Summary())
	fmt.Fprintf(c.Stdout, "rows: %s ready (oldest %s), %s scheduled, %s claimed, %s dead, %s settled\n",
		capped(r.Ready, r.Capped), admin.Age(c.now(), r.ReadySince), capped(r.Scheduled, r.Capped), capped(r.Claimed, r.Capped),
		capped(r.Dead, r.Capped), capped(r.Settled, r.Capped))
	fmt.Fprintf(c.Stdout, "shared settings: %s\n", settingsText(t.Settings))
	if err := printRates(ctx, c, s, t.Namespace, []admin.Tenant{t}, false); err != nil {
		return err
	}
	for _, f := range strings.Split(t.Faults, "; ") {
		if f != "" {
			fmt.Fprintf(c.Stdout, "  BAD: %s\n", oneLine(f, 100))
		}
	}
	for _, rt := range ex.Routes {
		tq := display(rt.TaskQueue)
		if tq == "" {
			tq = "(default)"
		}
		atLeast := "" // a capped route's counts are lower bounds
		if rt.Capped {
			atLeast = "≥"
		}
		fmt.Fprintf(c.Stdout, "route %s: %s%d ready, %s%d scheduled, %s%d claimed\n", tq, atLeast, rt.Ready, atLeast, rt.Scheduled, atLeast, rt.Claimed)
	}
	if ex.RoutesTruncated {
		fmt.Fprintf(c.Stdout, "(only the first %d routes)\n", len(ex.Routes))
	}
	if len(ex.Nodes) == 0 {
		fmt.Fprintln(c.Stdout, "no live node reports")
		return nil
	}
	w := table(c.Stdout)
	fmt.Fprintln(w, "NODE\tSHARDS\tQUOTA\tRATE\tTOKENS\tCEILING\tCLAIMED\tPENDING\tGRANTED\tHELD\tREASON")
	for _, n := range ex.Nodes {
		shards := fmt.Sprintf("%d/%d", n.Report.OwnedShards, n.Report.ShardCount)
		if !n.Planned {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\tnot in its last plan\n", display(n.Report.Node), shards)
			continue
		}
		e := n.Entry
		reason := display(e.Reason)
		if reason == "" {
			reason = "-"
		}
		tokens := "-"
		if e.Rate.PerSecond > 0 {
			tokens = strconv.Itoa(e.Tokens)
		}
		ceiling := admin.Count(e.Ceiling)
		if e.Adaptive > 0 {
			ceiling = strconv.Itoa(e.Adaptive) + " of " + ceiling
		}
		if e.Hold > 0 {
			reason += " (retry in " + e.Hold.Round(100*time.Millisecond).String() + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", display(n.Report.Node), shards, admin.Count(e.Quota), shortRate(e.Rate), tokens,
			ceiling, e.Claimed, e.Pending, e.Granted, e.Held, reason)
	}
	return w.Flush()
}

// shortRate is a rate for a table column: "20/s:10" (rate, burst), or
// "-" for none.
func shortRate(r backpressure.Rate) string {
	if r.PerSecond == 0 {
		return "-"
	}
	return strconv.FormatFloat(r.PerSecond, 'g', -1, 64) + "/s:" + strconv.Itoa(r.Burst)
}

func deadList(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	rows, err := s.ListDead(ctx, outbox.ListDeadParams{Namespace: a.namespace, After: a.after, Limit: a.limit})
	if err != nil {
		var arg *outbox.ArgumentError
		if errors.As(err, &arg) {
			return usagef("dead list: %v", err)
		}
		return err
	}
	if a.json {
		type deadRow struct {
			DispatchKey, Namespace, TaskQueue string
			Attempts                          int
			FinishedAt                        time.Time
			LastError                         string
			Payload                           []byte
		}
		out := make([]deadRow, len(rows))
		for i, r := range rows {
			out[i] = deadRow{r.DispatchKey, r.Namespace, r.TaskQueue, r.Attempts, r.FinishedAt, r.LastError, r.Payload}
		}
		return c.json(out)
	}
	if err := printFaults(ctx, c, s, a.namespace); err != nil {
		return err
	}
	w := table(c.Stdout)
	fmt.Fprintln(w, "KEY\tNAMESPACE\tTASK_QUEUE\tATTEMPTS\tDIED\tLAST_ERROR")
	now := c.now()
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s ago\t%s\n", display(r.DispatchKey), display(r.Namespace), display(r.TaskQueue), r.Attempts,
			admin.Age(now, r.FinishedAt), displayText(oneLine(r.LastError, 80)))
	}
	return w.Flush()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func deadAction(ctx context.Context, c Config, s admin.Store, a *cmdArgs, done string,
	act func(context.Context, admin.Store, admin.DeadSelection) (int, error)) error {
	// checkArgs (checkSelection) has refused a selection that is not
	// exactly one of keys, -namespace and -all.
	sel := admin.DeadSelection{Keys: a.rest, Namespace: a.namespace, All: a.all, DryRun: a.dryRun}
	n, err := act(ctx, s, sel)
	if err != nil {
		return fmt.Errorf("%s %d before: %w", done, n, err)
	}
	if a.dryRun {
		_, err = fmt.Fprintf(c.Stdout, "would be %s: %d\n", done, n)
		return err
	}
	_, err = fmt.Fprintf(c.Stdout, "%s: %d\n", done, n)
	return err
}

func setting(ctx context.Context, c Config, s admin.Store, set admin.Setting) error {
	if err := (backpressure.Route{Namespace: set.Namespace}).Validate(); err != nil {
		return usagef("%v", err)
	}
	fresh, err := unknown(ctx, s, set.Namespace)
	if err != nil {
		return err
	}
	got, err := admin.Apply(ctx, s, set)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.Stdout, "%s: %s (settings version %d)\n", display(got.Namespace), settingsText(got), got.Version)
	if err == nil && fresh {
		_, err = fmt.Fprintf(c.Stdout, "note: %s has no rows and had no shared settings (check the name); the setting applies to its rows when they come\n", display(got.Namespace))
	}
	return err
}

func setValue(what string) func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	return func(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
		set := admin.Setting{Namespace: a.rest[0]}
		v := a.rest[1]
		if err := parseValue(what, v, &set); err != nil {
			return err
		}
		err := setting(ctx, c, s, set)
		if errors.Is(err, backpressure.ErrInvalidConfig) {
			return usagef("set %s %s %s: %v", what, display(a.rest[0]), v, err)
		}
		return err
	}
}

func stats(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return c.json(st)
	}
	w := table(c.Stdout)
	fmt.Fprintln(w, "PENDING\tSCHEDULED\tCLAIMED\tEXPIRED\tSETTLED\tDEAD\tTOTAL")
	fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%d\n", st.Pending, st.Scheduled, st.Claimed, st.Expired, st.Settled, st.Dead, st.Total)
	return w.Flush()
}

func nodes(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	reps, err := s.NodeReports(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return c.json(reps)
	}
	if len(reps) == 0 {
		_, err := fmt.Fprintln(c.Stdout, "no live node reports (dispatchers report with Options.Operate)")
		return err
	}
	w := table(c.Stdout)
	fmt.Fprintln(w, "NODE\tSHARDS\tWORKERS\tBUSY\tSWEEPS/S\tROWS/S\tSETTINGS\tREPORTED")
	now := c.now()
	for _, r := range reps {
		if r.Fault != "" {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\tUNREADABLE: %s\t%s ago\n", display(r.Node), displayText(oneLine(r.Fault, 60)), admin.Age(now, r.ReportedAt))
			continue
		}
		settings := nodeSettingsText(r)
		fmt.Fprintf(w, "%s\t%d/%d\t%d\t%d\t%.1f\t%.1f\t%s\t%s ago\n", display(r.Node), r.OwnedShards, r.ShardCount, r.Workers, r.Busy,
			r.SweepsPerSecond, r.RowsPerSecond, settings, admin.Age(now, r.ReportedAt))
	}
	return w.Flush()
}

// osUser is -as's default: the OS user running outboxctl, or $USER, or
// "" when neither is known.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// setAdaptive is set adaptive NAMESPACE (pin N | auto).
func setAdaptive(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	set, err := parseAdaptiveArgs(a.rest)
	if err != nil {
		return err
	}
	err = setting(ctx, c, s, set)
	if errors.Is(err, backpressure.ErrInvalidConfig) {
		return usagef("set adaptive %s: %v", strings.Join(a.rest, " "), err)
	}
	return err
}

// parseAdaptiveArgs reads NAMESPACE (pin N | auto).
func parseAdaptiveArgs(args []string) (admin.Setting, error) {
	switch {
	case len(args) == 2 && args[1] == "auto":
		return admin.Setting{Namespace: args[0], ClearAdaptivePin: true}, nil
	case len(args) == 3 && args[1] == "pin":
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return admin.Setting{}, usagef("set adaptive: %s is not a number", strconv.Quote(args[2]))
		}
		return admin.Setting{Namespace: args[0], AdaptivePin: &n}, nil
	}
	return admin.Setting{}, usagef("set adaptive NAMESPACE (pin N | auto)")
}

// setRate is set rate NAMESPACE (RATE [burst N] | none | default).
func setRate(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	set, err := parseRateArgs(a.rest)
	if err != nil {
		return err
	}
	return setting(ctx, c, s, set)
}

// audit prints the audit trail, newest first.
func audit(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	es, err := s.Audit(ctx, outbox.AuditParams{Namespace: a.namespace, Before: a.before, Limit: a.limit})
	if err != nil {
		return err
	}
	if a.json {
		return c.json(es)
	}
	if err := printFaults(ctx, c, s, a.namespace); err != nil {
		return err
	}
	if len(es) == 0 {
		_, err := fmt.Fprintln(c.Stdout, "no change recorded")
		return err
	}
	w := table(c.Stdout)
	fmt.Fprintln(w, "ID\tWHEN\tOPERATOR\tACTION\tNAMESPACE\tBEFORE\tAFTER\tROWS\tDETAIL")
	now := c.now()
	for _, e := range es {
		who, ns, rows := display(e.Operator), display(e.Namespace), "-"
		if who == "" {
			who = "(unnamed)"
		}
		if ns == "" {
			ns = "-"
		}
		if e.Action == outbox.ActionRequeue || e.Action == outbox.ActionPurge {
			rows = strconv.Itoa(e.Rows)
		}
		fmt.Fprintf(w, "%d\t%s ago\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, admin.Age(now, e.At), who, display(e.Action), ns,
			auditValue(e.Namespace, e.Before), auditValue(e.Namespace, e.After), rows, orDash(displayText(oneLine(e.Detail, 60))))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(es) == a.limit {
		_, err = fmt.Fprintf(c.Stdout, "(more: outboxctl audit -before %d)\n", es[len(es)-1].ID)
	}
	return err
}

// auditValue is an entry's Before or After for a table: a settings row
// as the SETTINGS column of tenants shows it, other values as they are.
func auditValue(ns, v string) string {
	if strings.HasPrefix(v, "{") {
		set := outbox.NamespaceSettings{Namespace: ns}
		if outbox.DecodeSettings(&set, []byte(v)); set.Fault == "" {
			return settingsText(set)
		}
	}
	return orDash(displayText(oneLine(v, 40)))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
