package sim

import (
	"math"
	"testing"

	"pgregory.net/rapid"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 1, 7 * time.Millisecond},
		{ms(7), 100, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 51, 3 * time.Millisecond},
		{ms(1, 2, 3, 4), 100, 4 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.001, 1 * time.Millisecond},
	}
	for i, tt := range tests {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("step %d: percentile(%v, %v) = %v, want %v", i, tt.sorted, tt.p, got, tt.want)
		}
	}
}

func TestSummariseDoesNotReorderInput(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	got := summarise(in)
	if want := (waitStats{P50: 2, P99: 3, Max: 3}); got != want {
		t.Errorf("summarise(%v) = %+v, want %+v", in, got, want)
	}
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("summarise reordered its input: %v", in)
	}
}

func TestJain(t *testing.T) {
	tests := []struct {
		x    []float64
		want float64
		ok   bool
	}{
		{nil, 0, false},
		{[]float64{0, 0}, 0, false}, // everybody starves: no index, not 1
		{[]float64{1, 1, 1}, 1, true},
		{[]float64{5, 5}, 1, true},
		{[]float64{1, 0, 0, 0}, 0.25, true}, // one takes everything: 1/n
		{[]float64{1, 2}, 0.9, true},        // 9 / (2·5)
		{[]float64{2.4, 0, 0, 0, 0, 0}, 1.0 / 6, true},
	}
	for i, tt := range tests {
		if got, ok := jain(tt.x); ok != tt.ok || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("step %d: jain(%v) = %v, %v; want %v, %v", i, tt.x, got, ok, tt.want, tt.ok)
		}
	}
}

// TestWaterFill checks the weighted max-min fair shares against a naive
// reference that hands out capacity in small equal steps per unit of
// weight.
func TestWaterFill(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "n")
		caps := make([]float64, n)
		weights := make([]int, n)
		idx := make([]int, n)
		for i := range n {
			caps[i] = float64(rapid.IntRange(1, 50).Draw(t, "cap"))
			weights[i] = rapid.IntRange(1, 4).Draw(t, "weight")
			idx[i] = i
		}
		capacity := float64(rapid.IntRange(1, 200).Draw(t, "capacity"))
		ent := make([]float64, n)
		waterFill(idx, caps, weights, capacity, true, ent)

		naive := make([]float64, n)
		const step = 1.0 / 64
		left := capacity
		for left > 1e-9 {
			gave := false
			for i := range n {
				d := min(step*float64(weights[i]), caps[i]-naive[i], left)
				if d > 0 {
					naive[i] += d
					left -= d
					gave = true
				}
			}
			if !gave {
				break
			}
		}
		for i := range n {
			if math.Abs(ent[i]-naive[i]) > 4*step*float64(weights[i])+1e-9 {
				t.Fatalf("caps %v weights %v capacity %v: waterFill %v, naive %v", caps, weights, capacity, ent, naive)
			}
		}
	})
}

// TestEntitlementJain checks the per-tick index: capped at 1, weighted,
// unlimited tenants bounded by the cluster, paused tenants left out.
func TestEntitlementJain(t *testing.T) {
	tests := []struct {
		inflight, waiting, quotas, weights []int
		capacity                           int
		want                               float64
		ok                                 bool
	}{
		// Two unlimited tenants with backlogs, weights 1 and 3, 120
		// workers: entitled to 30 and 90. Holding exactly that is fair.
		{[]int{30, 90}, []int{500, 500}, []int{-1, -1}, []int{1, 3}, 120, 1, true},
		// The same split unweighted is not: x = 0.5 and 1.
		{[]int{30, 90}, []int{500, 500}, []int{-1, -1}, []int{1, 1}, 120, 0.9, true},
		// Over its quota counts 1, not 2: x = 1 and 1.
		{[]int{20, 5}, []int{0, 0}, []int{10, 10}, []int{1, 1}, 0, 1, true},
		// A paused tenant takes no part: one tenant left, no index.
		{[]int{5, 0}, []int{0, 9}, []int{10, 0}, []int{1, 1}, 100, 0, false},
		// Nobody holds anything: no index.
		{[]int{0, 0}, []int{3, 3}, []int{10, 10}, []int{1, 1}, 100, 0, false},
	}
	for i, tt := range tests {
		e := newEntitlement(len(tt.inflight))
		got, ok := e.jain(tt.inflight, tt.waiting, tenantConfig{quotas: tt.quotas, weights: tt.weights}, tt.capacity)
		if ok != tt.ok || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("step %d: jain(%v, %v, quotas %v, weights %v, C %d) = %v, %v, want %v, %v",
				i, tt.inflight, tt.waiting, tt.quotas, tt.weights, tt.capacity, got, ok, tt.want, tt.ok)
		}
	}
}
