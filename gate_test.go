package backpressure

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

// gateFatalfer is what the checks need of *testing.T and *rapid.T alike.
type gateFatalfer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// seedGateVerify is the naive rule, in unbounded integers: an enforced or
// verified-compliant channel is protective (""); an advisory, unverified
// one is protective only if capacity ≥ watermark + in-flight, and
// otherwise it returns the AdvisoryOverflowError's message.
func seedGateVerify(g BackpressureGate) string {
	if g.Enforced || g.ProducerComplianceVerified {
		return ""
	}
	required := new(big.Int).Add(big.NewInt(int64(g.HighWatermark)), big.NewInt(int64(g.ProducerMaxInflight)))
	if big.NewInt(int64(g.QueueCapacity)).Cmp(required) < 0 {
		return fmt.Sprintf("queue capacity %d < required %s (watermark %d + inflight %d): advisory signal cannot prevent overflow",
			g.QueueCapacity, required, g.HighWatermark, g.ProducerMaxInflight)
	}
	return ""
}

// seedGateDispatch is the naive mode rule: add enforced credit exactly when
// seedGateVerify reports an overflow.
func seedGateDispatch(g BackpressureGate) string {
	if seedGateVerify(g) != "" {
		return "add-enforced-credit"
	}
	return "backpressure-protective"
}

// checkGateVerdict checks that Verify and BackpressureGate.Mode agree on
// a valid gate and with the naive rule, and returns whether the gate is
// protective.
func checkGateVerdict(t gateFatalfer, g BackpressureGate) bool {
	t.Helper()
	err := g.Verify()
	mode, merr := g.Mode()
	if merr != nil {
		t.Fatalf("%+v: BackpressureGate.Mode err = %v, want nil", g, merr)
	}
	want := seedGateVerify(g)
	if want == "" {
		if err != nil {
			t.Fatalf("%+v: Verify() = %v, want nil as the naive rule", g, err)
		}
	} else {
		var oe *AdvisoryOverflowError
		if !errors.As(err, &oe) {
			t.Fatalf("%+v: Verify() = %v, want *AdvisoryOverflowError as the naive rule", g, err)
		}
		if got := oe.Error(); got != "backpressure: "+want {
			t.Fatalf("%+v: message %q, want %q", g, got, "backpressure: "+want)
		}
		if errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%+v: overflow verdict %v matches ErrInvalidConfig", g, err)
		}
		wantRequired, _ := addOver(g.HighWatermark, g.ProducerMaxInflight, false)
		if oe.QueueCapacity != g.QueueCapacity || oe.Required != wantRequired ||
			oe.HighWatermark != g.HighWatermark || oe.ProducerMaxInflight != g.ProducerMaxInflight {
			t.Fatalf("%+v: error fields %+v, want capacity, required %d, watermark and in-flight of the gate", g, *oe, wantRequired)
		}
	}
	if mode.String() != seedGateDispatch(g) {
		t.Fatalf("%+v: BackpressureGate.Mode = %v, want %s", g, mode, seedGateDispatch(g))
	}
	return err == nil
}

func TestGateVerifyTable(t *testing.T) {
	const maxInt = math.MaxInt
	tests := []struct {
		name     string
		g        BackpressureGate
		protect  bool
		required int // for an overflow verdict
	}{
		{"enforced, no headroom", BackpressureGate{Enforced: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, true, 0},
		{"enforced and verified", BackpressureGate{Enforced: true, ProducerComplianceVerified: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, true, 0},
		{"enforced, in-flight past MaxInt", BackpressureGate{Enforced: true, QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: maxInt}, true, 0},
		{"advisory verified, no headroom", BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, true, 0},
		{"advisory verified, zero queue", BackpressureGate{ProducerComplianceVerified: true, ProducerMaxInflight: 1}, true, 0},
		{"headroom to spare", BackpressureGate{QueueCapacity: 13, HighWatermark: 7, ProducerMaxInflight: 5}, true, 0},
		{"boundary: capacity == watermark + in-flight", BackpressureGate{QueueCapacity: 12, HighWatermark: 7, ProducerMaxInflight: 5}, true, 0},
		{"one short of the boundary", BackpressureGate{QueueCapacity: 11, HighWatermark: 7, ProducerMaxInflight: 5}, false, 12},
		{"zero value", BackpressureGate{}, true, 0},
		{"zero queue, one in flight", BackpressureGate{ProducerMaxInflight: 1}, false, 1},
		{"watermark at capacity, nothing in flight", BackpressureGate{QueueCapacity: 10, HighWatermark: 10}, true, 0},
		{"watermark at capacity, one in flight", BackpressureGate{QueueCapacity: 10, HighWatermark: 10, ProducerMaxInflight: 1}, false, 11},
		{"zero watermark", BackpressureGate{QueueCapacity: 5, ProducerMaxInflight: 5}, true, 0},
		{"seed trace", BackpressureGate{QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}, false, 12_000},
		{"seed trace with headroom", BackpressureGate{QueueCapacity: 12_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}, true, 0},
		{"MaxInt boundary", BackpressureGate{QueueCapacity: maxInt, ProducerMaxInflight: maxInt}, true, 0},
		{"MaxInt one short", BackpressureGate{QueueCapacity: maxInt - 1, ProducerMaxInflight: maxInt}, false, maxInt},
		{"sum wraps: MaxInt + 1", BackpressureGate{QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: 1}, false, maxInt},
		{"sum wraps: small queue", BackpressureGate{QueueCapacity: 5, HighWatermark: 3, ProducerMaxInflight: maxInt}, false, maxInt},
		{"sum wraps: both MaxInt", BackpressureGate{QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: maxInt}, false, maxInt},
	}
	for i, tt := range tests {
		if err := tt.g.Validate(); err != nil {
			t.Fatalf("case %d (%s): Validate(%+v) = %v, want nil", i, tt.name, tt.g, err)
		}
		if protect := checkGateVerdict(t, tt.g); protect != tt.protect {
			t.Errorf("case %d (%s): Verify(%+v) protective %v, want %v", i, tt.name, tt.g, protect, tt.protect)
		}
		var oe *AdvisoryOverflowError
		if errors.As(tt.g.Verify(), &oe) && oe.Required != tt.required {
			t.Errorf("case %d (%s): Required = %d, want %d", i, tt.name, oe.Required, tt.required)
		}
	}
}

func TestGateOverflowMessage(t *testing.T) {
	tests := []struct {
		g    BackpressureGate
		want string
	}{
		{BackpressureGate{QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
			"backpressure: queue capacity 10000 < required 12000 (watermark 7000 + inflight 5000): advisory signal cannot prevent overflow"},
		// The message states the exact sum even where Required saturates.
		{BackpressureGate{QueueCapacity: math.MaxInt, HighWatermark: math.MaxInt, ProducerMaxInflight: 1},
			"backpressure: queue capacity 9223372036854775807 < required 9223372036854775808 (watermark 9223372036854775807 + inflight 1): advisory signal cannot prevent overflow"},
	}
	for i, tt := range tests {
		err := tt.g.Verify()
		if err == nil || err.Error() != tt.want {
			t.Errorf("case %d: Verify(%+v) = %v, want %q", i, tt.g, err, tt.want)
		}
	}
}

// TestGateOverflowMessageHandBuilt: an error built by hand with negative
// numbers states its Required as the signed value given, not as the uint64
// it wraps to.
func TestGateOverflowMessageHandBuilt(t *testing.T) {
	err := &AdvisoryOverflowError{QueueCapacity: 1, Required: -5, HighWatermark: -2, ProducerMaxInflight: -3}
	want := "backpressure: queue capacity 1 < required -5 (watermark -2 + inflight -3): advisory signal cannot prevent overflow"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	err = &AdvisoryOverflowError{QueueCapacity: 1, Required: math.MinInt, HighWatermark: 4, ProducerMaxInflight: -1}
	want = "backpressure: queue capacity 1 < required -9223372036854775808 (watermark 4 + inflight -1): advisory signal cannot prevent overflow"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestGateInvalidTable(t *testing.T) {
	tests := []struct {
		g     BackpressureGate
		field string
	}{
		{BackpressureGate{QueueCapacity: -1}, "QueueCapacity"},
		{BackpressureGate{QueueCapacity: math.MinInt, HighWatermark: -5}, "QueueCapacity"},
		{BackpressureGate{QueueCapacity: 10, HighWatermark: -1}, "HighWatermark"},
		{BackpressureGate{QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: -1}, "ProducerMaxInflight"},
		{BackpressureGate{QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: math.MinInt}, "ProducerMaxInflight"},
		{BackpressureGate{QueueCapacity: 10, HighWatermark: 11}, "HighWatermark"},
		{BackpressureGate{HighWatermark: 1}, "HighWatermark"},
		// Enforced or verified makes no difference to what can exist.
		{BackpressureGate{Enforced: true, QueueCapacity: 10, HighWatermark: 11}, "HighWatermark"},
		{BackpressureGate{Enforced: true, QueueCapacity: -1}, "QueueCapacity"},
		{BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 10, ProducerMaxInflight: -3}, "ProducerMaxInflight"},
	}
	for i, tt := range tests {
		err := tt.g.Verify()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "BackpressureGate."+tt.field {
			t.Errorf("case %d: Verify(%+v) = %v, want *ConfigError on BackpressureGate.%s", i, tt.g, err, tt.field)
			continue
		}
		checkInvalidGate(t, tt.g, err)
	}
}

// checkInvalidGate checks every entry point's answer for an invalid gate.
func checkInvalidGate(t gateFatalfer, g BackpressureGate, err error) {
	t.Helper()
	var oe *AdvisoryOverflowError
	if !errors.Is(err, ErrInvalidConfig) || errors.As(err, &oe) {
		t.Fatalf("%+v: Verify() = %v, want ErrInvalidConfig and no overflow verdict", g, err)
	}
	if verr := g.Validate(); verr == nil || verr.Error() != err.Error() {
		t.Fatalf("%+v: Validate() = %v, want %v", g, verr, err)
	}
	if mode, merr := g.Mode(); mode != 0 || merr == nil || merr.Error() != err.Error() {
		t.Fatalf("%+v: BackpressureGate.Mode = %v, %v; want 0, %v", g, mode, merr, err)
	}
}

func TestGateError(t *testing.T) {
	err := BackpressureGate{QueueCapacity: 10, HighWatermark: 11}.Verify()
	want := "backpressure: invalid config: BackpressureGate.HighWatermark = 11: above QueueCapacity 10"
	if err == nil || err.Error() != want {
		t.Errorf("Verify() = %v, want %q", err, want)
	}
}

func TestGateModeStrings(t *testing.T) {
	for m, want := range map[Mode]string{0: "Mode(0)", ModeBackpressureProtective: "backpressure-protective", ModeAddEnforcedCredit: "add-enforced-credit", 9: "Mode(9)"} {
		if m.String() != want {
			t.Errorf("Mode(%d).String() = %q, want %q", uint8(m), m.String(), want)
		}
	}
}

// anyGateDraw draws any gate at all, leaning on the values where arithmetic
// goes wrong.
func anyGateDraw(t *rapid.T) BackpressureGate {
	n := rapid.OneOf(rapid.Int(), rapid.IntRange(-3, 20), rapid.IntRange(math.MaxInt-20, math.MaxInt), rapid.IntRange(math.MinInt, math.MinInt+20))
	return BackpressureGate{
		Enforced:                   rapid.Bool().Draw(t, "enforced"),
		QueueCapacity:              n.Draw(t, "capacity"),
		HighWatermark:              n.Draw(t, "watermark"),
		ProducerMaxInflight:        n.Draw(t, "inflight"),
		ProducerComplianceVerified: rapid.Bool().Draw(t, "verified"),
	}
}

// validGateDraw draws a gate that can exist, with in-flight counts near the
// headroom as often as not so that the boundary is exercised.
func validGateDraw(t *rapid.T) BackpressureGate {
	capacity := rapid.OneOf(rapid.IntRange(0, 30), rapid.IntRange(0, math.MaxInt), rapid.IntRange(math.MaxInt-30, math.MaxInt)).Draw(t, "capacity")
	watermark := rapid.OneOf(rapid.IntRange(0, capacity), rapid.IntRange(max(0, capacity-3), capacity)).Draw(t, "watermark")
	headroom := capacity - watermark
	var inflight int
	if rapid.Bool().Draw(t, "near boundary") {
		offset := rapid.IntRange(-2, 2).Draw(t, "offset")
		if offset > 0 && headroom > math.MaxInt-offset {
			inflight = math.MaxInt
		} else {
			inflight = max(0, headroom+offset)
		}
	} else {
		inflight = rapid.OneOf(rapid.IntRange(0, 30), rapid.IntRange(0, math.MaxInt), rapid.IntRange(math.MaxInt-30, math.MaxInt)).Draw(t, "inflight")
	}
	return BackpressureGate{
		Enforced:                   rapid.Bool().Draw(t, "enforced"),
		QueueCapacity:              capacity,
		HighWatermark:              watermark,
		ProducerMaxInflight:        inflight,
		ProducerComplianceVerified: rapid.Bool().Draw(t, "verified"),
	}
}

// invalidGateDraw draws a gate that cannot exist, one defect at a time or
// several.
func invalidGateDraw(t *rapid.T) BackpressureGate {
	g := anyGateDraw(t)
	negative := rapid.IntRange(math.MinInt, -1)
	switch rapid.IntRange(0, 3).Draw(t, "defect") {
	case 0:
		g.QueueCapacity = negative.Draw(t, "negative capacity")
	case 1:
		g.HighWatermark = negative.Draw(t, "negative watermark")
	case 2:
		g.ProducerMaxInflight = negative.Draw(t, "negative inflight")
	case 3:
		if g.QueueCapacity == math.MaxInt {
			g.QueueCapacity--
		}
		g.HighWatermark = rapid.IntRange(g.QueueCapacity+1, math.MaxInt).Draw(t, "watermark above capacity")
	}
	return g
}

func TestGateVerifyNeverPanicsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := anyGateDraw(t)
		err := g.Verify()
		var oe *AdvisoryOverflowError
		var ce *ConfigError
		switch {
		case err == nil, errors.As(err, &oe), errors.As(err, &ce):
		default:
			t.Fatalf("%+v: Verify() = %T %v, want nil, *AdvisoryOverflowError or *ConfigError", g, err, err)
		}
		if g.Validate() != nil {
			checkInvalidGate(t, g, err)
		} else {
			checkGateVerdict(t, g)
		}
	})
}

func TestGateVerifyMatchesSeedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := validGateDraw(t)
		if err := g.Validate(); err != nil {
			t.Fatalf("validGateDraw drew %+v: %v", g, err)
		}
		checkGateVerdict(t, g)
	})
}

func TestGateProtectiveMonotoneInCapacityProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := validGateDraw(t)
		bigger := g
		bigger.QueueCapacity = rapid.IntRange(g.QueueCapacity, math.MaxInt).Draw(t, "bigger capacity")
		if g.Verify() == nil && bigger.Verify() != nil {
			t.Fatalf("Verify(%+v) = nil but Verify(capacity %d) = %v", g, bigger.QueueCapacity, bigger.Verify())
		}
	})
}

func TestGateInvalidProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := invalidGateDraw(t)
		checkInvalidGate(t, g, g.Verify())
	})
}
