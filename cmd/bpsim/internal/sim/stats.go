package sim

import (
	"math"
	"slices"
	"time"
)

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted: the smallest value with at least p% of the values at or below
// it. It returns 0 for no values.
//
//	percentile(v, p) = v[⌈p/100 × n⌉ − 1]
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	return sorted[min(max(rank, 1), n)-1]
}

// waitStats summarises waits: p50, p99 and max, nearest-rank.
type waitStats struct {
	P50, P99, Max time.Duration
}

func summarise(waits []time.Duration) waitStats {
	s := slices.Clone(waits)
	slices.Sort(s)
	return waitStats{P50: percentile(s, 50), P99: percentile(s, 99), Max: percentile(s, 100)}
}

// jain returns Jain's fairness index of x:
//
//	J(x) = (Σ x_i)² / (n · Σ x_i²)
//
// 1 when every x_i is equal, 1/n when one takes everything. ok is false
// for no values or all zeros, where the index is 0/0: when nobody gets
// anything it says nothing about how things were shared.
func jain(x []float64) (j float64, ok bool) {
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	if len(x) == 0 || sq == 0 {
		return 0, false
	}
	return sum * sum / (float64(len(x)) * sq), true
}

// entitledShare is one tenant's x for the per-tick fairness index: its
// in-flight rows over what it is entitled to hold, its demand capped by its
// quota:
//
//	x = inflight / min(quota, inflight + waiting)
//
// 1 when it holds exactly its entitlement; below 1 when it waits while
// under quota; above 1 when it holds more than its quota. ok is false when
// the tenant has no demand (nothing in flight or waiting), so it takes no
// part in that tick's index.
func entitledShare(inflight, waiting, quota int) (x float64, ok bool) {
	demand := inflight + waiting
	if demand == 0 {
		return 0, false
	}
	ent := demand
	if quota >= 0 {
		ent = min(quota, demand)
	}
	return float64(inflight) / float64(ent), true
}
