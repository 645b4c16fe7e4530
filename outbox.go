package backpressure

import (
	"github.com/outboxkit/backpressure/internal/limits"
	"github.com/outboxkit/backpressure/outbox"
)

// The store contract: the interface a store implements for the planner to
// sweep it, its optional extensions, and the route every row is claimed
// by. They are defined in package outbox, which depends on nothing of the
// planner's; these aliases name them here, where the planner's API uses
// them. Each one's contract is stated once, on the outbox name.

// Route is one namespace's task queue: [outbox.Route].
type Route = outbox.Route

// RouteCount is a count of rows on one route: [outbox.RouteCount].
type RouteCount = outbox.RouteCount

// RouteError describes why Route.Validate rejected a route:
// [outbox.RouteError]. It matches [ErrInvalidRoute].
type RouteError = outbox.RouteError

// ErrInvalidRoute reports a route that no store may hold and the planner
// never plans (outbox.ErrInvalidRoute).
var ErrInvalidRoute = outbox.ErrInvalidRoute

// ScopedClaim asks a store to claim at most Limit rows of one route:
// [outbox.ScopedClaim].
type ScopedClaim = outbox.ScopedClaim

// OutboxStore is the durable outbox a dispatcher drains: [outbox.OutboxStore].
type OutboxStore[R any] = outbox.OutboxStore[R]

// CountParams says what a [Counter] counts: [outbox.CountParams].
type CountParams = outbox.CountParams

// Counter is an optional extension of [OutboxStore] that counts a window
// of namespaces, or both counts at once: [outbox.Counter].
type Counter = outbox.Counter

// TxSweeper is an optional extension of [OutboxStore] that runs a whole
// sweep in one transaction: [outbox.TxSweeper].
type TxSweeper[R any] = outbox.TxSweeper[R]

// The longest namespace and task queue a route may have, in bytes
// (outbox.MaxNamespaceBytes, outbox.MaxTaskQueueBytes).
const (
	maxNamespaceBytes = limits.NamespaceBytes
	maxTaskQueueBytes = limits.TaskQueueBytes
)

// validRoute reports whether r.Validate() is nil, allocating nothing: the
// planner checks every route of every sweep with it.
func validRoute(r Route) bool { return limits.ValidRoute(r.Namespace, r.TaskQueue) }
