package backpressure

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// refShares is the naive reference of ApportionShares: the whole shard
// space's shares, ⌊q/S⌋ each, then the r = q mod S extra units dealt one by
// one to positions (h + ⌊j × S / r⌋) mod S, j = 0..r−1, as the doc states.
// For S up to a few thousand and any q.
func refShares(namespace string, q, shards int) []int {
	share := make([]int, shards)
	for s := range share {
		share[s] = q / shards
	}
	r, h := q%shards, ShardFor(namespace, shards)
	for j := 0; j < r; j++ {
		share[(h+j*shards/r)%shards]++
	}
	return share
}

// refShareCeiling is CeilingFor under ApportionShares from refShares.
func refShareCeiling(namespace string, q int, f OwnedShardFraction) int {
	switch {
	case f.OwnedCount() == 0:
		return 0
	case q == Unlimited:
		return Unlimited
	case q <= 0:
		return 0
	}
	share := refShares(namespace, q, f.ShardCount())
	sum := 0
	for _, s := range f.Owned() {
		sum += share[s]
	}
	return max(1, sum)
}

func genNamespace(t *rapid.T) string {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"acme", "globex", "initech", "", "ns00", "ns01"}),
		rapid.String(),
	).Draw(t, "namespace")
}

func genShareQuota(t *rapid.T, shards int) int {
	return rapid.OneOf(
		rapid.IntRange(0, 3*shards),
		rapid.IntRange(0, math.MaxInt),
		rapid.IntRange(math.MaxInt-2*shards, math.MaxInt),
		rapid.Just(Unlimited),
		rapid.IntRange(math.MinInt, -2),
	).Draw(t, "quota")
}

// TestShareCeilingReference checks ApportionShares against the naive
// reference for every owned subset rapid draws, the placement of the extra
// units (exactly r of them, one per shard at most), and the per-node
// bounds 1 ≤ ceiling ≤ min(q, CeilingBound) for a node owning a shard.
func TestShareCeilingReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 300).Draw(t, "shardCount")
		var owned []int
		for s := 0; s < n; s++ {
			if rapid.Bool().Draw(t, "owns") {
				owned = append(owned, s)
			}
		}
		f, err := NewOwnedShardFraction(owned, n)
		if err != nil {
			t.Fatal(err)
		}
		ns, q := genNamespace(t), genShareQuota(t, n)
		got := f.CeilingFor(ns, q, ApportionShares)
		if want := refShareCeiling(ns, q, f); got != want {
			t.Fatalf("CeilingFor(%q, %d, shares) of %v = %d, reference %d", ns, q, f, got, want)
		}
		if c := f.CeilingFor(ns, q, ApportionCeil); c != f.Ceiling(q) {
			t.Fatalf("CeilingFor(%q, %d, ceil) of %v = %d, Ceiling %d", ns, q, f, c, f.Ceiling(q))
		}
		if c := f.CeilingFor(ns, q, Apportionment(7)); c != f.Ceiling(q) {
			t.Fatalf("CeilingFor(%q, %d, 7) of %v = %d, Ceiling %d", ns, q, f, c, f.Ceiling(q))
		}
		if q < 0 {
			return
		}
		if q > 0 && len(owned) > 0 && (got < 1 || got > q) {
			t.Fatalf("CeilingFor(%q, %d, shares) of %v = %d, want 1..q", ns, q, f, got)
		}
		if b := f.CeilingBound(q, ApportionShares); got > b {
			t.Fatalf("CeilingFor(%q, %d, shares) of %v = %d > bound %d", ns, q, f, got, b)
		}
		if len(owned) == n && got != q {
			t.Fatalf("CeilingFor(%q, %d, shares) of all %d shards = %d, want q", ns, q, n, got)
		}
		if q == 0 || q > 1<<20 {
			return
		}
		share := refShares(ns, q, n)
		extra := 0
		for _, v := range share {
			if d := v - q/n; d == 1 {
				extra++
			} else if d != 0 {
				t.Fatalf("quota %d over %d shards: share %d is not ⌊q/S⌋ or ⌊q/S⌋+1", q, n, v)
			}
		}
		if extra != q%n {
			t.Fatalf("quota %d over %d shards: %d extra units, want %d", q, n, extra, q%n)
		}
		if h := ShardFor(ns, n); q%n > 0 && share[h] != q/n+1 {
			t.Fatalf("quota %d over %d shards: the namespace's own shard %d has no extra unit", q, n, h)
		}
	})
}

// TestShareCeilingHugeSpace checks ApportionShares against big-integer
// arithmetic in every remainder path: shard spaces around 2¹⁶ (the fast
// remainder's edge) and up to MaxShardCount, a few owned shards, any quota.
func TestShareCeilingHugeSpace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.OneOf(
			rapid.IntRange(1, MaxShardCount),
			rapid.IntRange(MaxShardCount-100, MaxShardCount),
			rapid.IntRange(1<<16-100, 1<<16+100), // the fast remainder's edge
		).Draw(t, "shardCount")
		owned := rapid.SliceOfNDistinct(rapid.IntRange(0, n-1), 0, 8, rapid.ID[int]).Draw(t, "owned")
		f, err := NewOwnedShardFraction(owned, n)
		if err != nil {
			t.Fatal(err)
		}
		ns, q := genNamespace(t), rapid.IntRange(1, math.MaxInt).Draw(t, "quota")
		// E(T) = ⌈T × r / S⌉ units in rotated positions [0, T).
		bn, br := big.NewInt(int64(n)), big.NewInt(int64(q%n))
		e := func(t int64) *big.Int {
			v := new(big.Int).Mul(big.NewInt(t), br)
			v.Add(v, new(big.Int).Sub(bn, big.NewInt(1)))
			return v.Quo(v, bn)
		}
		h := int64(ShardFor(ns, n))
		want := new(big.Int).Mul(big.NewInt(int64(len(owned))), big.NewInt(int64(q/n)))
		for _, s := range owned {
			t := int64(s) - h
			if t < 0 {
				t += int64(n)
			}
			want.Add(want, new(big.Int).Sub(e(t+1), e(t)))
		}
		if len(owned) > 0 && want.Sign() == 0 {
			want.SetInt64(1)
		}
		if got := f.CeilingFor(ns, q, ApportionShares); !want.IsInt64() || int64(got) != want.Int64() {
			t.Fatalf("CeilingFor(%q, %d, shares) of %v %v = %d, want %s", ns, q, owned, f, got, want)
		}
	})
}

// genPartition deals n shards to nodes: uniformly (some nodes may own
// nothing), or as cyclic runs of consecutive shards from a random start.
func genPartition(t *rapid.T, n, nodes int, contiguous bool) [][]int {
	owned := make([][]int, nodes)
	if !contiguous {
		for s := 0; s < n; s++ {
			k := rapid.IntRange(0, nodes-1).Draw(t, "owner")
			owned[k] = append(owned[k], s)
		}
		return owned
	}
	var cuts []int
	if n > 1 {
		c := min(nodes-1, n-1)
		cuts = rapid.SliceOfNDistinct(rapid.IntRange(1, n-1), c, c, rapid.ID[int]).Draw(t, "cuts")
	}
	slices.Sort(cuts)
	cuts = append(append([]int{0}, cuts...), n)
	start := rapid.IntRange(0, n-1).Draw(t, "start")
	for k := 0; k+1 < len(cuts); k++ {
		for i := cuts[k]; i < cuts[k+1]; i++ {
			owned[k] = append(owned[k], (start+i)%n)
		}
	}
	return owned
}

// TestSharePartition checks, for every partition rapid draws, the bounds
// ApportionShares documents, against the naive reference:
//
//	Σ shares = q;  Σ ceilings = q + z,  z = #{owning nodes whose shares sum to 0}
//	max(q, k) ≤ Σ ceilings ≤ q + k − 1;  z ≥ k − q;  z = 0 when q ≥ S
//
// and for cyclic runs of L shards: ceiling ∈ {max(1, ⌊qL/S⌋), ⌈qL/S⌉},
// never above ApportionCeil's, and Σ ceilings = q when every qL ≥ S.
func TestSharePartition(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 256).Draw(t, "shardCount")
		nodes := rapid.IntRange(1, 70).Draw(t, "nodes")
		contiguous := rapid.Bool().Draw(t, "contiguous")
		ns := genNamespace(t)
		q := rapid.OneOf(rapid.IntRange(0, 2*n), rapid.IntRange(0, 100_000), rapid.IntRange(math.MaxInt/2, math.MaxInt)).Draw(t, "quota")
		share := refShares(ns, q, n)
		sumCeil, sumShare, z, k, allLong := 0, 0, 0, 0, true
		for _, ids := range genPartition(t, n, nodes, contiguous) {
			f, err := NewOwnedShardFraction(ids, n)
			if err != nil {
				t.Fatal(err)
			}
			c := f.CeilingFor(ns, q, ApportionShares)
			if u := f.CeilingFor(ns, Unlimited, ApportionShares); len(ids) > 0 && u != Unlimited || len(ids) == 0 && u != 0 {
				t.Fatalf("%v: CeilingFor(%q, Unlimited, shares) = %d", f, ns, u)
			}
			own := 0
			for _, s := range ids {
				own += share[s]
			}
			sumShare += own
			sumCeil += c
			if len(ids) == 0 {
				if c != 0 {
					t.Fatalf("node owning nothing: ceiling %d", c)
				}
				continue
			}
			k++
			if own == 0 && q > 0 {
				z++
			}
			if q > 0 && c != max(1, own) || q == 0 && c != 0 {
				t.Fatalf("%v: CeilingFor(%q, %d, shares) = %d, shares sum to %d", f, ns, q, c, own)
			}
			if !contiguous || q == 0 {
				continue
			}
			// A cyclic run of L shards: ⌊qL/S⌋ or ⌈qL/S⌉, in big integers
			// since qL overflows.
			lo, hi := floorCeil(q, len(ids), n)
			if c != max(1, lo) && c != hi || c > f.Ceiling(q) {
				t.Fatalf("run %v of %d shards: CeilingFor(%q, %d, shares) = %d, want ⌊qL/S⌋ = %d or ⌈qL/S⌉ = %d, ≤ Ceiling %d", ids, len(ids), ns, q, c, lo, hi, f.Ceiling(q))
			}
			if lo == 0 {
				allLong = false
			}
		}
		if sumShare != q {
			t.Fatalf("quota %d over %d shards: shares sum to %d", q, n, sumShare)
		}
		if q == 0 {
			if sumCeil != 0 {
				t.Fatalf("quota 0: Σ ceilings = %d", sumCeil)
			}
			return
		}
		if sumCeil-q != z {
			t.Fatalf("quota %d, %d owning nodes: Σ ceilings = %d, want q + z = %d + %d", q, k, sumCeil, q, z)
		}
		if sumCeil < max(q, k) || sumCeil-q > k-1 || z < k-q {
			t.Fatalf("quota %d over %d shards, %d owning nodes: Σ ceilings = %d (z = %d) outside max(q, k)..q+k−1", q, n, k, sumCeil, z)
		}
		if q >= n && z != 0 {
			t.Fatalf("quota %d ≥ %d shards: Σ ceilings = %d, want q", q, n, sumCeil)
		}
		if contiguous && allLong && sumCeil != q {
			t.Fatalf("quota %d, runs of at least S/q shards: Σ ceilings = %d, want q", q, sumCeil)
		}
	})
}

// floorCeil returns ⌊q × l / n⌋ and ⌈q × l / n⌉ for 0 ≤ l ≤ n, which fit
// in an int.
func floorCeil(q, l, n int) (int, int) {
	v, r := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(int64(q)), big.NewInt(int64(l))), big.NewInt(int64(n)), new(big.Int))
	lo := int(v.Int64())
	if r.Sign() != 0 {
		return lo, lo + 1
	}
	return lo, lo
}

// Shares of fixed quotas over fixed partitions, step by step.
func TestShareCeilingSteps(t *testing.T) {
	frac := func(ids []int, n int) OwnedShardFraction {
		f, err := NewOwnedShardFraction(ids, n)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	run := func(from, to int) []int {
		var ids []int
		for s := from; s < to; s++ {
			ids = append(ids, s)
		}
		return ids
	}
	// "acme" hashes to shard 47 of 64 and 3 of 4.
	if h := ShardFor("acme", 64); h != 47 {
		t.Fatalf("ShardFor(acme, 64) = %d", h)
	}
	if h := ShardFor("acme", 4); h != 3 {
		t.Fatalf("ShardFor(acme, 4) = %d", h)
	}
	for i, tc := range []struct {
		ns     string
		quota  int
		shards int
		nodes  [][]int
		want   []int
	}{
		// 20 over 64 shards: units at (47 + ⌊j × 64/20⌋) mod 64 = 47, 50, 53,
		// 56, 59, 63, 2, 5, 8, 11, 15, 18, 21, 24, 27, 31, 34, 37, 40, 43.
		// Ceil gives 7, 7, 7 (21).
		{"acme", 20, 64, [][]int{run(0, 22), run(22, 43), run(43, 64)}, []int{7, 6, 7}},
		// Ceil gives 3 to the runs of 7 and 2 to the others (26).
		{"acme", 20, 64, [][]int{run(0, 7), run(7, 14), run(14, 21), run(21, 28), run(28, 35), run(35, 42), run(42, 48), run(48, 54), run(54, 60), run(60, 64)}, []int{2, 2, 2, 3, 2, 2, 2, 2, 2, 1}},
		// 3 over 4 shards: shares 1, 1, 0, 1 (units at 3, 0, 1).
		{"acme", 3, 4, [][]int{{0, 1}, {2, 3}}, []int{2, 1}},
		// A node with no unit is raised to 1: one above q.
		{"acme", 3, 4, [][]int{{2}, {0, 1, 3}}, []int{1, 3}},
		// 2 over 4 shards: shares 0, 1, 0, 1.
		{"acme", 2, 4, [][]int{{2, 0}, {1, 3}}, []int{1, 2}},
		// q ≥ S: exact whatever the partition (shard 0 has 2, shards 1–3 have 1, 2, 1).
		{"acme", 100, 64, [][]int{{0}, {1, 2, 3}, run(4, 64)}, []int{2, 4, 94}},
		{"acme", 0, 64, [][]int{{0}, run(1, 64)}, []int{0, 0}},
		{"acme", 5, 64, [][]int{{}, run(0, 64)}, []int{0, 5}},
		{"acme", Unlimited, 64, [][]int{{}, run(0, 64)}, []int{0, Unlimited}},
		{"acme", 7, 1, [][]int{{0}}, []int{7}},
	} {
		for k, ids := range tc.nodes {
			f := frac(ids, tc.shards)
			if got := f.CeilingFor(tc.ns, tc.quota, ApportionShares); got != tc.want[k] {
				t.Errorf("step %d: node %d owning %v: CeilingFor(%q, %d, shares) = %d, want %d", i, k, ids, tc.ns, tc.quota, got, tc.want[k])
			}
		}
	}
}

func TestApportionmentString(t *testing.T) {
	for a, want := range map[Apportionment]string{ApportionCeil: "ceil", ApportionShares: "shares", 9: "Apportionment(9)"} {
		if got := a.String(); got != want {
			t.Errorf("Apportionment(%d).String() = %q, want %q", uint8(a), got, want)
		}
	}
}

func BenchmarkCeilingFor(b *testing.B) {
	for _, a := range []Apportionment{ApportionCeil, ApportionShares} {
		for _, owned := range []int{8, 64, 512} {
			var ids []int
			for s := 0; s < owned; s++ {
				ids = append(ids, s*(1024/owned))
			}
			f, err := NewOwnedShardFraction(ids, 1024)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%v/owned=%d-of-1024", a, owned), func(b *testing.B) {
				b.ReportAllocs()
				sum := 0
				for b.Loop() {
					sum += f.CeilingFor("acme", 20, a)
				}
				_ = sum
			})
		}
	}
}
