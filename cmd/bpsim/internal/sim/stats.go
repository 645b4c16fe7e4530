package sim

import (
	"math"
	"slices"
	"strconv"
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

// entitlement computes each tick's Jain index over what tenants are
// entitled to. It keeps its scratch between ticks; it is not safe for
// concurrent use.
type entitlement struct {
	caps, ent, xs []float64
	order         []int
}

func newEntitlement(tenants int) *entitlement {
	return &entitlement{caps: make([]float64, tenants), ent: make([]float64, tenants), order: make([]int, 0, tenants)}
}

// jain returns the tick's index of the capped shares
//
//	x_i = min(1, inflight_i / e_i)
//
// over the tenants with e_i > 0, where e is the weighted max-min fair
// share (water-filling) of the cluster's worker capacity C over the caps
// c_i = min(quota_i, inflight_i + waiting_i), an unlimited quota counting
// as no cap:
//
//	e_i = min(c_i, λ × w_i), with λ such that Σ e_i = min(C, Σ c_i)
//
// (with unbounded workers, C = ∞ and e_i = c_i). So an unlimited tenant is
// entitled to what the cluster can run after the others' fair shares, not
// to its whole backlog; a tenant over its entitlement counts 1, not more,
// and cannot hide another's shortfall; and a paused tenant (c = 0) takes
// no part. ok is false with fewer than two tenants entitled to rows or
// when none holds any: the tick says nothing about sharing.
func (e *entitlement) jain(inflight, waiting []int, c tenantConfig, capacity int) (float64, bool) {
	e.order = e.order[:0]
	holds := false
	for i := range inflight {
		demand := inflight[i] + waiting[i]
		cp := float64(demand)
		if q := c.quotas[i]; q >= 0 {
			cp = float64(min(q, demand))
		}
		e.caps[i], e.ent[i] = cp, 0
		if cp > 0 {
			e.order = append(e.order, i)
			holds = holds || inflight[i] > 0
		}
	}
	if len(e.order) < 2 || !holds {
		return 0, false
	}
	waterFill(e.order, e.caps, c.weights, float64(capacity), capacity > 0, e.ent)
	e.xs = e.xs[:0]
	for _, i := range e.order {
		e.xs = append(e.xs, min(1, float64(inflight[i])/e.ent[i]))
	}
	return jain(e.xs)
}

// waterFill sets ent[i] for i in idx to the weighted max-min fair shares of
// capacity over caps (see entitlement.jain); with bounded false every
// tenant gets its cap. It reorders idx.
func waterFill(idx []int, caps []float64, weights []int, capacity float64, bounded bool, ent []float64) {
	if !bounded {
		for _, i := range idx {
			ent[i] = caps[i]
		}
		return
	}
	// Ascending by cap per unit of weight: the tenants capped first.
	slices.SortFunc(idx, func(a, b int) int {
		x, y := caps[a]/float64(weights[a]), caps[b]/float64(weights[b])
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return a - b
	})
	wsum := 0.0
	for _, i := range idx {
		wsum += float64(weights[i])
	}
	left := capacity
	for k, i := range idx {
		share := left * float64(weights[i]) / wsum
		if caps[i] > share {
			// Every tenant from here on is capped by the capacity.
			for _, j := range idx[k:] {
				ent[j] = left * float64(weights[j]) / wsum
			}
			return
		}
		ent[i] = caps[i]
		left -= caps[i]
		wsum -= float64(weights[i])
	}
}

// fmtWait prints a simulated duration compactly: "0s", "300ms", "12.4s".
func fmtWait(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 100*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 0, 64) + "s"
}
