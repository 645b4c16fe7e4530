package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Operate turns on what a cluster of dispatchers shares through its store
// (see [outbox.Operator]): settings every node applies, and a report each
// node publishes about itself. Both are off unless Options.Operate is set.
//
// Shared settings: the code-supplied Config (the Backpressure's
// configuration when Run starts) stays the default; for every namespace
// with shared settings, a set Quota or Weight replaces the code's entry and
// Paused makes its quota 0 ([outbox.ApplySettings]). The merged
// configuration goes through [backpressure.Backpressure.SetConfig], so it
// is validated exactly as SetConfig validates. A node applies a change
// within SettingsInterval of its commit, plus one statement: at every
// interval it reads the settings' version (one index probe), and the
// settings themselves only when the version moved. A change that does not
// validate (or a settings row the store cannot read) is reported in the
// log (Warn), in [SettingsMetrics] when Options.Metrics implements it,
// and in the node's report, and the node keeps its last good
// configuration; the settings apply as a whole, so one namespace's bad
// value holds back every change until it is fixed. A later valid change
// is applied as usual. Run applies
// the settings once before its first sweep, so a paused namespace is not
// claimed at start-up. While shared settings are on, the dispatcher owns
// the Backpressure's configuration: a SetConfig by the caller during Run
// is replaced at the next change of the shared settings.
//
// Node reports: every ReportInterval the node writes one report (one
// upsert of a row per node, and a delete of long-expired rows) holding its
// name, shards, workers busy, sweeps and rows claimed per second since
// its last report, its settings version and error, and its last plan's
// per-namespace report (at most [outbox.MaxReportNamespaces] namespaces).
// A report expires ReportTTL after it was written, so a stopped node's
// report disappears from [outbox.Operator.NodeReports] by then.
type Operate struct {
	// Node names this node in its reports: 1 to 255 bytes of valid UTF-8
	// without NUL. Required. Two live dispatchers must not share a name
	// (the later report replaces the earlier).
	Node string

	// Store is where settings are read and reports written. Nil uses the
	// dispatcher's store, which must then implement [outbox.Operator].
	Store outbox.Operator

	// SharedSettings turns on the shared settings (see above).
	SharedSettings bool
	// SettingsInterval is how often the node checks the settings'
	// version: 10ms to 1h. 0 means 1s.
	SettingsInterval time.Duration

	// ReportInterval is how often the node writes its report: 100ms to
	// 1h. 0 means 2s; negative turns reports off.
	ReportInterval time.Duration
	// ReportTTL is how long a report stays live: at least 1s and at least
	// ReportInterval. 0 means 3 × ReportInterval (at least 1s).
	ReportTTL time.Duration
}

// SettingsMetrics is an optional extension of [Metrics]: a Metrics that
// implements it hears how shared settings fared. Its methods must not
// block.
type SettingsMetrics interface {
	// SettingsApplied is called when the node applied the shared settings
	// of version.
	SettingsApplied(version int64)
	// SettingsRejected is called when the shared settings of version did
	// not validate (err matches [backpressure.ErrInvalidConfig]) or could
	// not be read; the node keeps its last good configuration.
	SettingsRejected(version int64, err error)
}

// withDefaults checks o and fills in its defaults, given the dispatcher's
// store.
func (o *Operate) withDefaults(store Store) (*Operate, error) {
	c := *o
	if c.Store == nil {
		op, ok := store.(outbox.Operator)
		if !ok {
			return nil, &OptionError{Field: "Operate.Store", Reason: fmt.Sprintf("is nil and the store (%T) does not implement outbox.Operator", store)}
		}
		c.Store = op
	}
	if err := outbox.CheckNodeReport("dispatch.New", outbox.NodeReport{Node: c.Node}, time.Second); err != nil {
		return nil, &OptionError{Field: "Operate.Node", Reason: fmt.Sprintf("%q is not 1 to 255 bytes of valid UTF-8 without NUL", c.Node)}
	}
	switch {
	case c.SettingsInterval == 0:
		c.SettingsInterval = time.Second
	case c.SettingsInterval < 10*time.Millisecond || c.SettingsInterval > time.Hour:
		return nil, &OptionError{Field: "Operate.SettingsInterval", Reason: "must be 10ms to 1h, or 0 for 1s"}
	}
	switch {
	case c.ReportInterval == 0:
		c.ReportInterval = 2 * time.Second
	case c.ReportInterval < 0:
	case c.ReportInterval < 100*time.Millisecond || c.ReportInterval > time.Hour:
		return nil, &OptionError{Field: "Operate.ReportInterval", Reason: "must be 100ms to 1h, 0 for 2s, or negative for no reports"}
	}
	switch {
	case c.ReportTTL == 0:
		c.ReportTTL = max(3*c.ReportInterval, time.Second)
	case c.ReportTTL < time.Second || c.ReportTTL < c.ReportInterval:
		return nil, &OptionError{Field: "Operate.ReportTTL", Reason: "must be at least 1s and at least ReportInterval"}
	}
	return &c, nil
}

// operator is one Run's shared settings and reports.
type operator struct {
	r    *run
	o    *Operate
	base backpressure.Config // the code-supplied configuration, at Run's start

	mu      sync.Mutex
	version int64  // the settings version applied, or last tried
	good    int64  // the settings version last applied
	bad     string // why version did not apply; "" when it did
	plan    backpressure.Plan
	// A version applied while a sweep was in flight is in force only once
	// that sweep has finished (it planned with the configuration before):
	// the report names effective, the newest version every sweep started
	// since runs on. pending waits for finished to reach pendingAt, the
	// sweeps started when it was applied. Sweeps run one at a time.
	effective, pending int64
	pendingAt          int64
	started, finished  int64
	sweeps             int64
	rows               int64
	lastAt             time.Time
	lastSwp            int64
	lastRows           int64
}

func newOperator(r *run, o *Operate) *operator {
	return &operator{r: r, o: o, base: r.d.bp.Config(), version: -1, effective: 0, lastAt: time.Now()}
}

// sweepStarted records that a sweep is about to plan.
func (p *operator) sweepStarted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started++
}

// swept records a finished sweep, for the report: its rows and plan when
// it succeeded.
func (p *operator) swept(rows int, plan backpressure.Plan, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished++
	if p.finished >= p.pendingAt {
		p.effective = max(p.effective, p.pending)
	}
	if err != nil {
		return
	}
	p.sweeps++
	p.rows += int64(rows)
	p.plan = plan
}

// poll applies the shared settings if their version moved since the last
// poll. It returns only ctx's error; the store's are reported.
func (p *operator) poll(ctx context.Context) {
	v, err := p.o.Store.SettingsVersion(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.r.log.Warn("dispatch: reading the shared settings' version failed", "err", err)
		}
		return
	}
	p.mu.Lock()
	same := v == p.version
	p.mu.Unlock()
	if same {
		return
	}
	list, err := p.o.Store.ListSettings(ctx)
	if ctx.Err() != nil {
		return
	}
	read := err == nil
	if read {
		err = p.r.d.bp.SetConfig(outbox.ApplySettings(p.base, list))
		// The list may be newer than v; its own greatest version names it.
		for _, s := range list {
			v = max(v, s.Version)
		}
	}
	m, _ := p.r.m.(SettingsMetrics)
	p.mu.Lock()
	defer p.mu.Unlock()
	if read {
		p.version = v // else read again at the next poll
	}
	if err != nil {
		p.bad = err.Error()
		p.effective = max(p.effective, v) // the version seen; nothing changed
		p.r.log.Warn("dispatch: shared settings rejected; keeping the last good configuration", "version", v, "good_version", p.good, "err", err)
		if m != nil {
			m.SettingsRejected(v, err)
		}
		return
	}
	p.good, p.bad = v, ""
	p.pending, p.pendingAt = v, p.started
	if p.finished >= p.pendingAt { // no sweep in flight
		p.effective = v
	}
	p.r.log.Info("dispatch: shared settings applied", "version", v, "namespaces", len(list))
	if m != nil {
		m.SettingsApplied(v)
	}
}

// report writes the node's report.
func (p *operator) report(ctx context.Context) {
	f := p.r.d.bp.OwnedShards()
	p.r.mu.Lock()
	busy := p.r.outstanding
	p.r.mu.Unlock()
	now := time.Now()
	p.mu.Lock()
	rep := outbox.NodeReport{Node: p.o.Node, OwnedShards: f.OwnedCount(), ShardCount: f.ShardCount(), Workers: p.r.o.Workers, Busy: min(busy, p.r.o.Workers),
		SettingsVersion: p.effective, SettingsError: p.bad}
	if secs := now.Sub(p.lastAt).Seconds(); secs > 0 {
		rep.SweepsPerSecond = float64(p.sweeps-p.lastSwp) / secs
		rep.RowsPerSecond = float64(p.rows-p.lastRows) / secs
	}
	p.lastAt, p.lastSwp, p.lastRows = now, p.sweeps, p.rows
	ns := p.plan.Namespaces
	if len(ns) > outbox.MaxReportNamespaces {
		ns, rep.PlanTruncated = ns[:outbox.MaxReportNamespaces], true
	}
	rep.Plan = make([]outbox.PlanEntry, len(ns))
	for i, n := range ns {
		rep.Plan[i] = outbox.PlanEntryOf(n)
	}
	p.mu.Unlock()
	if err := p.o.Store.PutNodeReport(ctx, rep, p.o.ReportTTL); err != nil && ctx.Err() == nil {
		p.r.log.Warn("dispatch: writing the node report failed", "err", err)
	}
}

// loop polls the settings and writes reports until ctx is done.
func (p *operator) loop(ctx context.Context) {
	var settings, reports <-chan time.Time
	if p.o.SharedSettings {
		t := time.NewTicker(p.o.SettingsInterval)
		defer t.Stop()
		settings = t.C
	}
	if p.o.ReportInterval > 0 {
		t := time.NewTicker(p.o.ReportInterval)
		defer t.Stop()
		reports = t.C
		p.report(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-settings:
			p.poll(ctx)
		case <-reports:
			p.report(ctx)
		}
	}
}
