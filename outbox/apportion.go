package outbox

import (
	"math/bits"
	"strconv"
)

// Apportionment is the rule by which a node turns a namespace's
// cluster-wide quota into its own per-node ceiling, from the shards it owns
// alone (no central counter). Every node of a cluster must use the same
// rule: the bounds below hold over the ceilings of one rule.
//
// Both rules give 0 to a node that owns no shard or for a quota of 0
// (paused), [Unlimited] for Unlimited, q to a node that owns every shard,
// and at least 1 to a node that owns a shard when q ≥ 1, so that its rows
// never starve. For every partition of the S shards over nodes, of which
// k own at least one shard, and every q ≥ 1:
//
//	max(q, k) ≤ Σ ceilings ≤ q + k − 1
//
// Σ ceilings ≥ k is unavoidable: with q < k nodes owning shards, no rule
// that lets every such node claim can keep the cluster at q; only a
// central counter can.
//
// The zero value is [ApportionCeil], the seed's rule.
type Apportionment uint8

const (
	// ApportionCeil gives a node owning o of S shards the ceiling
	//
	//	⌈q × o / S⌉
	//
	// whatever the namespace. It is exact when every node's q × o / S is an
	// integer and otherwise rounds every node up: hashed memberships
	// overshoot by about k/2, up to k − 1.
	ApportionCeil Apportionment = iota

	// ApportionShares gives each shard s a fixed integer share of a
	// namespace n's quota, and a node the sum of its owned shards' shares:
	//
	//	share(s) = ⌊q/S⌋ + [s ∈ U_n]
	//	U_n      = { (h + ⌊j × S / r⌋) mod S : 0 ≤ j < r },  r = q mod S,  h = ShardFor(n, S)
	//	ceiling  = max(1, Σ_{s ∈ owned} share(s))   (0 when nothing is owned)
	//
	// The r extra units start at the namespace's own shard h, so that they
	// fall on different nodes for different namespaces. The shares of all S
	// shards sum to q exactly, so over any partition
	//
	//	Σ ceilings = q + z
	//
	// where z counts the nodes that own shards but whose shares sum to 0,
	// raised to 1 so that they do not starve: z = 0 when q ≥ S, and
	// max(0, k − q) ≤ z ≤ k − 1 otherwise. A node never gets more than
	// ApportionCeil would give it. docs/planner.md compares the two rules'
	// overshoot and shows that no rule computed from a node's own shards
	// is exact for every partition. Cost: O(owned) per ceiling.
	ApportionShares
)

// String returns "ceil" or "shares", or "Apportionment(N)" for any other
// value.
func (a Apportionment) String() string {
	switch a {
	case ApportionCeil:
		return "ceil"
	case ApportionShares:
		return "shares"
	}
	return "Apportionment(" + strconv.Itoa(int(a)) + ")"
}

// CeilingFor returns this node's ceiling on concurrently claimed rows of
// namespace for the cluster-wide quota, under apportionment a (see
// [Apportionment] for the formulas and the bounds they keep).
// CeilingFor(n, q, ApportionCeil) is [OwnedShardFraction.Ceiling](q) for
// every n. A negative quota other than [Unlimited] gives 0, as Ceiling does;
// an Apportionment other than ApportionCeil and ApportionShares is treated
// as ApportionCeil ([backpressure.New] rejects it earlier). Cost: O(1) for ApportionCeil,
// O(owned) for ApportionShares; no allocation.
func (f OwnedShardFraction) CeilingFor(namespace string, quota int, a Apportionment) int {
	if a != ApportionShares {
		return f.Ceiling(quota)
	}
	return f.shareCeiling(namespace, quota)
}

// shareCeiling is CeilingFor under ApportionShares.
func (f OwnedShardFraction) shareCeiling(namespace string, quota int) int {
	o, n := len(f.owned), f.shardCount
	if c, ok := shareEdge(o, n, quota); ok {
		return c
	}
	if o == n {
		return quota
	}
	base, r := quota/n, quota%n
	// o × base ≤ n × base ≤ quota, and the extras add at most r more, while
	// the total is a sum over a subset of shares that sum to quota: no
	// overflow anywhere.
	sum := o * base
	if r > 0 {
		sum += f.extraUnits(ShardFor(namespace, n), r)
	}
	return max(1, sum)
}

// extraUnits counts the owned shards that hold one of the r extra units
// placed from shard h, 0 < r < shardCount.
//
// Shard s is the rotated position t = (s − h) mod n; the units in positions
// [0, T) number E(T) = ⌈T × r / n⌉, so t holds one iff E(t+1) > E(t). With
// t × r = a × n + b (0 ≤ b < n) that is b = 0 or b > n − r: one multiply
// and one remainder per shard. For n ≤ 2¹⁶, t × r < 2³², and the remainder
// is Lemire's fastmod (two multiplies, no division: "Faster Remainder by
// Direct Computation", 2019); otherwise t × r may pass 64 bits and the
// remainder is a 128-bit division.
func (f OwnedShardFraction) extraUnits(h, r int) int {
	n := f.shardCount
	un, ur := uint64(n), uint64(r)
	count := 0
	if n <= 1<<16 {
		m := ^uint64(0)/un + 1 // wraps to 0 for n = 1, which fastmod handles
		for _, s := range f.owned {
			t := s - h
			if t < 0 {
				t += n
			}
			b, _ := bits.Mul64(m*(uint64(t)*ur), un)
			if b == 0 || b > un-ur {
				count++
			}
		}
		return count
	}
	for _, s := range f.owned {
		t := s - h
		if t < 0 {
			t += n
		}
		hi, lo := bits.Mul64(uint64(t), ur)
		if hi == 0 {
			lo %= un
		} else {
			lo = bits.Rem64(hi, lo, un)
		}
		if lo == 0 || lo > un-ur {
			count++
		}
	}
	return count
}

// CeilingBound returns an upper bound on CeilingFor(n, quota, a) over every
// namespace n: Ceiling(quota) under ApportionCeil, and under
// ApportionShares max(1, min(quota, o × ⌊q/S⌋ + min(o, q mod S))), since a
// node's o shards hold at most o of the r extra units. Unlimited stays
// Unlimited, and 0 stays 0.
func (f OwnedShardFraction) CeilingBound(quota int, a Apportionment) int {
	if a != ApportionShares {
		return f.Ceiling(quota)
	}
	o, n := len(f.owned), f.shardCount
	if c, ok := shareEdge(o, n, quota); ok {
		return c
	}
	base, r := quota/n, quota%n
	// o × base + min(o, r) can pass quota (o = n − 1 and r = n − 1) but
	// not overflow: o × base ≤ quota − r and min(o, r) ≤ r.
	return max(1, min(quota, o*base+min(o, r)))
}

// Valid reports whether a is one of the defined rules.
func (a Apportionment) Valid() bool {
	return a == ApportionCeil || a == ApportionShares
}

// shareEdge settles the cases where ApportionShares needs no arithmetic,
// for a node owning o of n shards: 0 with no shard owned (or no shard
// space) or a quota of 0, Unlimited for Unlimited. ok is false otherwise.
func shareEdge(o, n, quota int) (c int, ok bool) {
	switch {
	case o == 0 || n <= 0 || (quota <= 0 && quota != Unlimited):
		return 0, true
	case quota == Unlimited:
		return Unlimited, true
	}
	return 0, false
}
