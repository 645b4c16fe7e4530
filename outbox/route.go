package outbox

import (
	"errors"
	"fmt"

	"github.com/outboxkit/backpressure/internal/limits"
)

// ErrInvalidRoute reports a route that no store may hold and the planner
// never plans: see [Route.Validate].
var ErrInvalidRoute = errors.New("backpressure: invalid route")

// RouteError describes why [Route.Validate] rejected a route. It matches
// [ErrInvalidRoute].
type RouteError struct {
	Route  Route
	Field  string // "namespace" or "task queue"
	Reason string
}

// Error names the route, the field and why no row may have it.
func (e *RouteError) Error() string {
	return fmt.Sprintf("backpressure: invalid route %q: %s %s", e.Route.String(), e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidRoute].
func (e *RouteError) Is(target error) bool { return target == ErrInvalidRoute }

// Validate is the one rule for what a route is, shared by the planner,
// [backpressure.Config.Quotas] and every store's Enqueue. It returns nil exactly when
//
//   - the namespace is 1 to 255 bytes;
//   - the task queue is 0 to 255 bytes ("" is the
//     namespace's default task queue, a route like any other);
//   - both are valid UTF-8 and hold no NUL byte;
//
// and otherwise a *[RouteError] naming the first field that fails, the
// namespace first. Cost: O(len(Namespace) + len(TaskQueue)).
func (r Route) Validate() error {
	if r.Namespace == "" {
		return &RouteError{Route: r, Field: "namespace", Reason: "is empty"}
	}
	if reason := limits.CheckName(r.Namespace, MaxNamespaceBytes); reason != "" {
		return &RouteError{Route: r, Field: "namespace", Reason: reason}
	}
	if reason := limits.CheckName(r.TaskQueue, MaxTaskQueueBytes); reason != "" {
		return &RouteError{Route: r, Field: "task queue", Reason: reason}
	}
	return nil
}
