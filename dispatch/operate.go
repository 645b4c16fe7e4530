package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
// Paused makes its quota 0 (applySettings). A node applies a
// change within SettingsInterval of its commit, plus one statement: at
// every interval it reads the settings' version (one index probe), and the
// settings themselves only when the version moved. Run reads and applies
// the settings before its first sweep, so a paused namespace is not
// claimed at start-up; while they cannot be read (the store down) Run
// claims nothing, and retries after Options.ErrorBackoff.
//
// Settings are read and applied per namespace, and a setting that cannot
// be read never loosens a limit. Each namespace's settings are checked
// alone ([outbox.CheckSettings]); a namespace whose row the store could
// not read (Fault set: JSON null, an array, a field of the wrong type) or
// whose values do not validate keeps its last good settings on a node that
// applied some, and is held (as paused) on a node that has none (one that
// started while the row was bad), until a write fixes the row; every other
// namespace's settings apply. Each such namespace is reported, named with
// its fault: in the log (Warn), in [SettingsMetrics] when Options.Metrics
// implements it (SettingsRejected with an [*outbox.SettingsFault]), and in
// the node's report (BadSettings, summed up in SettingsError). Settings
// the store cannot list at all (the store failing) after Run's first read
// change nothing: the node keeps its configuration, reports the error likewise, and reads them
// again at the next interval.
//
// A store holds at most [outbox.MaxSettings] namespaces with settings and
// returns no more; only writes by other means (SQL) can leave more rows.
// A node that finds more (ListSettings' [outbox.ErrTooManySettings])
// reports it (SettingsTruncated, the log) and re-reads the settings at
// every interval while it lasts. It cannot know the settings of the
// namespaces after the last row returned, so it does not loosen their
// limits: each keeps its last good settings, and every other such
// namespace it can name is held: those of the code's Config, of its last
// plan, and of the store's namespaces with rows (up to MaxSettings of them,
// read with [outbox.Operator.Namespaces] at every interval). The one
// exposure left: rows of a namespace never seen before, enqueued after the
// node's last read, can be claimed until the next interval.
//
// While shared settings are on, the dispatcher owns the Backpressure's
// configuration: a SetConfig by the caller during Run is replaced at the
// next change of the shared settings.
//
// Node reports: every ReportInterval the node writes one report (one
// upsert of a row per node, and a delete of long-expired rows) holding its
// name, shards, workers busy, sweeps and rows claimed per second since
// its last report, per-namespace counters over that interval (rows
// started, settled, failed, dead, held by reason, and the backlog; at most
// [outbox.MaxReportNamespaces] namespaces), its settings version, error and bad settings (at most
// [outbox.MaxReportNamespaces] namespaces), and its last plan's
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

	// History appends, at every report, one [outbox.HistoryPoint] per
	// namespace of the report's Counters (at most
	// [outbox.MaxReportNamespaces]) to Store, which must then implement
	// [outbox.Historian], and prunes the history
	// ([outbox.Historian.PruneHistory]) at most once a minute. It needs
	// reports on.
	History bool

	historian outbox.Historian // Store's, when History is set
}

// SettingsMetrics is an optional extension of [Metrics]: a Metrics that
// implements it hears how shared settings fared. Its methods must not
// block.
type SettingsMetrics interface {
	// SettingsApplied is called when the node applied the shared settings
	// of version: every namespace's, except those SettingsRejected then
	// names.
	SettingsApplied(version int64)
	// SettingsRejected is called once per namespace whose settings of
	// version were not applied, with an [*outbox.SettingsFault] naming it
	// (matching [outbox.ErrBadSettings]; Held says the node holds its rows
	// rather than keeping its last good settings); and, with the store's
	// error, when the settings could not be read at all (the node then
	// keeps its configuration).
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
	if c.History {
		h, ok := c.Store.(outbox.Historian)
		switch {
		case !ok:
			return nil, &OptionError{Field: "Operate.History", Reason: fmt.Sprintf("is set and the store (%T) does not implement outbox.Historian", c.Store)}
		case c.ReportInterval < 0:
			return nil, &OptionError{Field: "Operate.History", Reason: "is set with reports off (a negative ReportInterval)"}
		}
		c.historian = h
	}
	return &c, nil
}

// operator is one Run's shared settings and reports.
type operator struct {
	r    *run
	o    *Operate
	base backpressure.Config // the code-supplied configuration, at Run's start

	// last is each namespace's last good settings, as applied; only poll
	// (one goroutine) uses it.
	last map[string]outbox.NamespaceSettings
	// pins is the adaptive ceilings the applied settings pin
	// (NamespaceSettings.AdaptivePin); only poll uses it.
	pins map[string]int

	mu        sync.Mutex
	version   int64                  // the settings version applied, or last tried
	good      int64                  // the settings version last applied
	bad       string                 // why version did not apply, or what of it did not; "" when all of it did
	faults    []outbox.SettingsFault // the namespaces of version whose settings did not apply, by namespace
	truncated bool                   // the store held more settings rows than it returned
	plan      backpressure.Plan
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
	counts             nsTally   // per-namespace counters since the last report
	prunedAt           time.Time // when appendHistory last pruned; only report uses it
}

func newOperator(r *run, o *Operate) *operator {
	return &operator{r: r, o: o, base: r.d.bp.Config(), version: -1, effective: 0, lastAt: time.Now(), counts: nsTally{}}
}

// sweepStarted records that a sweep is about to plan.
func (p *operator) sweepStarted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started++
}

// swept records a finished sweep, for the report: its rows and plan when
// it succeeded.
func (p *operator) swept(rows []outbox.Row, plan backpressure.Plan, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished++
	if p.finished >= p.pendingAt {
		p.effective = max(p.effective, p.pending)
	}
	if err != nil {
		return
	}
	p.counts.sweptRows(rows, plan)
	p.sweeps++
	p.rows += int64(len(rows))
	p.plan = plan
}

// first polls the shared settings until one poll has read them, waiting
// Options.ErrorBackoff between failed reads, before Run's first sweep: a
// node that has never read the settings knows no pause, so it claims
// nothing until it has (an unreadable setting never loosens a limit). It
// returns false if ctx is done first.
func (p *operator) first(ctx context.Context) bool {
	for failures := 1; !p.poll(ctx); failures++ {
		t := time.NewTimer(p.r.o.ErrorBackoff.Delay(failures, rand.Float64()))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return true
}

// poll applies the shared settings if their version moved since the last
// poll (at every poll while the store holds more rows than it returns).
// It reports whether it read them (or found their version unchanged); the
// store's errors are reported, not returned.
func (p *operator) poll(ctx context.Context) bool {
	v, err := p.o.Store.SettingsVersion(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.r.log.Warn("dispatch: reading the shared settings' version failed", "err", err)
		}
		return false
	}
	p.mu.Lock()
	same := v == p.version && !p.truncated
	p.mu.Unlock()
	if same {
		return true
	}
	list, err := p.o.Store.ListSettings(ctx)
	if ctx.Err() != nil {
		return false
	}
	truncated := errors.Is(err, outbox.ErrTooManySettings) && len(list) > 0
	if err != nil && !truncated {
		p.unread(v, err)
		return false
	}
	// The list may be newer than v; its own greatest version names it.
	for _, s := range list {
		v = max(v, s.Version)
	}
	p.apply(ctx, v, list, truncated)
	return true
}

// unread reports settings of version v that could not be read (or, should
// it happen, a configuration SetConfig refused): the node keeps its
// configuration, and reads them again at the next poll.
func (p *operator) unread(v int64, err error) {
	m, _ := p.r.m.(SettingsMetrics)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bad = err.Error()
	p.effective = max(p.effective, v) // the version seen; nothing changed
	p.r.log.Warn("dispatch: shared settings rejected; keeping the last good configuration", "version", v, "good_version", p.good, "err", err)
	if m != nil {
		m.SettingsRejected(v, err)
	}
}

// apply applies list, the settings of version v, namespace by namespace
// ([resolveSettings]); truncated says the store holds more rows than list.
func (p *operator) apply(ctx context.Context, v int64, list []outbox.NamespaceSettings, truncated bool) {
	eff, next, faults := resolveSettings(list, p.last)
	if truncated {
		eff, faults = p.holdUnread(ctx, eff, next, faults, list[len(list)-1].Namespace)
	}
	slices.SortFunc(faults, func(a, b outbox.SettingsFault) int { return strings.Compare(a.Namespace, b.Namespace) })
	if err := p.r.d.bp.SetConfig(applySettings(p.base, eff)); err != nil {
		// Not expected: every setting applied passed outbox.CheckSettings,
		// whose rules do not depend on the rest of the configuration.
		p.unread(v, err)
		return
	}
	p.last = next
	p.applyPins(eff)
	m, _ := p.r.m.(SettingsMetrics)
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := v != p.version || truncated != p.truncated
	p.version, p.good, p.faults, p.truncated = v, v, faults, truncated
	p.bad = settingsSummary(faults, truncated)
	p.pending, p.pendingAt = v, p.started
	if p.finished >= p.pendingAt { // no sweep in flight
		p.effective = v
	}
	if !changed {
		return
	}
	p.r.log.Info("dispatch: shared settings applied", "version", v, "namespaces", len(list), "bad_namespaces", len(faults))
	if truncated {
		p.r.log.Warn("dispatch: the store holds more shared settings rows than it returns; the namespaces after the last one read keep their last good settings or are held",
			"version", v, "read", len(list), "last_read", list[len(list)-1].Namespace)
	}
	for i, f := range faults {
		if i == maxFaultLogs {
			p.r.log.Warn("dispatch: more namespaces' shared settings not applied", "version", v, "more", len(faults)-i)
			break
		}
		p.r.log.Warn("dispatch: a namespace's shared settings not applied; never loosening its limits", "version", v, "namespace", f.Namespace,
			"held", f.Held, "fault", f.Reason)
	}
	if m != nil {
		m.SettingsApplied(v)
		for i := range faults {
			m.SettingsRejected(v, &faults[i])
		}
	}
}

// applyPins pins the adaptive ceilings the settings eff pin, and lets the
// controller steer again those they no longer pin (keeping what it
// learned). Nothing without Options.Adaptive.
func (p *operator) applyPins(eff []outbox.NamespaceSettings) {
	a := p.r.d.adapt
	if a == nil {
		return
	}
	next := map[string]int{}
	for _, s := range eff {
		if s.AdaptivePin != nil {
			next[s.Namespace] = *s.AdaptivePin
		}
	}
	for ns, n := range next {
		if p.pins[ns] != n {
			_ = p.r.d.PinAdaptiveCeiling(ns, n) // CheckSettings bounds it as Pin does
		}
	}
	for ns := range p.pins {
		if _, ok := next[ns]; !ok {
			a.unpin(ns)
		}
	}
	p.pins = next
}

// maxFaultLogs is the most namespaces' faults one version logs one by one.
const maxFaultLogs = 20

// resolveSettings returns the settings a node applies for list: each
// namespace's own when they validate ([outbox.CheckSettings]), else its
// last good settings (from last), else a hold (paused). next is each
// namespace's last good settings after list, and faults the namespaces
// whose own settings did not apply (Held when there were none to keep).
// A namespace in last but not in list (its row deleted) has no settings.
func resolveSettings(list []outbox.NamespaceSettings, last map[string]outbox.NamespaceSettings) (eff []outbox.NamespaceSettings, next map[string]outbox.NamespaceSettings, faults []outbox.SettingsFault) {
	eff = make([]outbox.NamespaceSettings, 0, len(list))
	next = make(map[string]outbox.NamespaceSettings, len(list))
	for _, s := range list {
		err := outbox.CheckSettings(s)
		if err == nil {
			eff, next[s.Namespace] = append(eff, s), s
			continue
		}
		f := outbox.SettingsFault{Namespace: s.Namespace, Version: s.Version, Reason: s.Fault}
		if f.Reason == "" {
			f.Reason = err.Error()
		}
		if good, ok := last[s.Namespace]; ok {
			eff, next[s.Namespace] = append(eff, good), good
		} else {
			eff, f.Held = append(eff, outbox.NamespaceSettings{Namespace: s.Namespace, Paused: true}), true
		}
		faults = append(faults, f)
	}
	return eff, next, faults
}

// holdUnread completes eff when the store holds more settings rows than
// it returned (the first outbox.MaxSettings in byte order, the last of
// them lastRead): the settings of every namespace after lastRead are
// unknown. Each such namespace keeps its last good settings when the node
// has them, and is held otherwise when the node knows its name: the code's
// configuration names it, its last plan counted rows of it, or the store
// has rows of it ([unreadNamespaces]).
func (p *operator) holdUnread(ctx context.Context, eff []outbox.NamespaceSettings, next map[string]outbox.NamespaceSettings, faults []outbox.SettingsFault, lastRead string) ([]outbox.NamespaceSettings, []outbox.SettingsFault) {
	const unread = "not read: the store holds more shared settings rows than outbox.MaxSettings"
	for ns, good := range p.last {
		if _, ok := next[ns]; !ok && ns > lastRead {
			eff, next[ns] = append(eff, good), good
			faults = append(faults, outbox.SettingsFault{Namespace: ns, Version: good.Version, Reason: unread})
		}
	}
	held := map[string]bool{}
	for _, ns := range p.unreadNamespaces(ctx, lastRead) {
		if _, ok := next[ns]; !ok && !held[ns] {
			held[ns] = true
			eff = append(eff, outbox.NamespaceSettings{Namespace: ns, Paused: true})
			faults = append(faults, outbox.SettingsFault{Namespace: ns, Reason: unread, Held: true})
		}
	}
	return eff, faults
}

// maxUnreadPages bounds the pages of namespaces unreadNamespaces reads.
const maxUnreadPages = outbox.MaxSettings / outbox.MaxNamespacesPage

// unreadNamespaces returns the names after lastRead the node knows: those
// of the code's configuration, of its last plan, and of the store's
// namespaces with rows (at most maxUnreadPages pages of them, each count
// capped at 1). A read that fails is logged; the names found stand.
func (p *operator) unreadNamespaces(ctx context.Context, lastRead string) []string {
	var names []string
	add := func(ns string) {
		if ns > lastRead {
			names = append(names, ns)
		}
	}
	for ns := range p.base.Quotas {
		add(ns)
	}
	for ns := range p.base.Weights {
		add(ns)
	}
	p.mu.Lock()
	for _, n := range p.plan.Namespaces {
		add(n.Namespace)
	}
	p.mu.Unlock()
	after := lastRead
	for range maxUnreadPages {
		page, err := p.o.Store.Namespaces(ctx, outbox.NamespacesParams{After: after, Limit: outbox.MaxNamespacesPage, Cap: 1})
		if err != nil {
			if ctx.Err() == nil {
				p.r.log.Warn("dispatch: reading the namespaces whose shared settings were not read failed", "err", err)
			}
			break
		}
		for _, st := range page {
			add(st.Namespace)
		}
		if len(page) < outbox.MaxNamespacesPage {
			break
		}
		after = page[len(page)-1].Namespace
	}
	return names
}

// settingsSummary is the node report's SettingsError for faults.
func settingsSummary(faults []outbox.SettingsFault, truncated bool) string {
	var b strings.Builder
	if truncated {
		b.WriteString("the store holds more shared settings rows than outbox.MaxSettings; ")
	}
	if len(faults) == 0 {
		return strings.TrimSuffix(b.String(), "; ")
	}
	fmt.Fprintf(&b, "settings of %d namespaces not applied", len(faults))
	for i, f := range faults {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		what := "kept last good"
		if f.Held {
			what = "held"
		}
		fmt.Fprintf(&b, "; %q (%s): %s", f.Namespace, what, f.Reason)
	}
	return b.String()
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
		SettingsVersion: p.effective, SettingsError: p.bad, SettingsTruncated: p.truncated}
	if len(p.faults) > 0 {
		rep.BadSettings = slices.Clone(p.faults[:min(len(p.faults), outbox.MaxReportNamespaces)])
	}
	if secs := now.Sub(p.lastAt).Seconds(); secs > 0 {
		rep.SweepsPerSecond = float64(p.sweeps-p.lastSwp) / secs
		rep.RowsPerSecond = float64(p.rows-p.lastRows) / secs
	}
	rep.Counters, rep.CountersTruncated = p.counts.take()
	rep.CountersInterval = now.Sub(p.lastAt)
	p.lastAt, p.lastSwp, p.lastRows = now, p.sweeps, p.rows
	ns := p.plan.Namespaces
	if len(ns) > outbox.MaxReportNamespaces {
		ns, rep.PlanTruncated = ns[:outbox.MaxReportNamespaces], true
	}
	rep.Plan = make([]outbox.PlanEntry, len(ns))
	for i, n := range ns {
		rep.Plan[i] = planEntryOf(n)
	}
	p.mu.Unlock()
	if err := p.o.Store.PutNodeReport(ctx, rep, p.o.ReportTTL); err != nil && ctx.Err() == nil {
		p.r.log.Warn("dispatch: writing the node report failed", "err", err)
	}
	p.appendHistory(ctx, rep, now)
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
