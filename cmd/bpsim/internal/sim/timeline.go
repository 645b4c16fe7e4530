package sim

import "time"

// maxSamples bounds a timeline's samples per tenant, so that a long run
// keeps a small report: past it, neighbouring samples merge.
const maxSamples = 4000

// sampler records in-flight rows per tenant, one sample per tick until
// there are maxSamples, then merging pairs of samples into their maximum
// and doubling the stride, so each sample is the peak over stride ticks.
// Memory: O(tenants × maxSamples) however long the run.
type sampler struct {
	stride int     // ticks per sample, a power of two
	ticks  int     // ticks recorded
	vals   [][]int // [tenant][sample]
}

func newSampler(tenants int) *sampler {
	return &sampler{stride: 1, vals: make([][]int, tenants)}
}

// add records one tick's in-flight counts, one per tenant.
func (s *sampler) add(inflight []int) {
	k := s.ticks / s.stride
	for i, v := range inflight {
		if k == len(s.vals[i]) {
			s.vals[i] = append(s.vals[i], v)
		} else {
			s.vals[i][k] = max(s.vals[i][k], v)
		}
	}
	s.ticks++
	if len(s.vals) > 0 && len(s.vals[0]) > maxSamples {
		for i, vs := range s.vals {
			for j := 0; j < len(vs); j += 2 {
				m := vs[j]
				if j+1 < len(vs) {
					m = max(m, vs[j+1])
				}
				vs[j/2] = m
			}
			s.vals[i] = vs[:(len(vs)+1)/2]
		}
		s.stride *= 2
	}
}

// ceilTicks returns d in ticks, rounded up.
func ceilTicks(d, tick time.Duration) time.Duration {
	return (d + tick - 1) / tick
}
