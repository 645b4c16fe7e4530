// Package validate holds the argument rules every outbox store of this
// module applies before it touches its database: which text a store can
// hold, which dispatch keys can name a row, what a claim, a count, a
// completion, a lease list or a page may ask for. pgstore, sqlitestore and
// the reference store (internal/memstore) all call it, so they cannot
// drift apart, and every error it returns reads the same way:
//
//	pkg: Op: field: what is wrong
//
// e.g. "pgstore: Enqueue: msgs[0].Namespace: is empty", as an
// [*outbox.ArgumentError] or [*outbox.MessageError] (both match
// [outbox.ErrInvalidArgument]).
//
// The store modules are nested modules under this one; the go command
// allows them to import this package because its import path lies under
// the root's (the rule is by path, not by module, as gopls imports
// golang.org/x/tools/internal/...). A store module built against an older
// root release still calls this API, so change it only compatibly: add,
// never rename or remove.
package validate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Call names the package and the method whose arguments are checked: the
// first two parts of every message.
type Call struct {
	Pkg string // "pgstore", "sqlitestore", "memstore"
	Op  string // the method, e.g. "ClaimOutboxRowsScoped"
}

// Arg returns the *outbox.ArgumentError of c for arg.
func (c Call) Arg(arg, reason string) error {
	return &outbox.ArgumentError{Pkg: c.Pkg, Op: c.Op, Arg: arg, Reason: reason}
}

// Argf is Arg with a formatted reason.
func (c Call) Argf(arg, format string, a ...any) error {
	return c.Arg(arg, fmt.Sprintf(format, a...))
}

// Text says why v cannot be stored as text by every store (PostgreSQL
// text holds no NUL byte and only valid UTF-8), or "" when it can. The
// empty string is valid text.
func Text(v string) string {
	switch {
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return "holds a NUL byte"
	}
	return ""
}

// Key says why k can be no row's dispatch key (Enqueue refuses it, as
// [outbox.Message.Validate] does), or "". A call that names rows by key
// refuses such a key rather than treat it as an unknown row.
func Key(k string) string {
	switch {
	case k == "":
		return "is empty"
	case len(k) > outbox.MaxDispatchKeyBytes:
		return fmt.Sprintf("is %d bytes, over the limit of %d", len(k), outbox.MaxDispatchKeyBytes)
	}
	return Text(k)
}

// DispatchKey checks one key named by argument arg.
func (c Call) DispatchKey(arg, k string) error {
	if reason := Key(k); reason != "" {
		return c.Arg(arg, reason)
	}
	return nil
}

// TextArg checks argument arg as Text does.
func (c Call) TextArg(arg, v string) error {
	if reason := Text(v); reason != "" {
		return c.Arg(arg, reason)
	}
	return nil
}

// Messages checks a batch as [outbox.ValidateMessages] does, and names c
// in the *outbox.MessageError it returns.
func (c Call) Messages(msgs []outbox.Message) error {
	err := outbox.ValidateMessages(msgs)
	if me, ok := err.(*outbox.MessageError); ok {
		me.Pkg, me.Op = c.Pkg, c.Op
	}
	return err
}

// Claims checks a claim list against the rule every store keeps: each
// claim's Limit is at least 1, its Route passes
// [outbox.Route.Validate] (a route no row can have), and no route is
// named twice. The first claim that breaks it is reported as
// claims[i].Limit, claims[i].Route.Namespace, claims[i].Route.TaskQueue or
// claims[i].Route. It allocates only when the claims are not in strictly
// ascending route order (a plan's are) or to report an error.
func (c Call) Claims(claims []backpressure.ScopedClaim) error {
	var seen map[backpressure.Route]int // built once the claims leave ascending order
	for i, cl := range claims {
		at := func() string { return elem("claims", i) + "." } // formatted only for an error
		if cl.Limit < 1 {
			return c.Argf(at()+"Limit", "%d is below 1", cl.Limit)
		}
		if err := cl.Route.Validate(); err != nil {
			field, reason := "Route", err.Error()
			if re, ok := err.(*backpressure.RouteError); ok {
				field, reason = "Route.Namespace", re.Reason
				if re.Field == "task queue" {
					field = "Route.TaskQueue"
				}
			}
			return c.Arg(at()+field, reason)
		}
		if seen == nil && i > 0 && claims[i-1].Route.Compare(cl.Route) >= 0 {
			// Out of order: claims[:i] are strictly ascending, so distinct.
			seen = make(map[backpressure.Route]int, len(claims))
			for j := range i {
				seen[claims[j].Route] = j
			}
		}
		if seen != nil {
			if j, dup := seen[cl.Route]; dup {
				return c.Argf(at()+"Route", "%q is also claims[%d]", cl.Route.String(), j)
			}
			seen[cl.Route] = i
		}
	}
	return nil
}

// Positive checks a count's cap or a limit, named by arg: at least 1.
func (c Call) Positive(arg string, n int) error {
	if n < 1 {
		return c.Argf(arg, "%d is below 1", n)
	}
	return nil
}

// CountParams checks p: CapPerRoute at least 1, Namespaces not negative,
// and, for a window (Namespaces ≥ 1), After valid text (it is ignored
// otherwise).
func (c Call) CountParams(p backpressure.CountParams) error {
	if err := c.Positive("p.CapPerRoute", p.CapPerRoute); err != nil {
		return err
	}
	if p.Namespaces < 0 {
		return c.Argf("p.Namespaces", "%d is negative", p.Namespaces)
	}
	if p.Namespaces == 0 {
		return nil
	}
	return c.TextArg("p.After", p.After)
}

// Window is the window rule of a store's ClaimOutboxWindow (see
// [backpressure.OutboxStore]), its arguments gathered: the walk starts
// after After, Namespaces namespaces get a row, those in Skip (sorted,
// distinct) are passed over, and RouteAfter holds the route cursors.
type Window struct {
	After      string
	Namespaces int
	Skip       []string
	RouteAfter map[string]string
}

// WindowClaimer is the method a store's window claim has, for compile-time
// checks and the conformance suite.
type WindowClaimer[R any] interface {
	ClaimOutboxWindow(ctx context.Context, shards backpressure.OwnedShardFraction, window backpressure.CountParams, skip []string, routeAfter map[string]string) ([]R, []backpressure.RouteCount, error)
}

// Window checks ClaimOutboxWindow's arguments — window.Namespaces at least
// 1, window.After valid text, skip sorted and distinct — and gathers them.
// window.CapPerRoute and window.Claimed are ignored.
func (c Call) Window(window backpressure.CountParams, skip []string, routeAfter map[string]string) (Window, error) {
	if err := c.Positive("window.Namespaces", window.Namespaces); err != nil {
		return Window{}, err
	}
	if err := c.TextArg("window.After", window.After); err != nil {
		return Window{}, err
	}
	for i := 1; i < len(skip); i++ {
		if skip[i-1] >= skip[i] {
			return Window{}, c.Argf("skip", "%q at %d is not after %q: not sorted and distinct", skip[i], i, skip[i-1])
		}
	}
	return Window{After: window.After, Namespaces: window.Namespaces, Skip: skip, RouteAfter: routeAfter}, nil
}

// Served returns the namespaces w serves among eligible, the namespaces
// (sorted, distinct, none in Skip) with a claimable row on a route a claim
// would take: the first w.Namespaces of them in the cyclic order after
// w.After, sorted, if more than w.Namespaces are eligible; else nil, and
// the window claim claims nothing. It is the window claim's walk, for a
// store that resolves it outside SQL.
func (w Window) Served(eligible []string) []string {
	if len(eligible) <= w.Namespaces {
		return nil
	}
	first, _ := slices.BinarySearch(eligible, w.After)
	if first < len(eligible) && eligible[first] == w.After {
		first++
	}
	served := append(slices.Clone(eligible[first:]), eligible[:first]...)[:w.Namespaces]
	slices.Sort(served)
	return served
}

// TaskQueue returns the task queue of the route a served namespace's row
// comes from, among the task queues of its eligible routes (sorted,
// distinct, at least one): the first after its route cursor
// w.RouteAfter[namespace], cyclically; the smallest when it has none.
func (w Window) TaskQueue(namespace string, tqs []string) string {
	if cur, ok := w.RouteAfter[namespace]; ok {
		if i := slices.IndexFunc(tqs, func(t string) bool { return t > cur }); i >= 0 {
			return tqs[i]
		}
	}
	return tqs[0]
}

// WindowRoute is the entry of ClaimOutboxWindow's routes for a row of
// route: Count 2 when its namespace had other routes with a claimable
// row, else 1.
func WindowRoute(route backpressure.Route, others bool) backpressure.RouteCount {
	if others {
		return backpressure.RouteCount{Route: route, Count: 2}
	}
	return backpressure.RouteCount{Route: route, Count: 1}
}

// Completions checks a batch for Complete: a valid Outcome, a Retry's or
// Snooze's Delay within 0 to MaxDelay, and every dispatch key a valid key named once.
func (c Call) Completions(cs []outbox.Completion) error {
	for i, cm := range cs {
		switch {
		case cm.Outcome != outbox.Settle && cm.Outcome != outbox.Retry && cm.Outcome != outbox.DeadLetter && cm.Outcome != outbox.Snooze:
			return c.Argf(elem("completions", i)+".Outcome", "%v is not Settle, Retry, DeadLetter or Snooze", cm.Outcome)
		case (cm.Outcome == outbox.Retry || cm.Outcome == outbox.Snooze) && (cm.Delay < 0 || cm.Delay > outbox.MaxDelay):
			return c.Argf(elem("completions", i)+".Delay", "%v is outside 0 to outbox.MaxDelay (%v)", cm.Delay, outbox.MaxDelay)
		}
	}
	return c.uniqueKeys("completions", len(cs), func(i int) string { return cs[i].DispatchKey })
}

// Leases checks a lease list for ExtendLeases: every dispatch key a valid
// key named once.
func (c Call) Leases(ls []outbox.Lease) error {
	return c.uniqueKeys("leases", len(ls), func(i int) string { return ls[i].DispatchKey })
}

// uniqueKeys checks the n dispatch keys key returns, named name[i]: each a
// valid key named once. It formats an argument's name only to report it.
func (c Call) uniqueKeys(name string, n int, key func(int) string) error {
	seen := make(map[string]int, n)
	for i := range n {
		k := key(i)
		if reason := Key(k); reason != "" {
			return c.Arg(elem(name, i)+".DispatchKey", reason)
		}
		if j, dup := seen[k]; dup {
			return c.Argf(elem(name, i)+".DispatchKey", "%q is also %s", k, elem(name, j))
		}
		seen[k] = i
	}
	return nil
}

// elem names element i of the list argument name: "name[i]".
func elem(name string, i int) string {
	return name + "[" + strconv.Itoa(i) + "]"
}

// Keys checks a list of dispatch keys (Requeue's): each a valid key. A key
// may appear more than once.
func (c Call) Keys(keys []string) error {
	for i, k := range keys {
		if reason := Key(k); reason != "" {
			return c.Arg(elem("dispatchKeys", i), reason)
		}
	}
	return nil
}

// Limits of [outbox.ListDeadParams.Limit].
const (
	DefaultListDead = 100
	MaxListDead     = 10_000
)

// ListDead checks p and returns the page size it asks for: p.Limit, or
// DefaultListDead for 0.
func (c Call) ListDead(p outbox.ListDeadParams) (int, error) {
	limit := p.Limit
	switch {
	case limit == 0:
		limit = DefaultListDead
	case limit < 0 || limit > MaxListDead:
		return 0, c.Argf("p.Limit", "%d is not within 1 to %d", p.Limit, MaxListDead)
	}
	if err := c.TextArg("p.Namespace", p.Namespace); err != nil {
		return 0, err
	}
	return limit, c.TextArg("p.After", p.After)
}

// PurgeLimit checks a purge's limit: 0 purges nothing, negative is an
// error.
func (c Call) PurgeLimit(limit int) error {
	if limit < 0 {
		return c.Argf("limit", "%d is negative", limit)
	}
	return nil
}
