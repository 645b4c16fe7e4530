package sim

import (
	"math"
	"testing"
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

func TestEntitledShare(t *testing.T) {
	tests := []struct {
		inflight, waiting, quota int
		want                     float64
		ok                       bool
	}{
		{0, 0, 10, 0, false},  // no demand: not counted
		{0, 5, 10, 0, true},   // waiting while under quota
		{10, 90, 10, 1, true}, // at its quota with a backlog
		{3, 0, 10, 1, true},   // everything it wants
		{20, 0, 10, 2, true},  // twice its quota
		{5, 5, -1, 0.5, true}, // unlimited: entitled to its whole demand
		{2, 3, 4, 0.5, true},  // demand 5 capped at quota 4
		{12, 38, 50, 0.24, true},
	}
	for i, tt := range tests {
		got, ok := entitledShare(tt.inflight, tt.waiting, tt.quota)
		if ok != tt.ok || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("step %d: entitledShare(%d, %d, %d) = %v, %v, want %v, %v",
				i, tt.inflight, tt.waiting, tt.quota, got, ok, tt.want, tt.ok)
		}
	}
}
