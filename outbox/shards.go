package outbox

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// Unlimited is the quota that means "no ceiling": a namespace with this
// quota is never held at a ceiling, only by the sweep's budget.
const Unlimited = -1

// MaxShardCount is the largest virtual shard space a fraction may have:
// 2^20 shards, enough for a million nodes owning one shard each, and small
// enough that [AllShards] holds every id in 8 MiB.
const MaxShardCount = 1 << 20

// OwnedShardFraction is this node's share of the cluster's virtual shard
// space: the ids of the shards it owns out of ShardCount. It is kept as a
// ratio of integers, never a float, so that ceilings are exact.
//
// The zero value owns no shards of a zero-sized space; its Ceiling is 0 for
// every finite quota. Build one with [NewOwnedShardFraction]. A value is
// immutable and safe for concurrent use.
type OwnedShardFraction struct {
	owned      []int // sorted ascending, unique, each in [0, shardCount)
	shardCount int
}

// NewOwnedShardFraction returns the fraction for a node that owns the given
// shard ids out of shardCount virtual shards. The ids may come in any order;
// they are copied.
//
// It returns an error matching [ErrInvalidShards] if shardCount is outside
// [1, MaxShardCount], if an id lies outside [0, shardCount) or if an id
// appears twice; the error is a *[ShardError] naming the offending id where
// there is one.
func NewOwnedShardFraction(owned []int, shardCount int) (OwnedShardFraction, error) {
	if err := checkShardCount(shardCount); err != nil {
		return OwnedShardFraction{}, err
	}
	ids := slices.Clone(owned)
	slices.Sort(ids)
	for i, id := range ids {
		if id < 0 || id >= shardCount {
			return OwnedShardFraction{}, &ShardError{Shard: id, ShardCount: shardCount, Reason: "shard id out of range"}
		}
		if i > 0 && ids[i-1] == id {
			return OwnedShardFraction{}, &ShardError{Shard: id, ShardCount: shardCount, Reason: "shard id owned twice"}
		}
	}
	if ids == nil {
		ids = []int{}
	}
	return OwnedShardFraction{owned: ids, shardCount: shardCount}, nil
}

// AllShards returns the fraction that owns every one of shardCount shards:
// a single-node cluster. It returns an error matching [ErrInvalidShards] if
// shardCount is outside [1, MaxShardCount], as [NewOwnedShardFraction] does.
func AllShards(shardCount int) (OwnedShardFraction, error) {
	if err := checkShardCount(shardCount); err != nil {
		return OwnedShardFraction{}, err
	}
	ids := make([]int, shardCount)
	for i := range ids {
		ids[i] = i
	}
	return OwnedShardFraction{owned: ids, shardCount: shardCount}, nil
}

// checkShardCount returns the error for a shard count outside
// [1, MaxShardCount], or nil.
func checkShardCount(n int) error {
	switch {
	case n < 1:
		return &ShardError{Shard: -1, ShardCount: n, Reason: "shard count must be at least 1"}
	case n > MaxShardCount:
		return &ShardError{Shard: -1, ShardCount: n, Reason: "shard count must be at most MaxShardCount (" + strconv.Itoa(MaxShardCount) + ")"}
	}
	return nil
}

// Owned returns a copy of the owned shard ids in ascending order.
func (f OwnedShardFraction) Owned() []int { return slices.Clone(f.owned) }

// OwnedCount returns the number of owned shards.
func (f OwnedShardFraction) OwnedCount() int { return len(f.owned) }

// ShardCount returns the size of the cluster's virtual shard space.
func (f OwnedShardFraction) ShardCount() int { return f.shardCount }

// Owns reports whether the node owns shard id. Cost: O(log owned).
func (f OwnedShardFraction) Owns(id int) bool {
	_, ok := slices.BinarySearch(f.owned, id)
	return ok
}

// String returns the fraction as "owned/shardCount", e.g. "12/64".
func (f OwnedShardFraction) String() string {
	return strconv.Itoa(len(f.owned)) + "/" + strconv.Itoa(f.shardCount)
}

// Equal reports whether f and g own the same shards of the same space.
func (f OwnedShardFraction) Equal(g OwnedShardFraction) bool {
	return f.shardCount == g.shardCount && slices.Equal(f.owned, g.owned)
}

// Ceiling returns this node's share of a cluster-wide quota:
//
//	Ceiling(q) = ⌈q × owned / shardCount⌉
//
// exactly, for every non-negative int quota. It returns 0 when no shard is
// owned, whatever the quota (the node
// has no rows to claim), q when every shard is, and otherwise [Unlimited]
// for Unlimited. A negative quota other than Unlimited has no
// meaning; Ceiling returns 0 for it (paused), and [backpressure.New] rejects it earlier.
//
// For any partition of the shards over k nodes that own at least one shard
// each, q ≤ Σ Ceiling(q) ≤ q + k − 1.
func (f OwnedShardFraction) Ceiling(quota int) int {
	if len(f.owned) == 0 || f.shardCount <= 0 {
		return 0
	}
	if quota == Unlimited {
		return Unlimited
	}
	if quota <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(quota), uint64(len(f.owned)))
	n := uint64(f.shardCount)
	// hi < n because owned ≤ shardCount, so Div64 cannot panic.
	q, r := bits.Div64(hi, lo, n)
	if r != 0 {
		q++
	}
	// q ≤ quota because owned ≤ shardCount, so it fits in an int.
	if q > math.MaxInt {
		return math.MaxInt
	}
	return int(q)
}

// ShardFor returns the virtual shard of a dispatch key: the 32-bit FNV-1a
// hash of the key's bytes (offset basis 2166136261, prime 16777619), reduced
// modulo shardCount:
//
//	ShardFor(k, n) = FNV-1a-32(k) mod n
//
// The algorithm is fixed forever: stores place rows with it, and a dispatcher
// written in another language must compute the same shard. It returns 0 when
// shardCount < 1.
func ShardFor(dispatchKey string, shardCount int) int {
	if shardCount < 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(dispatchKey); i++ {
		h ^= uint32(dispatchKey[i])
		h *= 16777619
	}
	return int(uint64(h) % uint64(shardCount))
}
