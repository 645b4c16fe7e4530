package backpressure

import (
	"github.com/outboxkit/backpressure/internal/limits"
	"github.com/outboxkit/backpressure/outbox"
)

// The store contract and the values the planner shares with every store
// are defined in package outbox, which depends on nothing of the planner's;
// these aliases name them here, where the planner's API uses them. Each
// one's contract is stated once, on the outbox name.

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

// Unlimited is the quota that means "no ceiling" (outbox.Unlimited).
const Unlimited = outbox.Unlimited

// MaxShardCount is the largest virtual shard space a fraction may have,
// 2^20 shards (outbox.MaxShardCount).
const MaxShardCount = outbox.MaxShardCount

// OwnedShardFraction is this node's share of the cluster's virtual shard
// space: [outbox.OwnedShardFraction].
type OwnedShardFraction = outbox.OwnedShardFraction

// NewOwnedShardFraction returns the fraction for a node that owns the given
// shard ids out of shardCount virtual shards, or an error matching
// [ErrInvalidShards]: [outbox.NewOwnedShardFraction].
func NewOwnedShardFraction(owned []int, shardCount int) (OwnedShardFraction, error) {
	return outbox.NewOwnedShardFraction(owned, shardCount)
}

// AllShards returns the fraction that owns every shard of shardCount, or
// an error matching [ErrInvalidShards]: [outbox.AllShards].
func AllShards(shardCount int) (OwnedShardFraction, error) {
	return outbox.AllShards(shardCount)
}

// ShardFor returns the virtual shard of a dispatch key, FNV-1a-32(k) mod
// shardCount: [outbox.ShardFor].
func ShardFor(dispatchKey string, shardCount int) int {
	return outbox.ShardFor(dispatchKey, shardCount)
}

// Apportionment is the rule that turns a namespace's cluster-wide quota into
// one node's ceiling: [outbox.Apportionment].
type Apportionment = outbox.Apportionment

// The apportionment rules: [outbox.ApportionCeil], [outbox.ApportionShares].
const (
	ApportionCeil   = outbox.ApportionCeil
	ApportionShares = outbox.ApportionShares
)

// The longest namespace and task queue a route may have, in bytes
// (outbox.MaxNamespaceBytes, outbox.MaxTaskQueueBytes).
const (
	maxNamespaceBytes = limits.NamespaceBytes
	maxTaskQueueBytes = limits.TaskQueueBytes
)

// validRoute reports whether r.Validate() is nil, allocating nothing: the
// planner checks every route of every sweep with it.
func validRoute(r Route) bool { return limits.ValidRoute(r.Namespace, r.TaskQueue) }
