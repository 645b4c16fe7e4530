// Package limits holds the bounds on a route that both the planner (package
// backpressure) and the outbox vocabulary (package outbox, which exports
// them) need, and the route name rule both check with (names.go: outbox's
// Route.Validate explains a refusal, the planner's hot path only asks
// whether a name passes): one value and one rule, where each package can
// import them.
package limits

// The longest namespace and task queue a route may have, in bytes. The
// bound keeps a route inside one index entry of every store (PostgreSQL's
// B-tree entries hold about 2.7 KB).
const (
	NamespaceBytes = 255
	TaskQueueBytes = 255
)

// Bounds on the planner's settings that a caller may size, shared by package
// backpressure (which states them in its docs) and cmd/bpsim's scenario
// checks.
const (
	// Weight is the largest weight Config.Weights accepts: it keeps the
	// planner's exact fractions within int64.
	Weight = 1 << 20
	// RatePerSecond bounds Rate.PerSecond (a billion rows a second).
	RatePerSecond = 1e9
	// Burst bounds Rate.Burst: a bucket's tokens stay exact in a float64.
	Burst = 1 << 30
)
