package main

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/outboxkit/backpressure"
)

// Config is one measurement: every membership × node count × quota, each
// over Trials partitions and namespaces.
type Config struct {
	Shards int      // the virtual shard space S
	Nodes  []int    // node counts
	Quotas []int    // cluster-wide quotas, each ≥ 1
	Trials int      // partitions (and namespaces) per membership and node count
	Seed   uint64   // seed of the random partitions; the same seed prints the same table
	Only   []string // memberships to measure by name; empty: all of them
}

// DefaultConfig is the measurement of issue 17 §3.
func DefaultConfig() Config {
	return Config{Shards: 64, Nodes: []int{3, 10, 63}, Quotas: []int{1, 7, 10, 20, 100}, Trials: 10_000, Seed: 1}
}

// membership deals the shards of one trial to nodes: owned[i] are node i's
// shards, possibly none.
type membership struct {
	name string
	doc  string
	deal func(rng *rand.Rand, trial, nodes, shards int) [][]int
}

var memberships = []membership{
	{"uniform", "each shard to a uniformly random node", dealUniform},
	{"rendezvous", "each shard to the node whose name hashes highest with it (names fresh per trial)", dealRendezvous},
	{"ring", "consistent-hash ring, one random token per node: contiguous runs of random length", dealRing},
	{"ranges", "contiguous runs of ⌊S/n⌋ or ⌈S/n⌉ shards from a random start", dealRanges},
}

func dealUniform(rng *rand.Rand, _, nodes, shards int) [][]int {
	owned := make([][]int, nodes)
	for s := 0; s < shards; s++ {
		k := rng.IntN(nodes)
		owned[k] = append(owned[k], s)
	}
	return owned
}

func dealRendezvous(_ *rand.Rand, trial, nodes, shards int) [][]int {
	names := make([]uint64, nodes)
	for i := range names {
		h := fnv.New64a()
		fmt.Fprintf(h, "trial-%d/node-%d", trial, i)
		names[i] = h.Sum64()
	}
	owned := make([][]int, nodes)
	for s := 0; s < shards; s++ {
		best, bestW := 0, uint64(0)
		for i, name := range names {
			if w := mix64(name ^ mix64(uint64(s))); i == 0 || w > bestW {
				best, bestW = i, w
			}
		}
		owned[best] = append(owned[best], s)
	}
	return owned
}

// mix64 is splitmix64's finalizer: FNV's low bits alone are poorly mixed.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func dealRing(rng *rand.Rand, _, nodes, shards int) [][]int {
	tokens := make([]uint64, nodes)
	for i := range tokens {
		tokens[i] = rng.Uint64()
	}
	order := make([]int, nodes)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case tokens[a] < tokens[b]:
			return -1
		case tokens[a] > tokens[b]:
			return 1
		}
		return 0
	})
	owned := make([][]int, nodes)
	for s := 0; s < shards; s++ {
		// Shard s sits at s/S of the ring; it belongs to the first token at
		// or after it, wrapping around.
		pos := uint64(s) * (^uint64(0) / uint64(shards))
		j, _ := slices.BinarySearchFunc(order, pos, func(i int, p uint64) int {
			if tokens[i] < p {
				return -1
			}
			return 1
		})
		owned[order[j%nodes]] = append(owned[order[j%nodes]], s)
	}
	return owned
}

func dealRanges(rng *rand.Rand, _, nodes, shards int) [][]int {
	owned := make([][]int, nodes)
	start := rng.IntN(shards)
	next := 0
	for i := 0; i < nodes; i++ {
		size := shards / nodes
		if i < shards%nodes {
			size++
		}
		for ; size > 0; size-- {
			owned[i] = append(owned[i], (start+next)%shards)
			next++
		}
	}
	return owned
}

// cell is one row of the table: Σ ceilings of both rules, and the owning
// node count k, per trial.
type cell struct {
	membership   string
	nodes, quota int
	ceil, shares []int // Σ ceilings per trial
	owning       []int // k per trial
}

// measure fills the cells of cfg, in table order.
func measure(cfg Config) ([]cell, error) {
	if cfg.Shards < 1 || cfg.Trials < 1 || len(cfg.Nodes) == 0 || len(cfg.Quotas) == 0 {
		return nil, errors.New("apportionstat: need shards ≥ 1, trials ≥ 1, and at least one node count and quota")
	}
	for _, n := range cfg.Nodes {
		if n < 1 {
			return nil, fmt.Errorf("apportionstat: node count %d < 1", n)
		}
	}
	for _, q := range cfg.Quotas {
		if q < 1 {
			return nil, fmt.Errorf("apportionstat: quota %d < 1", q)
		}
	}
	ms := memberships
	if len(cfg.Only) > 0 {
		ms = nil
		for _, name := range cfg.Only {
			i := slices.IndexFunc(memberships, func(m membership) bool { return m.name == name })
			if i < 0 {
				return nil, fmt.Errorf("apportionstat: unknown membership %q", name)
			}
			ms = append(ms, memberships[i])
		}
	}
	var cells []cell
	for mi, m := range ms {
		for _, nodes := range cfg.Nodes {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(mi)<<32|uint64(nodes)))
			first := len(cells)
			for _, q := range cfg.Quotas {
				cells = append(cells, cell{membership: m.name, nodes: nodes, quota: q})
			}
			for trial := 0; trial < cfg.Trials; trial++ {
				var fs []backpressure.OwnedShardFraction
				k := 0
				for _, ids := range m.deal(rng, trial, nodes, cfg.Shards) {
					f, err := backpressure.NewOwnedShardFraction(ids, cfg.Shards)
					if err != nil {
						return nil, err
					}
					fs = append(fs, f)
					if len(ids) > 0 {
						k++
					}
				}
				namespace := fmt.Sprintf("tenant-%d", trial)
				for i := range cfg.Quotas {
					c := &cells[first+i]
					sc, ss := 0, 0
					for _, f := range fs {
						sc += f.CeilingFor(namespace, c.quota, backpressure.ApportionCeil)
						ss += f.CeilingFor(namespace, c.quota, backpressure.ApportionShares)
					}
					c.ceil = append(c.ceil, sc)
					c.shares = append(c.shares, ss)
					c.owning = append(c.owning, k)
				}
			}
		}
	}
	return cells, nil
}

// rank returns the nearest-rank p-quantile of sorted v: v[⌈p × len⌉ − 1].
func rank(v []int, pct int) int {
	i := (pct*len(v) + 99) / 100
	return v[max(0, i-1)]
}

// spread formats min / median / p99 / max of Σ ceilings / q.
func spread(sums []int, q int) string {
	v := slices.Clone(sums)
	slices.Sort(v)
	r := func(x int) string { return fmt.Sprintf("%.2f", float64(x)/float64(q)) }
	return r(v[0]) + " / " + r(rank(v, 50)) + " / " + r(rank(v, 99)) + " / " + r(v[len(v)-1])
}

// run measures cfg and writes the markdown table to w.
func run(w io.Writer, cfg Config) error {
	cells, err := measure(cfg)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Σ ceilings / q over %d shards, %d partitions per membership and node count (seed %d); a fresh namespace per partition.\n", cfg.Shards, cfg.Trials, cfg.Seed)
	fmt.Fprintf(&b, "k: nodes owning at least one shard (median); floor: max(q, k)/q (median), below which no rule that never starves a node can go.\n\n")
	b.WriteString("| membership | nodes | q | k | floor | ceil ⌈q·o/S⌉: min / median / p99 / max | shares: min / median / p99 / max |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, c := range cells {
		owning := slices.Clone(c.owning)
		slices.Sort(owning)
		floors := make([]int, len(owning))
		for i, k := range owning {
			floors[i] = max(c.quota, k)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.2f | %s | %s |\n", c.membership, c.nodes, c.quota,
			rank(owning, 50), float64(rank(floors, 50))/float64(c.quota), spread(c.ceil, c.quota), spread(c.shares, c.quota))
	}
	b.WriteString("\nMemberships:\n")
	for _, m := range memberships {
		if len(cfg.Only) == 0 || slices.Contains(cfg.Only, m.name) {
			fmt.Fprintf(&b, "- %s: %s.\n", m.name, m.doc)
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}
