// Package limits holds the bounds on a route that both the planner (package
// backpressure) and the outbox vocabulary (package outbox, which exports
// them) need: one value, where each package can import it without a cycle.
package limits

// The longest namespace and task queue a route may have, in bytes. The
// bound keeps a route inside one index entry of every store (PostgreSQL's
// B-tree entries hold about 2.7 KB).
const (
	NamespaceBytes = 255
	TaskQueueBytes = 255
)
