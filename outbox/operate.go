package outbox

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Operator is an optional extension of [Store] for the people who run the
// outbox: per-namespace state read from the table, the settings every
// dispatcher node shares, and the nodes' own reports. sqlitestore and
// pgstore implement it; outboxctl and the admin package are built on it.
//
// Every method honours ctx and returns an error matching [ErrClosed] on a
// closed store; a method that returns an error changed nothing.
type Operator interface {
	// Namespaces returns the state of the namespaces p selects, in byte
	// order of their names: one namespace (p.Namespace), or a page of
	// the namespaces that have rows in any state after p.After. Every
	// count is capped at p.Cap (see [NamespaceState]), so one call reads
	// at most O(namespaces returned × (log rows + 6 × cap)) index entries,
	// never the whole table.
	Namespaces(ctx context.Context, p NamespacesParams) ([]NamespaceState, error)

	// Routes returns the live (pending or claimed) rows of the routes of
	// namespace p.Namespace, one [RouteState] per task queue that has live
	// rows, after p.After in byte order, at most p.Limit of them. Each
	// route reads at most p.Cap of its live rows (see [RouteState]), so
	// one call reads at most O(routes returned × (log rows + cap)) index
	// entries, never the whole table.
	Routes(ctx context.Context, p RoutesParams) ([]RouteState, error)

	// DeleteDead deletes the dead rows among dispatchKeys (at most
	// [MaxKeys]) and returns how many it deleted; keys that are not
	// dead are left alone. A deleted key may be enqueued again.
	DeleteDead(ctx context.Context, dispatchKeys []string) (int, error)

	// PutSettings stores s as the shared settings of s.Namespace,
	// replacing any earlier ones (a row that could not be read included),
	// with a new Version greater than every version before it. The store
	// checks the namespace (as [Route.Validate] does) and the
	// values as a whole ([CheckSettings]: a Quota of -5 is refused,
	// paused or not): a setting that does not validate is an
	// [*ArgumentError] that also matches [ErrInvalidConfig].
	// A new namespace beyond [MaxSettings] is an [*ArgumentError] that
	// also matches [ErrTooManySettings]. Settings with every field unset
	// remove the namespace's overrides (the row stays, so its version
	// still shows the change).
	PutSettings(ctx context.Context, s NamespaceSettings) (NamespaceSettings, error)

	// ListSettings returns every namespace's shared settings in byte order
	// of namespaces: at most [MaxSettings] rows, one statement. A row the
	// store cannot read, or whose values do not validate (only writes by
	// other means than PutSettings, such as SQL, leave one), does not fail
	// the call: it is returned with its Fault set (see
	// [NamespaceSettings]). When the store holds more rows than
	// MaxSettings (again only by other means), it returns the first
	// MaxSettings of them together with an error matching
	// [ErrTooManySettings]: the list is then good but incomplete.
	ListSettings(ctx context.Context) ([]NamespaceSettings, error)

	// SettingsVersion returns the greatest Version of the shared settings,
	// 0 when there are none: one index probe, so a dispatcher can poll it
	// cheaply and read ListSettings only when it changed.
	SettingsVersion(ctx context.Context) (int64, error)

	// PutNodeReport stores r as node r.Node's report, replacing its
	// earlier one, stamped by the store's clock (ReportedAt) and valid for
	// ttl (ExpiresAt); it also deletes reports that expired more than
	// ttl ago. r.Node must be 1 to 255 bytes of valid UTF-8 without NUL,
	// ttl at least 1s.
	PutNodeReport(ctx context.Context, r NodeReport, ttl time.Duration) error

	// NodeReports returns the reports that have not expired, by node name:
	// at most [MaxNodeReports], one statement. A report the store cannot
	// read (written by other means) does not fail the call: it is
	// returned with its Fault set and only Node, ReportedAt and ExpiresAt.
	NodeReports(ctx context.Context) ([]NodeReport, error)
}

// Bounds of the [Operator] calls.
const (
	// MaxKeys is the most dispatch keys one DeleteDead (or Requeue
	// through an operator tool) names.
	MaxKeys = 10_000
	// MaxNamespacesPage is the most namespaces one Namespaces call
	// returns.
	MaxNamespacesPage = 1_000
	// DefaultNamespacesPage is the page size of a Namespaces call whose
	// Limit is 0.
	DefaultNamespacesPage = 100
	// DefaultCountCap is the cap of every count of a Namespaces call
	// whose Cap is 0.
	DefaultCountCap = 10_000
	// MaxCountCap is the largest Cap a Namespaces call accepts.
	MaxCountCap = 1_000_000
	// MaxSettings is the most namespaces with shared settings a store
	// keeps: a PutSettings for a new namespace beyond it fails with
	// [ErrTooManySettings], and ListSettings returns at most this many.
	MaxSettings = 10_000
	// MaxNodeReports is the most live node reports NodeReports returns.
	MaxNodeReports = 1_000
	// MaxReportNamespaces is the most namespaces one NodeReport's Plan
	// carries; a store refuses a report with more.
	MaxReportNamespaces = 1_000
)

// NamespacesParams selects the namespaces of [Operator.Namespaces].
type NamespacesParams struct {
	// Namespace, when not "", selects that namespace alone: one state is
	// returned, all zero if it has no rows. After and Limit are then
	// ignored.
	Namespace string
	// After pages: only namespaces greater than After (in byte order),
	// the last name of the previous page; "" starts at the first.
	After string
	// Limit is the most namespaces returned: 1 to [MaxNamespacesPage];
	// 0 means [DefaultNamespacesPage].
	Limit int
	// Cap bounds every count: a count that reaches Cap is reported as
	// Cap, with Capped set. 1 to [MaxCountCap]; 0 means
	// [DefaultCountCap].
	Cap int
}

// NamespaceState is one namespace's rows by state, read from the outbox
// table at one instant on the store's clock. Each count is exact below the
// call's cap and equal to the cap (with Capped set) at or above it.
type NamespaceState struct {
	Namespace string
	Ready     int // claimable now: pending rows whose run-at has passed, and claimed rows whose lease expired
	Scheduled int // pending, claimable later (a schedule or a retry delay)
	Claimed   int // claimed with a live lease
	Dead      int
	Settled   int
	// ReadySince is the earliest time a ready row became claimable (its
	// run-at, or the end of an expired lease): the age of the oldest
	// ready row is now − ReadySince. Zero when nothing is ready.
	ReadySince time.Time
	// Capped is set when some count reached the cap.
	Capped bool
}

// RoutesParams selects the routes of [Operator.Routes].
type RoutesParams struct {
	// Namespace is the namespace whose routes are read; it must be set.
	Namespace string
	// After pages: only task queues greater than After (in byte order),
	// the last task queue of the previous page. "" starts at the first,
	// which is the default task queue "" when it has live rows; set
	// Started to page past it.
	After   string
	Started bool
	// Limit is the most routes returned: 1 to [MaxNamespacesPage]; 0
	// means [DefaultNamespacesPage].
	Limit int
	// Cap bounds the live rows read per route: 1 to [MaxCountCap]; 0
	// means [DefaultCountCap].
	Cap int
}

// Check returns p with its defaults filled in, or an [*ArgumentError] of
// op for an empty namespace, a Limit or Cap out of range, or a name no
// row can have. Stores call it first.
func (p RoutesParams) Check(op string) (RoutesParams, error) {
	if p.Namespace == "" {
		return p, &ArgumentError{Op: op, Arg: "p.Namespace", Reason: "is empty"}
	}
	n, err := NamespacesParams{Namespace: p.Namespace, After: p.After, Limit: p.Limit, Cap: p.Cap}.Check(op)
	if err != nil {
		return p, err
	}
	p.Limit, p.Cap = n.Limit, n.Cap
	return p, nil
}

// RouteState is one route's live rows, read from the outbox table at one
// instant on the store's clock. The counts are exact when the route has
// fewer than the call's cap live rows. Otherwise Capped is set and they
// count the first cap live rows of the route's index (their sum is the
// cap): each is then a lower bound.
type RouteState struct {
	TaskQueue string
	Ready     int // pending rows whose run-at has passed, and claimed rows whose lease expired
	Scheduled int // pending, claimable later
	Claimed   int // claimed with a live lease
	Capped    bool
}

// NamespaceSettings are one namespace's shared settings: overrides of the
// code-supplied [backpressure.Config] that every dispatcher node with
// shared settings enabled applies. A nil field is not set: the code's
// value stands.
type NamespaceSettings struct {
	Namespace string
	// Quota overrides Config.Quotas[Namespace] (≥ 0, or
	// [Unlimited]; 0 pauses as a quota does).
	Quota *int `json:",omitempty"`
	// Weight overrides Config.Weights[Namespace] (1 to 2^20, the bound
	// [backpressure.Config].Weights accepts).
	Weight *int `json:",omitempty"`
	// Paused holds every row of the namespace (the effective quota is
	// 0) whatever Quota says, until cleared.
	Paused bool `json:",omitempty"`
	// Rate overrides Config.Rates[Namespace]: rows started per second
	// cluster-wide, with a burst, validated as [Rate] is
	// (PerSecond above 0 to 1e9 with Burst 1 to 2^30; the zero Rate lifts
	// the limit for the namespace).
	Rate *Rate `json:",omitempty"`
	// AdaptivePin pins the namespace's adaptive ceiling on every
	// dispatcher node with adaptive ceilings on (dispatch.Options.Adaptive)
	// at this many rows, 1 to [MaxAdaptivePin] (the planner still caps it
	// at the node's static ceiling); nil lets each node's controller
	// steer it.
	AdaptivePin *int `json:",omitempty"`

	// Fault, set only by ListSettings, says why the namespace's row
	// cannot be applied: it is not a JSON object of these fields (JSON
	// null, an array, a field of the wrong type or null) or its values
	// do not validate ([CheckSettings]). Quota, Weight, Paused and Rate
	// are then unset and mean nothing. A dispatcher never loosens a limit
	// for such a row: it keeps the namespace's last good settings, or
	// holds its rows (as paused) when it has none. A PutSettings of the
	// namespace overwrites the row.
	Fault string `json:",omitempty"`

	// Version and UpdatedAt are set by the store on PutSettings.
	Version   int64
	UpdatedAt time.Time
}

// Empty reports whether s sets nothing (a faulty row is not empty).
func (s NamespaceSettings) Empty() bool {
	return s.Quota == nil && s.Weight == nil && !s.Paused && s.Rate == nil && s.Fault == ""
}

// NodeReport is what a dispatcher node publishes about itself into its
// store (see [Operator.PutNodeReport]): what the table does not know.
type NodeReport struct {
	Node        string
	OwnedShards int // shards this node owns
	ShardCount  int
	Workers     int // the dispatcher's Options.Workers
	Busy        int // workers holding a row when the report was made

	SweepsPerSecond float64 // over the interval since the node's previous report
	RowsPerSecond   float64 // rows claimed per second, likewise

	// SettingsVersion is the newest version of the shared settings the
	// node has read and applied: every sweep the node started since plans
	// with it (a sweep in flight when it was applied has finished), except
	// for the namespaces of BadSettings. SettingsError, when not "", says
	// what did not apply: a summary of BadSettings, or why the settings
	// could not be read at all (the node then runs on its last good
	// configuration, of an older version).
	SettingsVersion int64  `json:",omitempty"`
	SettingsError   string `json:",omitempty"`
	// BadSettings are the namespaces whose settings the node could not
	// apply, by namespace, at most [MaxReportNamespaces]: each keeps its
	// last good settings on the node, or is held (Held) when it has none.
	BadSettings []SettingsFault `json:",omitempty"`
	// SettingsTruncated is set when the store held more settings rows
	// than [MaxSettings]: the node holds the namespaces it could not read
	// (see dispatch.Operate).
	SettingsTruncated bool `json:",omitempty"`

	// Fault, set only by NodeReports, says why the store could not read
	// the node's report; every other field but Node, ReportedAt and
	// ExpiresAt is then zero.
	Fault string `json:",omitempty"`

	// Plan is the per-namespace report of the node's last successful
	// plan, sorted by namespace, at most [MaxReportNamespaces] entries;
	// PlanTruncated is set when the plan had more.
	Plan          []PlanEntry
	PlanTruncated bool `json:",omitempty"`

	// Counters are what the node did per namespace over CountersInterval
	// (since its previous report), sorted by namespace, at most
	// [MaxReportNamespaces] entries; CountersTruncated is set when more
	// namespaces had counts.
	Counters          []NamespaceCounters `json:",omitempty"`
	CountersInterval  time.Duration       `json:",omitempty"`
	CountersTruncated bool                `json:",omitempty"`

	// ReportedAt and ExpiresAt are set by the store, on its clock.
	ReportedAt time.Time
	ExpiresAt  time.Time
}

// PlanEntry is one namespace of a [NodeReport]'s plan: the fields of its
// [backpressure.NamespaceReport] an operator reads, with the reason as
// text ([backpressure.HoldReason.String]).
type PlanEntry struct {
	Namespace string
	Quota     int // cluster-wide quota, or Unlimited (-1); 0 means paused
	Weight    int
	Ceiling   int // this node's ceiling, or Unlimited (-1)
	Claimed   int
	Pending   int
	Granted   int
	Held      int
	Reason    string `json:",omitempty"` // "at-ceiling", "budget", "rate", "paused", "invalid-route", "adaptive" (backpressure.HoldReason.String); "" when nothing is held
	Capped    bool   `json:",omitempty"` // Pending and Held are lower bounds
	// Rate is the namespace's cluster-wide rate limit the node applied
	// (the zero Rate: none), and Tokens the whole tokens its bucket held
	// on the node when the plan was made.
	Rate   Rate `json:",omitzero"`
	Tokens int  `json:",omitempty"`
	// Adaptive is the namespace's adaptive ceiling on the node as the
	// planner applied it (never above Ceiling; 0: none), and Hold the time
	// left of a downstream's Retry-After hold when the plan was made (0:
	// none); see backpressure.NamespaceReport.
	Adaptive int           `json:",omitempty"`
	Hold     time.Duration `json:",omitempty"`
}

// Check returns p with its defaults filled in (Limit
// [DefaultNamespacesPage], Cap [DefaultCountCap]), or an [*ArgumentError]
// of op for a Limit or Cap out of range or a name no row can have (not
// valid UTF-8, holding a NUL byte). Stores call it first.
func (p NamespacesParams) Check(op string) (NamespacesParams, error) {
	fail := func(arg, reason string) error { return &ArgumentError{Op: op, Arg: arg, Reason: reason} }
	if p.Limit == 0 {
		p.Limit = DefaultNamespacesPage
	}
	if p.Cap == 0 {
		p.Cap = DefaultCountCap
	}
	switch {
	case p.Limit < 1 || p.Limit > MaxNamespacesPage:
		return p, fail("p.Limit", fmt.Sprintf("%d is outside 0 to %d", p.Limit, MaxNamespacesPage))
	case p.Cap < 1 || p.Cap > MaxCountCap:
		return p, fail("p.Cap", fmt.Sprintf("%d is outside 0 to %d", p.Cap, MaxCountCap))
	}
	for _, f := range []struct{ arg, v string }{{"p.Namespace", p.Namespace}, {"p.After", p.After}} {
		switch {
		case !utf8.ValidString(f.v):
			return p, fail(f.arg, "is not valid UTF-8")
		case strings.IndexByte(f.v, 0) >= 0:
			return p, fail(f.arg, "holds a NUL byte")
		}
	}
	return p, nil
}

// CheckNodeReport returns an [*ArgumentError] of op when r or ttl is not
// one [Operator.PutNodeReport] accepts: a node name of 1 to 255 bytes of
// valid UTF-8 without NUL, at most [MaxReportNamespaces] plan entries and
// bad settings, counters as [CheckCounters] wants, finite SweepsPerSecond and RowsPerSecond (not NaN nor
// ±Inf), no Fault, a ttl of at least 1s.
func CheckNodeReport(op string, r NodeReport, ttl time.Duration) error {
	fail := func(arg, reason string) error { return &ArgumentError{Op: op, Arg: arg, Reason: reason} }
	switch {
	case r.Node == "" || len(r.Node) > 255 || !utf8.ValidString(r.Node) || strings.IndexByte(r.Node, 0) >= 0:
		return fail("r.Node", fmt.Sprintf("%q is not 1 to 255 bytes of valid UTF-8 without NUL", r.Node))
	case len(r.Plan) > MaxReportNamespaces:
		return fail("r.Plan", fmt.Sprintf("%d namespaces, more than %d", len(r.Plan), MaxReportNamespaces))
	case len(r.BadSettings) > MaxReportNamespaces:
		return fail("r.BadSettings", fmt.Sprintf("%d namespaces, more than %d", len(r.BadSettings), MaxReportNamespaces))
	case !finite(r.SweepsPerSecond):
		return fail("r.SweepsPerSecond", fmt.Sprintf("%v is not a finite number", r.SweepsPerSecond))
	case !finite(r.RowsPerSecond):
		return fail("r.RowsPerSecond", fmt.Sprintf("%v is not a finite number", r.RowsPerSecond))
	case r.Fault != "":
		return fail("r.Fault", "is set; only NodeReports sets it")
	case r.CountersInterval < 0:
		return fail("r.CountersInterval", fmt.Sprintf("%v is negative", r.CountersInterval))
	case ttl < time.Second:
		return fail("ttl", fmt.Sprintf("%v is below 1s", ttl))
	}
	return CheckCounters(op, r.Counters)
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
