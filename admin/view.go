// Package admin is an operator's view of an outbox and its dispatchers:
// per-tenant state (what runs, what waits and why), the nodes' reports,
// dead letters, and the shared settings, as an [http.Handler] a service
// mounts behind its own authentication (as it would net/http/pprof), and
// as the functions outboxctl prints from.
//
// Most callers need only [NewHandler]:
//
//	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", admin.NewHandler(store, admin.Options{})))
//
// It is read-only unless Options.Actions is set. It uses the standard
// library only; its pages are server-rendered html/template, embedded.
package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Store is what the admin view needs of an outbox store: the whole
// [outbox.Store], its [outbox.Operator] extension and its audit trail
// ([outbox.Auditor]). sqlitestore's and pgstore's Stores are all three.
type Store interface {
	outbox.Store
	outbox.Operator
	outbox.Auditor
}

// Tenant is one namespace as an operator sees it: its rows from the table,
// its shared settings, and what the live dispatcher nodes' last plans say
// about it.
type Tenant struct {
	Namespace string
	// Rows is the namespace's rows by state, from the table.
	Rows outbox.NamespaceState
	// Settings are its shared settings (zero Version when it has none).
	// Settings.Fault is set when the store could not read its row or the
	// row does not validate (see outbox.NamespaceSettings).
	Settings outbox.NamespaceSettings
	// Faults says where its shared settings do not apply: the row's Fault
	// ("settings row: …") and each live node's report of the namespace's
	// settings as not applied (outbox.NodeReport.BadSettings), as
	// "node: reason (held)" or "(kept last good)", joined by "; ". "" when
	// they apply everywhere.
	Faults string `json:",omitempty"`
	// Nodes counts the live nodes whose last plan reports the namespace;
	// the fields below are 0 when it is 0.
	Nodes int
	// Quota and Weight are what the nodes apply (the first node's, by
	// name; Mixed is set when nodes disagree, as they do while a change
	// spreads). Quota is backpressure.Unlimited (-1) for no ceiling.
	Quota, Weight int
	// Rate is the cluster-wide rate limit the nodes apply (the first
	// node's, like Quota; the zero Rate: none); Mixed is set too when
	// nodes disagree on it.
	Rate  backpressure.Rate `json:",omitzero"`
	Mixed bool
	// Ceiling is the sum of the nodes' ceilings: the cluster's ceiling on
	// claimed rows (backpressure.Unlimited when any node has none).
	Ceiling int
	// Granted and Held sum the nodes' last plans.
	Granted, Held int
	// Reason is why rows wait, the most pressing over the nodes:
	// "invalid-route", "paused", "at-ceiling", "rate", "budget" (see
	// backpressure.HoldReason), a reason of a newer planner as its plan
	// says it, or "" when no node's plan holds a row for a reason. A
	// namespace paused by its settings says "paused" even before any
	// node's plan does. "adaptive": a downstream's signals lowered its
	// ceiling or hold it (see Adaptive, Hold and [AdaptiveText]).
	Reason string
	// Adaptive is the sum of the adaptive ceilings of the nodes that
	// apply one (dispatch.Options.Adaptive), AdaptiveOf the sum of those
	// nodes' static ceilings (backpressure.Unlimited if one has none):
	// "ceiling Adaptive of AdaptiveOf". Both 0 when no node has one.
	Adaptive   int `json:",omitempty"`
	AdaptiveOf int `json:",omitempty"`
	// Hold is the longest time left of a downstream's Retry-After hold
	// over the nodes' last plans (0: none).
	Hold time.Duration `json:",omitempty"`
}

// reasonRank orders hold reasons by how much they need an operator; see
// rankOf for the reasons it does not list.
var reasonRank = map[string]int{"": 0, "budget": 1, "rate": 2, "adaptive": 3, "at-ceiling": 4, "paused": 5, "invalid-route": 6}

// rankOf is reason's rank: reasonRank's, or for a reason it does not know
// (a newer planner's) the least of a hold, so that it still shows.
func rankOf(reason string) int {
	if r, ok := reasonRank[reason]; ok {
		return r
	}
	return reasonRank["budget"]
}

// TenantsParams selects the page of tenants of [Tenants].
type TenantsParams struct {
	After string // only namespaces after this one, in byte order
	Limit int    // the most tenants: 1 to outbox.MaxNamespacesPage; 0 means outbox.DefaultNamespacesPage
	Cap   int    // the cap of every count (outbox.NamespacesParams.Cap)
}

// TenantsPage is a page of tenants and what it was read from.
type TenantsPage struct {
	Tenants []Tenant
	// More is set when there may be tenants after the last one: pass its
	// Namespace as the next After.
	More  bool
	Nodes []outbox.NodeReport // the live reports the page was built from
	// SettingsTruncated is set when the store holds more settings rows
	// than outbox.MaxSettings (written by other means): the settings of
	// the namespaces after the first MaxSettings are not shown.
	SettingsTruncated bool `json:",omitempty"`
}

// Tenants reads a page of tenants: the namespaces with rows (one
// Namespaces call), those with shared settings but no rows in the page's
// range, and the live node reports. Cost: three store calls, bounded as
// [outbox.Operator] states.
func Tenants(ctx context.Context, s Store, p TenantsParams) (TenantsPage, error) {
	limit := p.Limit
	if limit == 0 {
		limit = outbox.DefaultNamespacesPage
	}
	states, err := s.Namespaces(ctx, outbox.NamespacesParams{After: p.After, Limit: limit, Cap: p.Cap})
	if err != nil {
		return TenantsPage{}, err
	}
	settings, truncated, err := listSettings(ctx, s)
	if err != nil {
		return TenantsPage{}, err
	}
	reports, err := s.NodeReports(ctx)
	if err != nil {
		return TenantsPage{}, err
	}
	page := TenantsPage{More: len(states) == limit, Nodes: reports, SettingsTruncated: truncated}
	byName := map[string]*Tenant{}
	var names []string
	add := func(ns string) *Tenant {
		t, ok := byName[ns]
		if !ok {
			t = &Tenant{Namespace: ns, Rows: outbox.NamespaceState{Namespace: ns}}
			byName[ns] = t
			names = append(names, ns)
		}
		return t
	}
	for _, st := range states {
		add(st.Namespace).Rows = st
	}
	for _, set := range settings {
		// Settings-only namespaces within the page's range: after After,
		// and up to the last row-holding name when the page is full.
		if set.Namespace <= p.After || page.More && set.Namespace > states[len(states)-1].Namespace {
			continue
		}
		add(set.Namespace).Settings = set
	}
	for _, r := range reports {
		for _, e := range r.Plan {
			if t, ok := byName[e.Namespace]; ok {
				t.addPlan(e)
			}
		}
		for _, f := range r.BadSettings {
			if t, ok := byName[f.Namespace]; ok {
				t.addFault(r.Node, f)
			}
		}
	}
	sort.Strings(names)
	for _, ns := range names {
		t := byName[ns]
		t.settle()
		page.Tenants = append(page.Tenants, *t)
	}
	return page, nil
}

func (t *Tenant) addPlan(e outbox.PlanEntry) {
	if t.Nodes == 0 {
		t.Quota, t.Weight, t.Rate = e.Quota, e.Weight, e.Rate
	} else if t.Quota != e.Quota || t.Weight != e.Weight || t.Rate != e.Rate {
		t.Mixed = true
	}
	if e.Adaptive > 0 {
		t.Adaptive += e.Adaptive
		if t.AdaptiveOf == backpressure.Unlimited || e.Ceiling == backpressure.Unlimited {
			t.AdaptiveOf = backpressure.Unlimited
		} else {
			t.AdaptiveOf += e.Ceiling
		}
	}
	t.Hold = max(t.Hold, e.Hold)
	t.Nodes++
	switch {
	case t.Ceiling == backpressure.Unlimited || e.Ceiling == backpressure.Unlimited:
		t.Ceiling = backpressure.Unlimited
	default:
		t.Ceiling += e.Ceiling
	}
	t.Granted += e.Granted
	t.Held += e.Held
	if rankOf(e.Reason) > rankOf(t.Reason) {
		t.Reason = e.Reason
	}
}

// listSettings is s.ListSettings, with the first outbox.MaxSettings rows
// and truncated set when the store holds more.
func listSettings(ctx context.Context, s Store) ([]outbox.NamespaceSettings, bool, error) {
	list, err := s.ListSettings(ctx)
	if errors.Is(err, outbox.ErrTooManySettings) {
		return list, true, nil
	}
	return list, false, err
}

// joinFault joins two faults, either possibly "".
func joinFault(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// addFault records node's report that t's settings did not apply.
func (t *Tenant) addFault(node string, f outbox.SettingsFault) {
	what := "kept last good"
	if f.Held {
		what = "held"
	}
	t.Faults = joinFault(t.Faults, fmt.Sprintf("%s: %s (%s)", node, f.Reason, what))
}

func (t *Tenant) settle() {
	if t.Settings.Fault != "" {
		t.Faults = joinFault("settings row: "+t.Settings.Fault, t.Faults)
	}
	if t.Settings.Paused && reasonRank["paused"] > rankOf(t.Reason) {
		t.Reason = "paused"
	}
}

// AdaptiveText says how a downstream's signals hold t, for a person:
// "held: downstream overloaded, ceiling 7 of 20, retry in 2.1s" (the
// learned ceiling of the static one, and the hold's time left when there
// is one), or "" when no node applies an adaptive ceiling or a hold.
func AdaptiveText(t Tenant) string {
	if t.Adaptive == 0 && t.Hold == 0 {
		return ""
	}
	s := "held: downstream overloaded"
	if t.Adaptive != 0 {
		s += ", ceiling " + Count(t.Adaptive) + " of " + Count(t.AdaptiveOf)
	}
	if t.Hold > 0 {
		s += ", retry in " + t.Hold.Round(100*time.Millisecond).String()
	}
	return s
}

// NodeView is one live node's view of a namespace, for [Why].
type NodeView struct {
	Report outbox.NodeReport // the node's whole report
	// Entry is the namespace's entry in the node's last plan; Planned is
	// false when the plan did not mention it (no rows on the node's shards
	// were counted, or the plan was windowed or truncated).
	Entry   outbox.PlanEntry
	Planned bool
}

// Explanation is what holds one namespace, node by node.
type Explanation struct {
	Tenant Tenant
	Nodes  []NodeView // every live node, by name
	// Routes are the namespace's routes with live rows, by task queue: the
	// first [MaxRoutes], each count capped at [outbox.DefaultCountCap]
	// (see [outbox.RouteState]); RoutesTruncated is set when it has more.
	Routes          []outbox.RouteState
	RoutesTruncated bool `json:",omitempty"`
}

// MaxRoutes is the most routes [Why] reads of a namespace.
const MaxRoutes = outbox.DefaultNamespacesPage

// Why reads what holds namespace: its tenant view and each live node's
// report of it, and its routes. Cost: four store calls; the routes' is
// O(MaxRoutes × (log rows + outbox.DefaultCountCap)) index entries at
// most.
func Why(ctx context.Context, s Store, namespace string) (Explanation, error) {
	if namespace == "" {
		return Explanation{}, &outbox.ArgumentError{Op: "Why", Arg: "namespace", Reason: "is empty"}
	}
	states, err := s.Namespaces(ctx, outbox.NamespacesParams{Namespace: namespace})
	if err != nil {
		return Explanation{}, err
	}
	settings, _, err := listSettings(ctx, s)
	if err != nil {
		return Explanation{}, err
	}
	reports, err := s.NodeReports(ctx)
	if err != nil {
		return Explanation{}, err
	}
	routes, err := s.Routes(ctx, outbox.RoutesParams{Namespace: namespace, Limit: MaxRoutes + 1})
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{Tenant: Tenant{Namespace: namespace, Rows: states[0]}, Routes: routes}
	if len(routes) > MaxRoutes {
		ex.Routes, ex.RoutesTruncated = routes[:MaxRoutes], true
	}
	for _, set := range settings {
		if set.Namespace == namespace {
			ex.Tenant.Settings = set
		}
	}
	for _, r := range reports {
		v := NodeView{Report: r}
		if i, ok := slices.BinarySearchFunc(r.Plan, namespace, func(e outbox.PlanEntry, ns string) int {
			switch {
			case e.Namespace < ns:
				return -1
			case e.Namespace > ns:
				return 1
			}
			return 0
		}); ok {
			v.Entry, v.Planned = r.Plan[i], true
			ex.Tenant.addPlan(r.Plan[i])
		}
		for _, f := range r.BadSettings {
			if f.Namespace == namespace {
				ex.Tenant.addFault(r.Node, f)
			}
		}
		ex.Nodes = append(ex.Nodes, v)
	}
	ex.Tenant.settle()
	return ex, nil
}

// Summary is one sentence saying why ex's namespace waits, for a person.
func (ex Explanation) Summary() string {
	t := ex.Tenant
	switch {
	case t.Settings.Fault != "":
		return "its shared settings row cannot be applied (" + t.Settings.Fault + "): nodes keep its last good settings or hold its rows; set, pause, resume or reset overwrite it"
	case t.Faults != "" && !t.Settings.Paused:
		return "some node does not apply its shared settings (" + t.Faults + ")"
	case t.Settings.Paused:
		return "paused by its shared settings: no node claims its rows until it is resumed"
	case t.Reason == "paused":
		return "its quota is 0 (paused) on some node"
	case t.Reason == "invalid-route":
		return "some of its rows are on a route the planner rejects; they are never claimed"
	case t.Reason == "at-ceiling":
		return fmt.Sprintf("held at its ceiling: %d rows claimed, cluster ceiling %s; rows wait for claimed ones to finish", t.Rows.Claimed, Count(t.Ceiling))
	case t.Reason == "rate":
		return fmt.Sprintf("held by its rate limit: %d rows wait for tokens and start as they accrue", t.Held)
	case t.Reason == "adaptive":
		return AdaptiveText(t) + " (its dispatchers claim no more of its rows than its downstream asked for)"
	case t.Reason == "budget":
		return "has headroom but shared the sweeps' budget with other tenants: its rows come in the next sweeps"
	case t.Reason != "":
		return fmt.Sprintf("held by its nodes' plans, reason %q", t.Reason)
	case t.unknown():
		return "it has no rows and no shared settings: no row of this name was ever enqueued, or all were purged (check the name)"
	case t.Rows.Ready == 0 && t.Rows.Scheduled > 0:
		return "nothing is ready: its pending rows are scheduled for later (a schedule or a retry delay)"
	case t.Rows.Ready == 0:
		return "nothing waits"
	case t.Nodes == 0:
		return "no live node reports it: are dispatchers running (with Options.Operate)?"
	}
	return "nothing holds it: its ready rows are claimed as workers free up"
}

// unknown reports whether t has no rows in any state, no shared settings
// and no node's plan mentions it.
func (t Tenant) unknown() bool {
	r := t.Rows
	return r.Ready+r.Scheduled+r.Claimed+r.Dead+r.Settled == 0 && t.Settings.Version == 0 && t.Nodes == 0
}

// Count renders a quota or ceiling: "unlimited" for backpressure.Unlimited.
func Count(n int) string {
	if n == backpressure.Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// Age renders how long ago t was, at now, in whole seconds (or "-" for a
// zero t).
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Truncate(time.Second).String()
}

// ErrNoKeys reports a dead-letter action that names no rows.
var ErrNoKeys = errors.New("admin: no dead letters selected")

// DeadSelection selects dead letters for [Requeue] and [Purge]: the rows
// named by Keys, or every dead row of Namespace, or with All every dead
// row. Exactly one of the three must be given.
type DeadSelection struct {
	Keys      []string
	Namespace string
	All       bool
	// DryRun counts the rows selected without changing them.
	DryRun bool
}

// maxDeadAction is the most dead rows one Requeue or Purge call goes
// through: a selection of more needs several calls.
const maxDeadAction = 100_000

// Requeue moves the dead rows sel selects back to pending and returns how
// many (with DryRun, how many it would). A namespace or everything is
// walked a page of 1,000 keys at a time (ListDead then Store.Requeue), at
// most 100,000 rows per call; rows dead-lettered meanwhile may or may not
// be included. Each Store.Requeue records an audit entry (the operator
// ctx names, [outbox.WithOperation]; the selection; the rows it moved).
// An invalid selection is an [*outbox.ArgumentError].
func Requeue(ctx context.Context, s Store, sel DeadSelection) (int, error) {
	return deadAction(withAction(ctx, outbox.ActionRequeue, sel), s, sel, s.Requeue)
}

// Purge deletes the dead rows sel selects, as [Requeue] walks them, with
// [outbox.Operator.DeleteDead], each call recording an audit entry.
func Purge(ctx context.Context, s Store, sel DeadSelection) (int, error) {
	return deadAction(withAction(ctx, outbox.ActionPurge, sel), s, sel, s.DeleteDead)
}

// withAction returns ctx with its Operation naming a dead-letter action
// and sel.
func withAction(ctx context.Context, action string, sel DeadSelection) context.Context {
	op := outbox.OperationFrom(ctx)
	op.Action, op.Namespace, op.Detail = action, sel.Namespace, ""
	switch {
	case sel.All:
		op.Detail = "every dead letter"
	case sel.Namespace != "":
		op.Detail = "every dead letter of " + strconv.Quote(sel.Namespace)
	}
	return outbox.WithOperation(ctx, op)
}

func deadAction(ctx context.Context, s Store, sel DeadSelection, act func(context.Context, []string) (int, error)) (int, error) {
	given := 0
	for _, b := range []bool{len(sel.Keys) > 0, sel.Namespace != "", sel.All} {
		if b {
			given++
		}
	}
	if given != 1 {
		return 0, &outbox.ArgumentError{Op: "dead-letter action", Arg: "selection", Reason: "give dispatch keys, a namespace, or all (exactly one)"}
	}
	if len(sel.Keys) > 0 {
		if len(sel.Keys) > outbox.MaxKeys {
			return 0, &outbox.ArgumentError{Op: "dead-letter action", Arg: "keys", Reason: fmt.Sprintf("%d keys, more than %d", len(sel.Keys), outbox.MaxKeys)}
		}
		if sel.DryRun {
			n := 0
			for _, k := range sel.Keys {
				r, err := s.Get(ctx, k)
				if errors.Is(err, outbox.ErrNotFound) {
					continue
				}
				if err != nil {
					return 0, err
				}
				if r.State == outbox.StateDead {
					n++
				}
			}
			return n, nil
		}
		return act(ctx, sel.Keys)
	}
	total, after := 0, ""
	for total < maxDeadAction {
		page, err := s.ListDead(ctx, outbox.ListDeadParams{Namespace: sel.Namespace, After: after, Limit: 1000})
		if err != nil {
			return total, err
		}
		if len(page) == 0 {
			break
		}
		keys := make([]string, len(page))
		for i, r := range page {
			keys[i] = r.DispatchKey
		}
		after = keys[len(keys)-1]
		if sel.DryRun {
			total += len(keys)
		} else {
			n, err := act(ctx, keys)
			total += n
			if err != nil {
				return total, err
			}
		}
		if len(page) < 1000 {
			break
		}
	}
	return total, nil
}

// Setting is one change of a namespace's shared settings, for [Apply].
type Setting struct {
	Namespace string
	// Pause and Resume set or clear Paused (Pause wins if both are set).
	Pause, Resume bool
	// Quota and Weight, when not nil, set those; ClearQuota and
	// ClearWeight remove them (the code's value stands again).
	Quota, Weight           *int
	ClearQuota, ClearWeight bool
	// Rate, when not nil, sets the namespace's rate limit (the zero Rate:
	// none, whatever the code says); ClearRate removes it.
	Rate      *backpressure.Rate
	ClearRate bool
	// AdaptivePin, when not nil, pins the namespace's adaptive ceiling on
	// every node with adaptive ceilings on (outbox.NamespaceSettings);
	// ClearAdaptivePin lets the nodes' controllers steer it again.
	AdaptivePin      *int
	ClearAdaptivePin bool
	// Reset removes every override first: the namespace runs on the
	// code's configuration (the row stays, empty, so its version shows
	// the change).
	Reset bool
}

// Apply reads namespace's shared settings, changes them as c says, checks
// that the result validates whole ([outbox.CheckSettings]: a quota of -5
// is refused, paused or not), and stores it, recording an audit entry
// with the operator ctx names ([outbox.WithOperation]) and the action
// ([Setting.Action]). A row the store could not read (Fault set) is
// overwritten: the change starts from no settings. A change that does
// not validate is an error matching [backpressure.ErrInvalidConfig] and
// stores nothing.
func Apply(ctx context.Context, s Store, c Setting) (outbox.NamespaceSettings, error) {
	op := outbox.OperationFrom(ctx)
	op.Action, op.Namespace = c.Action(), c.Namespace
	ctx = outbox.WithOperation(ctx, op)
	if err := (backpressure.Route{Namespace: c.Namespace}).Validate(); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	all, _, err := listSettings(ctx, s)
	if err != nil {
		return outbox.NamespaceSettings{}, err
	}
	cur := outbox.NamespaceSettings{Namespace: c.Namespace}
	for _, set := range all {
		if set.Namespace == c.Namespace && set.Fault == "" && !c.Reset {
			cur = set
		}
	}
	cur = c.change(cur)
	if err := outbox.CheckSettings(cur); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	return s.PutSettings(ctx, cur)
}

// change returns cur changed as c says.
func (c Setting) change(cur outbox.NamespaceSettings) outbox.NamespaceSettings {
	switch {
	case c.Pause:
		cur.Paused = true
	case c.Resume:
		cur.Paused = false
	}
	if c.Quota != nil {
		q := *c.Quota
		cur.Quota = &q
	}
	if c.ClearQuota {
		cur.Quota = nil
	}
	if c.Weight != nil {
		w := *c.Weight
		cur.Weight = &w
	}
	if c.ClearWeight {
		cur.Weight = nil
	}
	if c.Rate != nil {
		r := *c.Rate
		cur.Rate = &r
	}
	if c.ClearRate {
		cur.Rate = nil
	}
	if c.AdaptivePin != nil {
		p := *c.AdaptivePin
		cur.AdaptivePin = &p
	}
	if c.ClearAdaptivePin {
		cur.AdaptivePin = nil
	}
	return cur
}

// Action names c for the audit trail: outbox.ActionReset, ActionPause,
// ActionResume, or ActionSet for a change of values.
func (c Setting) Action() string {
	switch {
	case c.Reset:
		return outbox.ActionReset
	case c.Pause:
		return outbox.ActionPause
	case c.Resume:
		return outbox.ActionResume
	}
	return outbox.ActionSet
}
