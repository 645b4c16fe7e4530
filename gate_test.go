package backpressure

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
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

// checkGateVerdict checks that Verify, Class and DispatchBackpressureMode agree
// on a valid gate and with the naive rule, and returns the class.
func checkGateVerdict(t gateFatalfer, g BackpressureGate) GateClass {
	t.Helper()
	err := g.Verify()
	class, cerr := g.Class()
	mode, merr := DispatchBackpressureMode(g)
	if cerr != nil || merr != nil {
		t.Fatalf("%+v: Class err = %v, DispatchBackpressureMode err = %v, want nil", g, cerr, merr)
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
		if !errors.Is(err, ErrAdvisoryOverflow) || errors.Is(err, ErrInvalidGate) {
			t.Fatalf("%+v: %v matches ErrAdvisoryOverflow %v, ErrInvalidGate %v; want true, false", g, err,
				errors.Is(err, ErrAdvisoryOverflow), errors.Is(err, ErrInvalidGate))
		}
		wantRequired, _ := addOver(g.HighWatermark, g.ProducerMaxInflight, false)
		if oe.QueueCapacity != g.QueueCapacity || oe.Required != wantRequired ||
			oe.HighWatermark != g.HighWatermark || oe.ProducerMaxInflight != g.ProducerMaxInflight {
			t.Fatalf("%+v: error fields %+v, want capacity, required %d, watermark and in-flight of the gate", g, *oe, wantRequired)
		}
	}
	if (err == nil) != class.Protective() {
		t.Fatalf("%+v: Verify() = %v but class %v", g, err, class)
	}
	if mode.String() != seedGateDispatch(g) || mode != class.Mode() {
		t.Fatalf("%+v: DispatchBackpressureMode = %v, want %s (class %v)", g, mode, seedGateDispatch(g), class)
	}
	return class
}

func TestGateVerifyTable(t *testing.T) {
	const maxInt = math.MaxInt
	tests := []struct {
		name     string
		g        BackpressureGate
		class    GateClass
		required int // for ClassAdvisoryOverflow
	}{
		{"enforced, no headroom", BackpressureGate{Enforced: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, ClassEnforced, 0},
		{"enforced and verified", BackpressureGate{Enforced: true, ProducerComplianceVerified: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, ClassEnforced, 0},
		{"enforced, in-flight past MaxInt", BackpressureGate{Enforced: true, QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: maxInt}, ClassEnforced, 0},
		{"advisory verified, no headroom", BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryVerified, 0},
		{"advisory verified, zero queue", BackpressureGate{ProducerComplianceVerified: true, ProducerMaxInflight: 1}, ClassAdvisoryVerified, 0},
		{"headroom to spare", BackpressureGate{QueueCapacity: 13, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryHeadroom, 0},
		{"boundary: capacity == watermark + in-flight", BackpressureGate{QueueCapacity: 12, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryHeadroom, 0},
		{"one short of the boundary", BackpressureGate{QueueCapacity: 11, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryOverflow, 12},
		{"zero value", BackpressureGate{}, ClassAdvisoryHeadroom, 0},
		{"zero queue, one in flight", BackpressureGate{ProducerMaxInflight: 1}, ClassAdvisoryOverflow, 1},
		{"watermark at capacity, nothing in flight", BackpressureGate{QueueCapacity: 10, HighWatermark: 10}, ClassAdvisoryHeadroom, 0},
		{"watermark at capacity, one in flight", BackpressureGate{QueueCapacity: 10, HighWatermark: 10, ProducerMaxInflight: 1}, ClassAdvisoryOverflow, 11},
		{"zero watermark", BackpressureGate{QueueCapacity: 5, ProducerMaxInflight: 5}, ClassAdvisoryHeadroom, 0},
		{"seed trace", BackpressureGate{QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}, ClassAdvisoryOverflow, 12_000},
		{"seed trace with headroom", BackpressureGate{QueueCapacity: 12_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}, ClassAdvisoryHeadroom, 0},
		{"MaxInt boundary", BackpressureGate{QueueCapacity: maxInt, ProducerMaxInflight: maxInt}, ClassAdvisoryHeadroom, 0},
		{"MaxInt one short", BackpressureGate{QueueCapacity: maxInt - 1, ProducerMaxInflight: maxInt}, ClassAdvisoryOverflow, maxInt},
		{"sum wraps: MaxInt + 1", BackpressureGate{QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: 1}, ClassAdvisoryOverflow, maxInt},
		{"sum wraps: small queue", BackpressureGate{QueueCapacity: 5, HighWatermark: 3, ProducerMaxInflight: maxInt}, ClassAdvisoryOverflow, maxInt},
		{"sum wraps: both MaxInt", BackpressureGate{QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: maxInt}, ClassAdvisoryOverflow, maxInt},
	}
	for i, tt := range tests {
		if err := tt.g.Validate(); err != nil {
			t.Fatalf("case %d (%s): Validate(%+v) = %v, want nil", i, tt.name, tt.g, err)
		}
		class := checkGateVerdict(t, tt.g)
		if class != tt.class {
			t.Errorf("case %d (%s): Class(%+v) = %v, want %v", i, tt.name, tt.g, class, tt.class)
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
		var ge *GateError
		if !errors.As(err, &ge) || ge.Field != tt.field {
			t.Errorf("case %d: Verify(%+v) = %v, want *GateError on %s", i, tt.g, err, tt.field)
			continue
		}
		checkInvalidGate(t, tt.g, err)
	}
}

// checkInvalidGate checks every entry point's answer for an invalid gate.
func checkInvalidGate(t gateFatalfer, g BackpressureGate, err error) {
	t.Helper()
	var oe *AdvisoryOverflowError
	if !errors.Is(err, ErrInvalidGate) || errors.As(err, &oe) || errors.Is(err, ErrAdvisoryOverflow) {
		t.Fatalf("%+v: Verify() = %v, want ErrInvalidGate and no overflow verdict", g, err)
	}
	if verr := g.Validate(); verr == nil || verr.Error() != err.Error() {
		t.Fatalf("%+v: Validate() = %v, want %v", g, verr, err)
	}
	if class, cerr := g.Class(); class != 0 || !errors.Is(cerr, ErrInvalidGate) {
		t.Fatalf("%+v: Class() = %v, %v; want 0, ErrInvalidGate", g, class, cerr)
	}
	if mode, merr := DispatchBackpressureMode(g); mode != 0 || !errors.Is(merr, ErrInvalidGate) {
		t.Fatalf("%+v: DispatchBackpressureMode = %v, %v; want 0, ErrInvalidGate", g, mode, merr)
	}
	if v, verr := g.Verdict(SignalReceipt{}, ComplianceSignature{}, EnforcedBoundReceipt{}); v.Class != 0 || !errors.Is(verr, ErrInvalidGate) {
		t.Fatalf("%+v: Verdict = %+v, %v; want zero, ErrInvalidGate", g, v, verr)
	}
}

func TestGateError(t *testing.T) {
	err := BackpressureGate{QueueCapacity: 10, HighWatermark: 11}.Verify()
	want := "backpressure: invalid gate: HighWatermark = 11: above QueueCapacity 10"
	if err == nil || err.Error() != want {
		t.Errorf("Verify() = %v, want %q", err, want)
	}
}

func TestGateClassAndModeStrings(t *testing.T) {
	classes := map[GateClass]string{
		0:                     "GateClass(0)",
		ClassEnforced:         "enforced",
		ClassAdvisoryVerified: "advisory-verified",
		ClassAdvisoryHeadroom: "advisory-headroom",
		ClassAdvisoryOverflow: "advisory-overflow",
		5:                     "GateClass(5)",
	}
	for c, want := range classes {
		if c.String() != want {
			t.Errorf("GateClass(%d).String() = %q, want %q", uint8(c), c.String(), want)
		}
	}
	protective := []bool{false, true, true, true, false, false}
	cooperation := []bool{false, false, true, false, false, false}
	modes := []Mode{0, ModeBackpressureProtective, ModeBackpressureProtective, ModeBackpressureProtective, ModeAddEnforcedCredit, 0}
	for c := range GateClass(6) {
		if c.Protective() != protective[c] || c.AssumesCooperation() != cooperation[c] || c.Mode() != modes[c] {
			t.Errorf("%v: Protective %v, AssumesCooperation %v, Mode %v; want %v, %v, %v",
				c, c.Protective(), c.AssumesCooperation(), c.Mode(), protective[c], cooperation[c], modes[c])
		}
	}
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
		var ge *GateError
		switch {
		case err == nil, errors.As(err, &oe), errors.As(err, &ge):
		default:
			t.Fatalf("%+v: Verify() = %T %v, want nil, *AdvisoryOverflowError or *GateError", g, err, err)
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

func TestGateVerdictGaps(t *testing.T) {
	enforced := BackpressureGate{Enforced: true, QueueCapacity: 100, HighWatermark: 70, ProducerMaxInflight: 50}
	verified := BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 100, HighWatermark: 70, ProducerMaxInflight: 50}
	headroom := BackpressureGate{QueueCapacity: 120, HighWatermark: 70, ProducerMaxInflight: 50}
	overflow := BackpressureGate{QueueCapacity: 100, HighWatermark: 70, ProducerMaxInflight: 50}
	credit := SignalReceipt{Kind: SignalCredit}
	retry := SignalReceipt{Kind: SignalRetryAfter, Acknowledged: true}
	met := ComplianceSignature{Verdict: ComplianceMet}
	tests := []struct {
		g         BackpressureGate
		signal    SignalReceipt
		comp      ComplianceSignature
		bound     EnforcedBoundReceipt
		gaps      []string
		checkable bool
	}{
		{enforced, credit, ComplianceSignature{}, EnforcedBoundReceipt{Kind: BoundCredit, Limit: 100}, nil, true},
		{enforced, SignalReceipt{Kind: SignalHardReject}, ComplianceSignature{}, EnforcedBoundReceipt{Kind: BoundHardDrop, Limit: 0}, nil, true},
		{enforced, SignalReceipt{}, ComplianceSignature{}, EnforcedBoundReceipt{}, []string{
			"signal receipt: want an enforced kind, have SignalKind(0)",
			"enforced-bound receipt: want a kind and 0 ≤ limit ≤ capacity 100, have BoundKind(0) limit 0",
		}, false},
		{enforced, retry, ComplianceSignature{}, EnforcedBoundReceipt{Kind: BoundWindow, Limit: 101}, []string{
			"signal receipt: want an enforced kind, have retry-after",
			"enforced-bound receipt: want a kind and 0 ≤ limit ≤ capacity 100, have window limit 101",
		}, false},
		{enforced, credit, ComplianceSignature{}, EnforcedBoundReceipt{Kind: BoundCredit, Limit: -1}, []string{
			"enforced-bound receipt: want a kind and 0 ≤ limit ≤ capacity 100, have credit limit -1",
		}, false},
		{verified, retry, met, EnforcedBoundReceipt{}, nil, true},
		{verified, SignalReceipt{Kind: SignalNackHint}, met, EnforcedBoundReceipt{}, []string{
			"signal receipt: not acknowledged by the producer",
		}, false},
		{verified, credit, ComplianceSignature{Verdict: ComplianceBreached}, EnforcedBoundReceipt{}, []string{
			"signal receipt: want an advisory kind, have credit",
			"producer-compliance signature: want compliant, have non-compliant",
		}, false},
		{verified, retry, ComplianceSignature{Verdict: ComplianceInGrace}, EnforcedBoundReceipt{}, []string{
			"producer-compliance signature: want compliant, have in-grace",
		}, false},
		{headroom, SignalReceipt{Kind: SignalHighWatermark}, ComplianceSignature{}, EnforcedBoundReceipt{}, nil, true},
		{headroom, SignalReceipt{}, ComplianceSignature{}, EnforcedBoundReceipt{}, []string{
			"signal receipt: want an advisory kind, have SignalKind(0)",
		}, false},
		// An overflow claims no protection, so nothing is missing and nothing is checkable.
		{overflow, retry, met, EnforcedBoundReceipt{Kind: BoundCredit, Limit: 10}, nil, false},
	}
	for i, tt := range tests {
		v, err := tt.g.Verdict(tt.signal, tt.comp, tt.bound)
		if err != nil {
			t.Fatalf("case %d: Verdict(%+v) error %v", i, tt.g, err)
		}
		if gaps := v.Gaps(); !slices.Equal(gaps, tt.gaps) || v.Checkable() != tt.checkable {
			t.Errorf("case %d: %v verdict with %+v, %+v, %+v: Gaps() = %q, Checkable() = %v; want %q, %v",
				i, v.Class, tt.signal, tt.comp, tt.bound, gaps, v.Checkable(), tt.gaps, tt.checkable)
		}
		if v.Protective() != (tt.g.Verify() == nil) || v.Mode() != v.Class.Mode() {
			t.Errorf("case %d: Protective() = %v, Mode() = %v; disagree with Verify() = %v", i, v.Protective(), v.Mode(), tt.g.Verify())
		}
	}
	var zero Verdict
	if zero.Protective() || zero.Checkable() || zero.Gaps() != nil {
		t.Errorf("zero Verdict: Protective %v, Checkable %v, Gaps %q; want false, false, nil", zero.Protective(), zero.Checkable(), zero.Gaps())
	}
}

func TestGateSignalAndBoundKinds(t *testing.T) {
	tests := []struct {
		k                 SignalKind
		name              string
		enforced, advisry bool
	}{
		{0, "SignalKind(0)", false, false},
		{SignalCredit, "credit", true, false},
		{SignalWindow, "window", true, false},
		{SignalHardReject, "hard-reject", true, false},
		{SignalHighWatermark, "high-watermark", false, true},
		{SignalRetryAfter, "retry-after", false, true},
		{SignalNackHint, "nack-hint", false, true},
		{7, "SignalKind(7)", false, false},
	}
	for _, tt := range tests {
		if tt.k.String() != tt.name || tt.k.Enforced() != tt.enforced || tt.k.Advisory() != tt.advisry ||
			(SignalReceipt{Kind: tt.k}).Enforced() != tt.enforced {
			t.Errorf("SignalKind(%d): %q enforced %v advisory %v; want %q, %v, %v",
				uint8(tt.k), tt.k, tt.k.Enforced(), tt.k.Advisory(), tt.name, tt.enforced, tt.advisry)
		}
	}
	for k, want := range map[BoundKind]string{0: "BoundKind(0)", BoundCredit: "credit", BoundWindow: "window", BoundHardDrop: "hard-drop", 4: "BoundKind(4)"} {
		if k.String() != want {
			t.Errorf("BoundKind(%d).String() = %q, want %q", uint8(k), k.String(), want)
		}
	}
	if (EnforcedBoundReceipt{Kind: 4, Limit: 1}).holds(10) {
		t.Errorf("an unknown BoundKind holds")
	}
}
