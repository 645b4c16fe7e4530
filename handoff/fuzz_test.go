package handoff

import (
	"math"
	"testing"

	"github.com/outboxkit/backpressure"
)

// FuzzClassify checks Classify, for any ints, against the naive boundary in
// unbounded integers, and against Verify, BackpressureGate.Mode and
// NewVerdict (checkClass): never a panic, class 0 and ErrInvalidConfig for
// a gate that cannot exist. make fuzz runs it.
func FuzzClassify(f *testing.F) {
	f.Add(false, 10000, 7000, 5000, false)
	f.Add(false, 12000, 7000, 5000, false)
	f.Add(true, -1, 0, 0, true)
	f.Add(false, math.MaxInt, math.MaxInt, 1, false)
	f.Fuzz(func(t *testing.T, enforced bool, capacity, watermark, inflight int, verified bool) {
		checkClass(t, backpressure.BackpressureGate{
			Enforced: enforced, QueueCapacity: capacity, HighWatermark: watermark,
			ProducerMaxInflight: inflight, ProducerComplianceVerified: verified,
		})
	})
}
