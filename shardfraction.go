package backpressure

import "github.com/outboxkit/backpressure/outbox"

// Owned shards and ceilings: a node's share of the virtual shard space,
// the shard of a key, and the rule that turns a cluster-wide quota into one
// node's ceiling. They are defined in package outbox (stores filter claims
// by owned shards); these aliases name them here. Each one's contract is
// stated once, on the outbox name.

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
