package main

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// Every membership deals each shard to exactly one node.
func TestMembershipsPartition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range memberships {
		for _, nodes := range []int{1, 3, 10, 63, 100} {
			for trial := 0; trial < 20; trial++ {
				owned := m.deal(rng, trial, nodes, 64)
				if len(owned) != nodes {
					t.Fatalf("%s, %d nodes: %d shard sets", m.name, nodes, len(owned))
				}
				seen := make([]int, 64)
				for _, ids := range owned {
					for _, s := range ids {
						seen[s]++
					}
				}
				for s, n := range seen {
					if n != 1 {
						t.Fatalf("%s, %d nodes, trial %d: shard %d dealt %d times", m.name, nodes, trial, s, n)
					}
				}
			}
		}
	}
}

// The measured sums keep the bounds of both rules, trial by trial:
// max(q, k) ≤ Σ ≤ q + k − 1, and shares are exact when q ≥ S.
func TestMeasureBounds(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trials = 300
	cells, err := measure(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(memberships) * len(cfg.Nodes) * len(cfg.Quotas); len(cells) != want {
		t.Fatalf("%d cells, want %d", len(cells), want)
	}
	for _, c := range cells {
		for i, k := range c.owning {
			for rule, sum := range map[string]int{"ceil": c.ceil[i], "shares": c.shares[i]} {
				if sum < max(c.quota, k) || sum > c.quota+k-1 {
					t.Fatalf("%s, %d nodes, q %d, trial %d, k %d: Σ %s = %d", c.membership, c.nodes, c.quota, i, k, rule, sum)
				}
			}
			if c.quota >= cfg.Shards && c.shares[i] != c.quota {
				t.Fatalf("%s, %d nodes, q %d ≥ S, trial %d: Σ shares = %d", c.membership, c.nodes, c.quota, i, c.shares[i])
			}
		}
	}
}

func TestRunTable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runArgs([]string{"-trials", "50", "-only", "ranges,uniform", "-nodes", "3", "-quotas", "7,100"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "| ranges |") || strings.HasPrefix(line, "| uniform |") {
			rows++
		}
	}
	if rows != 4 {
		t.Fatalf("%d rows, want 4:\n%s", rows, out.String())
	}
	// Three even ranges of 64 shards (22, 21, 21): ceil gives 3 + 3 + 3 = 9
	// of 7 and 35 + 33 + 33 = 101 of 100 whatever the start; shares are
	// exact for both.
	for _, want := range []string{
		"| ranges | 3 | 7 | 3 | 1.00 | 1.29 / 1.29 / 1.29 / 1.29 | 1.00 / 1.00 / 1.00 / 1.00 |",
		"| ranges | 3 | 100 | 3 | 1.00 | 1.01 / 1.01 / 1.01 / 1.01 | 1.00 / 1.00 / 1.00 / 1.00 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no row %q in:\n%s", want, out.String())
		}
	}
	var again bytes.Buffer
	runArgs([]string{"-trials", "50", "-only", "ranges,uniform", "-nodes", "3", "-quotas", "7,100"}, &again, &errOut)
	if again.String() != out.String() {
		t.Errorf("same seed, different tables:\n%s\n%s", out.String(), again.String())
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-trials", "x"}, 2},
		{[]string{"-nodes", "3,a"}, 2},
		{[]string{"-quotas", "0"}, 1},
		{[]string{"-nodes", "0"}, 1},
		{[]string{"-shards", "0"}, 1},
		{[]string{"-trials", "0"}, 1},
		{[]string{"-only", "gossip"}, 1},
	} {
		var out, errOut bytes.Buffer
		if code := runArgs(tc.args, &out, &errOut); code != tc.code || errOut.Len() == 0 {
			t.Errorf("runArgs(%q) = %d (stderr %q), want %d and a message", tc.args, code, errOut.String(), tc.code)
		}
	}
}
