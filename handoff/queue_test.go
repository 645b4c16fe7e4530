package handoff

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestQueueFillTimes(t *testing.T) {
	seed := QueueModel{Capacity: 10_000, HighWatermark: 7_000, ProduceRate: 5_000, DrainRate: 3_000}
	tests := []struct {
		name      string
		q         QueueModel
		depth     int
		full      FillTime
		watermark FillTime
	}{
		{"seed trace from empty", seed, 0, FillTime{D: 5 * time.Second}, FillTime{D: 3500 * time.Millisecond}},
		{"seed trace from the watermark", seed, 7_000, FillTime{D: 1500 * time.Millisecond}, FillTime{}},
		{"seed trace, full", seed, 10_000, FillTime{}, FillTime{}},
		{"drain keeps up", QueueModel{Capacity: 10, HighWatermark: 5, ProduceRate: 3, DrainRate: 3}, 2, FillTime{Never: true}, FillTime{Never: true}},
		{"drain keeps up, above the watermark", QueueModel{Capacity: 10, HighWatermark: 5, ProduceRate: 3, DrainRate: 4}, 6, FillTime{Never: true}, FillTime{}},
		{"zero value", QueueModel{}, 0, FillTime{}, FillTime{}},
		{"rounded up to the nanosecond", QueueModel{Capacity: 1, ProduceRate: 3}, 0, FillTime{D: 333_333_334}, FillTime{}},
		{"slower than any duration", QueueModel{Capacity: math.MaxInt, ProduceRate: 1e-300}, 0, FillTime{D: math.MaxInt64}, FillTime{}},
	}
	for i, tt := range tests {
		full, err1 := tt.q.UntilFull(tt.depth)
		wm, err2 := tt.q.UntilHighWatermark(tt.depth)
		if err1 != nil || err2 != nil || full != tt.full || wm != tt.watermark {
			t.Errorf("case %d (%s): %+v from depth %d: UntilFull = %v, %v; UntilHighWatermark = %v, %v; want %v, %v",
				i, tt.name, tt.q, tt.depth, full, err1, wm, err2, tt.full, tt.watermark)
		}
	}
}

func TestQueueInvalid(t *testing.T) {
	ok := QueueModel{Capacity: 10, HighWatermark: 5, ProduceRate: 2, DrainRate: 1}
	tests := []struct {
		q     QueueModel
		depth int
		field string
	}{
		{QueueModel{Capacity: -1}, 0, "Capacity"},
		{QueueModel{Capacity: 10, HighWatermark: 11}, 0, "HighWatermark"},
		{QueueModel{Capacity: 10, HighWatermark: -1}, 0, "HighWatermark"},
		{QueueModel{Capacity: 10, ProduceRate: -1}, 0, "ProduceRate"},
		{QueueModel{Capacity: 10, ProduceRate: math.NaN()}, 0, "ProduceRate"},
		{QueueModel{Capacity: 10, ProduceRate: math.Inf(1)}, 0, "ProduceRate"},
		{QueueModel{Capacity: 10, DrainRate: math.Inf(-1)}, 0, "DrainRate"},
		{ok, -1, "depth"},
		{ok, 11, "depth"},
	}
	for i, tt := range tests {
		for _, f := range []func(int) (FillTime, error){tt.q.UntilFull, tt.q.UntilHighWatermark} {
			ft, err := f(tt.depth)
			var qe *QueueError
			if ft != (FillTime{}) || !errors.As(err, &qe) || qe.Field != tt.field || !errors.Is(err, ErrInvalidQueue) {
				t.Errorf("case %d: %+v from depth %d: %v, %v; want *QueueError on %s", i, tt.q, tt.depth, ft, err, tt.field)
			}
		}
	}
	want := "handoff: invalid queue model: HighWatermark = 11: must be in [0, Capacity 10]"
	if err := (QueueModel{Capacity: 10, HighWatermark: 11}).Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
	if got := (FillTime{Never: true}).String() + " " + (FillTime{D: 1500 * time.Millisecond}).String(); got != "never 1.5s" {
		t.Errorf("FillTime strings %q, want %q", got, "never 1.5s")
	}
}

// TestQueueFillTimeProperty checks the float computation against exact
// integer arithmetic for integer rates: D is the exact time rounded up,
// give or take a nanosecond and float64's relative rounding of 2⁻⁵⁰.
func TestQueueFillTimeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(0, 1<<30).Draw(t, "capacity")
		q := QueueModel{
			Capacity:      capacity,
			HighWatermark: rapid.IntRange(0, capacity).Draw(t, "watermark"),
			ProduceRate:   float64(rapid.IntRange(0, 1<<30).Draw(t, "produce")),
			DrainRate:     float64(rapid.IntRange(0, 1<<30).Draw(t, "drain")),
		}
		depth := rapid.IntRange(0, capacity).Draw(t, "depth")
		got, err := q.UntilFull(depth)
		if err != nil {
			t.Fatalf("%+v from %d: %v", q, depth, err)
		}
		switch {
		case depth == capacity:
			if got != (FillTime{}) {
				t.Fatalf("%+v already full: %v, want 0", q, got)
			}
		case q.DrainRate >= q.ProduceRate:
			if !got.Never {
				t.Fatalf("%+v from %d: %v, want never", q, depth, got)
			}
		default:
			num := new(big.Int).Mul(big.NewInt(int64(capacity-depth)), big.NewInt(int64(time.Second)))
			den := big.NewInt(int64(q.ProduceRate - q.DrainRate))
			exact, rem := new(big.Int).QuoRem(num, den, new(big.Int))
			if rem.Sign() != 0 {
				exact.Add(exact, big.NewInt(1))
			}
			slack := 1 + exact.Int64()>>50
			if diff := int64(got.D) - exact.Int64(); got.Never || diff < -slack || diff > slack {
				t.Fatalf("%+v from %d: %v, want %v ± %dns", q, depth, got, time.Duration(exact.Int64()), slack)
			}
		}
	})
}
