package handoff

import (
	"errors"
	"math"
	"testing"

	"github.com/outboxkit/backpressure"
)

func newBP(t *testing.T, batch int) *backpressure.Backpressure {
	t.Helper()
	shards, err := backpressure.AllShards(4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := backpressure.New(backpressure.Config{BatchSize: batch, DefaultQuota: backpressure.Unlimited}, shards)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGateWorkerQueue(t *testing.T) {
	b500 := newBP(t, 500)
	huge := newBP(t, math.MaxInt/2+1)
	tests := []struct {
		b                 *backpressure.Backpressure
		sweeps            int
		capacity, wm      int
		inflight          int
		overflow, invalid bool
		field             string
	}{
		{b500, 1, 1200, 700, 500, false, false, ""},
		{b500, 1, 1199, 700, 500, true, false, ""},
		{b500, 1, 500, 0, 500, false, false, ""},
		{b500, 3, 2200, 700, 1500, false, false, ""},
		{b500, 3, 2199, 700, 1500, true, false, ""},
		{b500, 1, 100, 101, 500, false, true, "BackpressureGate.HighWatermark"},
		{b500, 1, -1, 0, 500, false, true, "BackpressureGate.QueueCapacity"},
		{huge, 1, math.MaxInt, 0, math.MaxInt/2 + 1, false, false, ""},
		// 2 × (MaxInt/2 + 1) = MaxInt + 1: no int queue has the headroom.
		{huge, 2, math.MaxInt, 0, math.MaxInt, true, false, ""},
		{huge, 2, 10, 11, math.MaxInt, false, true, "BackpressureGate.HighWatermark"},
		{b500, 0, 1200, 700, 0, false, true, "sweepsInFlight"},
		{nil, 1, 1200, 700, 0, false, true, "Backpressure"},
	}
	for i, tt := range tests {
		g, err := WorkerQueueGateSweeps(tt.b, tt.sweeps, tt.capacity, tt.wm)
		var oe *backpressure.AdvisoryOverflowError
		var ce *backpressure.ConfigError
		switch {
		case g.ProducerMaxInflight != tt.inflight || g.Enforced || g.ProducerComplianceVerified:
			t.Errorf("case %d: WorkerQueueGateSweeps(%d sweeps, %d, %d) = %+v, want an advisory unverified gate with in-flight %d",
				i, tt.sweeps, tt.capacity, tt.wm, g, tt.inflight)
		case tt.overflow && (!errors.As(err, &oe) || oe.ProducerMaxInflight != tt.inflight):
			t.Errorf("case %d: WorkerQueueGateSweeps(%d sweeps, %d, %d) error %v, want an overflow with in-flight %d",
				i, tt.sweeps, tt.capacity, tt.wm, err, tt.inflight)
		case tt.invalid && (!errors.As(err, &ce) || ce.Field != tt.field || !errors.Is(err, backpressure.ErrInvalidConfig)):
			t.Errorf("case %d: WorkerQueueGateSweeps(%d sweeps, %d, %d) error %v, want ErrInvalidConfig on %s",
				i, tt.sweeps, tt.capacity, tt.wm, err, tt.field)
		case !tt.overflow && !tt.invalid && err != nil:
			t.Errorf("case %d: WorkerQueueGateSweeps(%d sweeps, %d, %d) error %v, want nil", i, tt.sweeps, tt.capacity, tt.wm, err)
		}
		if tt.sweeps == 1 {
			g1, err1 := WorkerQueueGate(tt.b, tt.capacity, tt.wm)
			if g1 != g || (err1 == nil) != (err == nil) {
				t.Errorf("case %d: WorkerQueueGate = %+v, %v; WorkerQueueGateSweeps(1) = %+v, %v", i, g1, err1, g, err)
			}
		}
	}
}

// TestGateWorkerQueueRejectsUnbuiltBackpressure: a Backpressure not built
// with New has no batch size to bound a sweep, so the gate it would give is
// meaningless; Sweep and Plan reject such a value with ErrInvalidConfig, and
// so does the gate builder.
func TestGateWorkerQueueRejectsUnbuiltBackpressure(t *testing.T) {
	for i, b := range []*backpressure.Backpressure{nil, {}} {
		for _, sweeps := range []int{1, 3} {
			g, err := WorkerQueueGateSweeps(b, sweeps, 10, 10)
			var ce *backpressure.ConfigError
			if g != (backpressure.BackpressureGate{}) || !errors.Is(err, backpressure.ErrInvalidConfig) ||
				!errors.As(err, &ce) || ce.Field != "Backpressure" || isOverflow(err) {
				t.Errorf("case %d: WorkerQueueGateSweeps(%d sweeps, 10, 10) = %+v, %v; want the zero gate and a *ConfigError on Backpressure",
					i, sweeps, g, err)
			}
		}
		g, err := WorkerQueueGate(b, 10, 10)
		if g != (backpressure.BackpressureGate{}) || !errors.Is(err, backpressure.ErrInvalidConfig) {
			t.Errorf("case %d: WorkerQueueGate(10, 10) = %+v, %v; want the zero gate and ErrInvalidConfig", i, g, err)
		}
	}
}
