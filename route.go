package backpressure

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The longest namespace and task queue a route may have, in bytes. Every
// store accepts exactly the routes [ValidateRoute] accepts, so a row a store
// holds is a route the planner can plan; the bound keeps a route inside one
// index entry of every store (PostgreSQL's B-tree entries hold about 2.7 KB).
const (
	MaxNamespaceBytes = 255
	MaxTaskQueueBytes = 255
)

// ErrInvalidRoute reports a route that no store may hold and the planner
// never plans: see [ValidateRoute].
var ErrInvalidRoute = errors.New("backpressure: invalid route")

// RouteError describes why [ValidateRoute] rejected a route. It matches
// [ErrInvalidRoute].
type RouteError struct {
	Route  Route
	Field  string // "namespace" or "task queue"
	Reason string
}

func (e *RouteError) Error() string {
	return fmt.Sprintf("backpressure: invalid route %q: %s %s", e.Route.String(), e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidRoute].
func (e *RouteError) Is(target error) bool { return target == ErrInvalidRoute }

// ValidateRoute is the one rule for what a route is, shared by the planner,
// [Config.Quotas] and every store's Enqueue:
//
//   - the namespace is 1 to [MaxNamespaceBytes] bytes;
//   - the task queue is 0 to [MaxTaskQueueBytes] bytes: "" is the
//     namespace's default task queue, a route like any other;
//   - both are valid UTF-8 and hold no NUL byte.
//
// It returns nil or a [*RouteError]. Cost: O(len(namespace) + len(task queue)).
func ValidateRoute(r Route) error {
	if r.Namespace == "" {
		return &RouteError{Route: r, Field: "namespace", Reason: "is empty"}
	}
	if reason := checkName(r.Namespace, MaxNamespaceBytes); reason != "" {
		return &RouteError{Route: r, Field: "namespace", Reason: reason}
	}
	if reason := checkName(r.TaskQueue, MaxTaskQueueBytes); reason != "" {
		return &RouteError{Route: r, Field: "task queue", Reason: reason}
	}
	return nil
}

// checkName returns why s cannot name a namespace or task queue, or "".
func checkName(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("is %d bytes, over the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "holds a NUL byte"
	}
	return ""
}
