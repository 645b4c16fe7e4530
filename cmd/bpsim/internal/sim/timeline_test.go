package sim

import (
	"slices"
	"testing"
)

func TestSamplerKeepsEveryTickWhileItCan(t *testing.T) {
	s := newSampler(2)
	for i := range 10 {
		s.add([]int{i, 10 - i})
	}
	if s.stride != 1 || !slices.Equal(s.vals[0], []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) || len(s.vals[1]) != 10 {
		t.Errorf("stride %d, samples %v", s.stride, s.vals)
	}
}

// TestSamplerMergesToPeaks checks the bound and that each sample is the
// peak of the ticks it covers, against a naive reference.
func TestSamplerMergesToPeaks(t *testing.T) {
	s := newSampler(1)
	var all []int
	n := 3*maxSamples + 17
	for i := range n {
		v := (i * 7919) % 101
		all = append(all, v)
		s.add([]int{v})
		if len(s.vals[0]) > maxSamples {
			t.Fatalf("tick %d: %d samples, over %d", i, len(s.vals[0]), maxSamples)
		}
	}
	if s.stride != 4 {
		t.Errorf("stride %d after %d ticks, want 4", s.stride, n)
	}
	for k, got := range s.vals[0] {
		lo, hi := k*s.stride, min((k+1)*s.stride, n)
		if want := slices.Max(all[lo:hi]); got != want {
			t.Fatalf("sample %d (ticks %d..%d) = %d, want the peak %d", k, lo, hi, got, want)
		}
	}
	if want := (n + s.stride - 1) / s.stride; len(s.vals[0]) != want {
		t.Errorf("%d samples, want %d", len(s.vals[0]), want)
	}
}
