package outbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// History: every dispatcher node with history on (dispatch.Operate.History)
// appends, at each of its reports, one [HistoryPoint] per namespace of its
// [NodeReport]'s Counters to a store that implements [Historian]; the
// admin package turns the points into rates, backlogs and a time to drain.

// Bounds of the history.
const (
	// HistoryFull is how long every point is kept: a prune at now keeps
	// every point at or after now − HistoryFull.
	HistoryFull = time.Hour
	// HistoryBucket is the resolution of older points: of the points of
	// one node and namespace older than HistoryFull, a prune keeps the
	// newest of each HistoryBucket-aligned bucket of At (Unix time
	// divided by the bucket).
	HistoryBucket = 5 * time.Minute
	// HistoryRetention bounds the age of a point: a prune at now deletes
	// every point before now − HistoryRetention. After a prune, one node
	// and namespace keeps at most HistoryFull/ReportInterval + 1 points of
	// the last hour plus (HistoryRetention − HistoryFull)/HistoryBucket + 1
	// older ones (1,800 + 277 at a 2 s interval).
	HistoryRetention = 24 * time.Hour
	// MaxHistoryPage is the most points one [Historian.History] call
	// returns, and DefaultHistoryPage the page of a call whose Limit is 0.
	MaxHistoryPage     = 50_000
	DefaultHistoryPage = 20_000
	// MaxHeldReasons is the most reasons one counter's or point's Held
	// map names (the hold reasons are fewer).
	MaxHeldReasons = 16
)

// Historian is an optional extension of [Store]: a bounded history of the
// nodes' per-namespace counters. sqlitestore, pgstore and memstore
// implement it. Every method honours ctx and returns an error matching
// [ErrClosed] on a closed store; a method that returns an error changed
// nothing.
type Historian interface {
	// AppendHistory stores points (at most [MaxReportNamespaces], each
	// valid per [CheckHistoryPoint]) in one statement or transaction. A
	// bad point is an [*ArgumentError] and nothing is stored.
	AppendHistory(ctx context.Context, points []HistoryPoint) error
	// History returns the newest p.Limit points with At at or after
	// p.Since, of namespace p.Namespace ("" for every namespace), oldest
	// first (by At, then Node, then the order they were appended).
	History(ctx context.Context, p HistoryParams) ([]HistoryPoint, error)
	// PruneHistory thins and bounds the stored points as [ThinHistory]
	// does at now, and returns how many it deleted: O(points older than
	// now − HistoryFull).
	PruneHistory(ctx context.Context, now time.Time) (int, error)
}

// HistoryParams selects the points of [Historian.History].
type HistoryParams struct {
	Namespace string    // "" selects every namespace
	Since     time.Time // the zero time selects from the oldest
	// Limit is the most points returned: 1 to [MaxHistoryPage]; 0 means
	// [DefaultHistoryPage].
	Limit int
}

// Check returns p with its default Limit filled in, or an
// [*ArgumentError] of op for a Limit out of range or a namespace no row
// can have.
func (p HistoryParams) Check(op string) (HistoryParams, error) {
	if p.Limit == 0 {
		p.Limit = DefaultHistoryPage
	}
	if p.Limit < 1 || p.Limit > MaxHistoryPage {
		return p, &ArgumentError{Op: op, Arg: "p.Limit", Reason: fmt.Sprintf("%d is outside 0 to %d", p.Limit, MaxHistoryPage)}
	}
	if !utf8.ValidString(p.Namespace) || strings.IndexByte(p.Namespace, 0) >= 0 {
		return p, &ArgumentError{Op: op, Arg: "p.Namespace", Reason: "is not valid UTF-8 without NUL"}
	}
	return p, nil
}

// NamespaceCounters are what one node did for one namespace over the
// interval of its [NodeReport] (since its previous report).
type NamespaceCounters struct {
	Namespace string
	Started   int64 // rows claimed
	Settled   int64 // results written that settled a row
	Failed    int64 // results written that put a row back to retry
	Dead      int64 // results written that dead-lettered a row
	// Held is, by hold reason ([backpressure.HoldReason.String]), the
	// greatest number of rows one of the interval's plans held: at most
	// [MaxHeldReasons] entries.
	Held map[string]int `json:",omitempty"`
	// Backlog is the namespace's pending and claimed rows on the node's
	// shards at its last plan of the interval (Pending + Claimed);
	// BacklogCapped says the plan counted Pending only as deep as it
	// needed, so Backlog is a lower bound.
	Backlog       int
	BacklogCapped bool `json:",omitempty"`
}

// HistoryPoint is one node's counters of one namespace over Interval,
// ending at At (the node's clock).
type HistoryPoint struct {
	Node     string
	At       time.Time
	Interval time.Duration
	NamespaceCounters
}

// StartedPerSecond and SettledPerSecond are the point's rates: its
// counts over its interval (0 for an empty interval).
func (p HistoryPoint) StartedPerSecond() float64 { return perSecond(p.Started, p.Interval) }

// SettledPerSecond: see [HistoryPoint.StartedPerSecond].
func (p HistoryPoint) SettledPerSecond() float64 { return perSecond(p.Settled, p.Interval) }

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// CheckHistoryPoint returns an [*ArgumentError] of op (Arg names
// points[i]) when p is not one a store keeps: a node name as
// [CheckNodeReport] wants, a namespace of valid UTF-8 without NUL, a
// non-zero At, an Interval from 0 to [HistoryRetention], and counters as
// [CheckCounters] wants.
func CheckHistoryPoint(op string, i int, p HistoryPoint) error {
	arg := fmt.Sprintf("points[%d]", i)
	fail := func(field, reason string) error {
		return &ArgumentError{Op: op, Arg: arg + "." + field, Reason: reason}
	}
	switch {
	case p.Node == "" || len(p.Node) > 255 || !utf8.ValidString(p.Node) || strings.IndexByte(p.Node, 0) >= 0:
		return fail("Node", fmt.Sprintf("%q is not 1 to 255 bytes of valid UTF-8 without NUL", p.Node))
	case p.At.IsZero():
		return fail("At", "is the zero time")
	case p.Interval < 0 || p.Interval > HistoryRetention:
		return fail("Interval", fmt.Sprintf("%v is outside 0 to %v", p.Interval, HistoryRetention))
	}
	return checkCounters(op, arg, p.NamespaceCounters)
}

// CheckCounters returns an [*ArgumentError] of op when a report's
// counters are not ones a store accepts: at most [MaxReportNamespaces],
// each with a namespace of valid UTF-8 without NUL, counts and Backlog
// ≥ 0, at most [MaxHeldReasons] held reasons with counts ≥ 0.
func CheckCounters(op string, cs []NamespaceCounters) error {
	if len(cs) > MaxReportNamespaces {
		return &ArgumentError{Op: op, Arg: "r.Counters", Reason: fmt.Sprintf("%d namespaces, more than %d", len(cs), MaxReportNamespaces)}
	}
	for i, c := range cs {
		if err := checkCounters(op, fmt.Sprintf("r.Counters[%d]", i), c); err != nil {
			return err
		}
	}
	return nil
}

func checkCounters(op, arg string, c NamespaceCounters) error {
	fail := func(field, reason string) error {
		return &ArgumentError{Op: op, Arg: arg + "." + field, Reason: reason}
	}
	switch {
	case !utf8.ValidString(c.Namespace) || strings.IndexByte(c.Namespace, 0) >= 0:
		return fail("Namespace", "is not valid UTF-8 without NUL")
	case c.Started < 0 || c.Settled < 0 || c.Failed < 0 || c.Dead < 0 || c.Backlog < 0:
		return fail("Started", "a count is negative")
	case len(c.Held) > MaxHeldReasons:
		return fail("Held", fmt.Sprintf("%d reasons, more than %d", len(c.Held), MaxHeldReasons))
	}
	for reason, n := range c.Held {
		if n < 0 || len(reason) > 64 {
			return fail("Held", fmt.Sprintf("reason %q: %d rows (want ≥ 0, a reason of at most 64 bytes)", reason, n))
		}
	}
	return nil
}

// HistoryBucketOf is the bucket of t that [ThinHistory] keeps one point
// of: Unix nanoseconds divided by [HistoryBucket], rounded down.
func HistoryBucketOf(t time.Time) int64 {
	ns := t.UnixNano()
	b := int64(HistoryBucket)
	q := ns / b
	if ns%b < 0 {
		q--
	}
	return q
}

// ThinHistory returns the points of points (in the order they were
// appended) a prune at now keeps, in their order: every point at or after
// now − [HistoryFull]; of the older ones at or after now −
// [HistoryRetention], the newest (greatest At, the later appended on a
// tie) of each node, namespace and [HistoryBucketOf] bucket; none older.
// O(n log n).
func ThinHistory(points []HistoryPoint, now time.Time) []HistoryPoint {
	full, oldest := now.Add(-HistoryFull), now.Add(-HistoryRetention)
	type key struct {
		node, ns string
		bucket   int64
	}
	newest := map[key]int{}
	for i, p := range points {
		if p.At.Before(full) && !p.At.Before(oldest) {
			k := key{p.Node, p.Namespace, HistoryBucketOf(p.At)}
			if j, ok := newest[k]; !ok || !p.At.Before(points[j].At) {
				newest[k] = i
			}
		}
	}
	keep := make([]int, 0, len(points))
	for i, p := range points {
		switch {
		case !p.At.Before(full):
			keep = append(keep, i)
		case p.At.Before(oldest):
		case newest[key{p.Node, p.Namespace, HistoryBucketOf(p.At)}] == i:
			keep = append(keep, i)
		}
	}
	sort.Ints(keep)
	out := make([]HistoryPoint, len(keep))
	for i, j := range keep {
		out[i] = points[j]
	}
	return out
}

// SortHistory sorts points (in the order they were appended) as
// [Historian.History] returns them: by At, then Node, stably.
func SortHistory(points []HistoryPoint) {
	sort.SliceStable(points, func(i, j int) bool {
		if !points[i].At.Equal(points[j].At) {
			return points[i].At.Before(points[j].At)
		}
		return points[i].Node < points[j].Node
	})
}

// HistoryOf returns the points of report r's counters (one per
// namespace), at r's node, ending at at and covering interval.
func HistoryOf(r NodeReport, at time.Time, interval time.Duration) []HistoryPoint {
	out := make([]HistoryPoint, len(r.Counters))
	for i, c := range r.Counters {
		out[i] = HistoryPoint{Node: r.Node, At: at, Interval: interval, NamespaceCounters: c}
	}
	return out
}
