package handoff

import (
	"errors"
	"math"
	"math/big"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure"
)

// naiveClass is the seed's decision boundary in unbounded integers, for a
// gate that can exist.
func naiveClass(g backpressure.BackpressureGate) Class {
	switch {
	case g.Enforced:
		return ClassEnforced
	case g.ProducerComplianceVerified:
		return ClassAdvisoryVerified
	}
	required := new(big.Int).Add(big.NewInt(int64(g.HighWatermark)), big.NewInt(int64(g.ProducerMaxInflight)))
	if big.NewInt(int64(g.QueueCapacity)).Cmp(required) < 0 {
		return ClassAdvisoryOverflow
	}
	return ClassAdvisoryHeadroom
}

// checkClass checks that Classify, the naive rule, Verify and
// BackpressureGate.Mode agree on a gate, valid or not, and returns the
// class.
func checkClass(t interface {
	Helper()
	Fatalf(string, ...any)
}, g backpressure.BackpressureGate) Class {
	t.Helper()
	class, err := Classify(g)
	verr := g.Verify()
	mode, merr := g.Mode()
	if g.Validate() != nil {
		if class != 0 || !errors.Is(err, backpressure.ErrInvalidConfig) || err.Error() != verr.Error() {
			t.Fatalf("%+v: Classify = %v, %v; want 0 and Verify's error %v", g, class, err, verr)
		}
		if v, verdictErr := NewVerdict(g, SignalReceipt{}, ComplianceSignature{}, EnforcedBoundReceipt{}); v != (Verdict{}) || !errors.Is(verdictErr, backpressure.ErrInvalidConfig) {
			t.Fatalf("%+v: NewVerdict = %+v, %v; want the zero Verdict and ErrInvalidConfig", g, v, verdictErr)
		}
		return 0
	}
	if err != nil || merr != nil {
		t.Fatalf("%+v: Classify err %v, BackpressureGate.Mode err %v; want nil", g, err, merr)
	}
	if want := naiveClass(g); class != want {
		t.Fatalf("%+v: Classify = %v, want %v as the naive rule", g, class, want)
	}
	if class.Protective() != (verr == nil) || class.Mode() != mode {
		t.Fatalf("%+v: class %v (protective %v, mode %v) disagrees with Verify() = %v, BackpressureGate.Mode = %v",
			g, class, class.Protective(), class.Mode(), verr, mode)
	}
	return class
}

func TestClassifyTable(t *testing.T) {
	const maxInt = math.MaxInt
	tests := []struct {
		name     string
		g        backpressure.BackpressureGate
		class    Class
		required int // for ClassAdvisoryOverflow
	}{
		{"enforced, no headroom", backpressure.BackpressureGate{Enforced: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, ClassEnforced, 0},
		{"enforced and verified", backpressure.BackpressureGate{Enforced: true, ProducerComplianceVerified: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, ClassEnforced, 0},
		{"enforced, in-flight past MaxInt", backpressure.BackpressureGate{Enforced: true, QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: maxInt}, ClassEnforced, 0},
		{"advisory verified, no headroom", backpressure.BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 10, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryVerified, 0},
		{"advisory verified, zero queue", backpressure.BackpressureGate{ProducerComplianceVerified: true, ProducerMaxInflight: 1}, ClassAdvisoryVerified, 0},
		{"headroom to spare", backpressure.BackpressureGate{QueueCapacity: 13, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryHeadroom, 0},
		{"boundary: capacity == watermark + in-flight", backpressure.BackpressureGate{QueueCapacity: 12, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryHeadroom, 0},
		{"one short of the boundary", backpressure.BackpressureGate{QueueCapacity: 11, HighWatermark: 7, ProducerMaxInflight: 5}, ClassAdvisoryOverflow, 12},
		{"zero value", backpressure.BackpressureGate{}, ClassAdvisoryHeadroom, 0},
		{"zero queue, one in flight", backpressure.BackpressureGate{ProducerMaxInflight: 1}, ClassAdvisoryOverflow, 1},
		{"watermark at capacity, nothing in flight", backpressure.BackpressureGate{QueueCapacity: 10, HighWatermark: 10}, ClassAdvisoryHeadroom, 0},
		{"watermark at capacity, one in flight", backpressure.BackpressureGate{QueueCapacity: 10, HighWatermark: 10, ProducerMaxInflight: 1}, ClassAdvisoryOverflow, 11},
		{"zero watermark", backpressure.BackpressureGate{QueueCapacity: 5, ProducerMaxInflight: 5}, ClassAdvisoryHeadroom, 0},
		{"seed trace", backpressure.BackpressureGate{QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}, ClassAdvisoryOverflow, 12_000},
		{"seed trace with headroom", backpressure.BackpressureGate{QueueCapacity: 12_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}, ClassAdvisoryHeadroom, 0},
		{"MaxInt boundary", backpressure.BackpressureGate{QueueCapacity: maxInt, ProducerMaxInflight: maxInt}, ClassAdvisoryHeadroom, 0},
		{"MaxInt one short", backpressure.BackpressureGate{QueueCapacity: maxInt - 1, ProducerMaxInflight: maxInt}, ClassAdvisoryOverflow, maxInt},
		{"sum wraps: MaxInt + 1", backpressure.BackpressureGate{QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: 1}, ClassAdvisoryOverflow, maxInt},
		{"sum wraps: small queue", backpressure.BackpressureGate{QueueCapacity: 5, HighWatermark: 3, ProducerMaxInflight: maxInt}, ClassAdvisoryOverflow, maxInt},
		{"sum wraps: both MaxInt", backpressure.BackpressureGate{QueueCapacity: maxInt, HighWatermark: maxInt, ProducerMaxInflight: maxInt}, ClassAdvisoryOverflow, maxInt},
	}
	for i, tt := range tests {
		if class := checkClass(t, tt.g); class != tt.class {
			t.Errorf("case %d (%s): Classify(%+v) = %v, want %v", i, tt.name, tt.g, class, tt.class)
		}
		var oe *backpressure.AdvisoryOverflowError
		if errors.As(tt.g.Verify(), &oe) && oe.Required != tt.required {
			t.Errorf("case %d (%s): Required = %d, want %d", i, tt.name, oe.Required, tt.required)
		}
	}
}

func TestClassifyAgreesWithVerifyProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.OneOf(rapid.Int(), rapid.IntRange(-3, 20), rapid.IntRange(math.MaxInt-20, math.MaxInt), rapid.IntRange(math.MinInt, math.MinInt+20))
		checkClass(t, backpressure.BackpressureGate{
			Enforced:                   rapid.Bool().Draw(t, "enforced"),
			QueueCapacity:              n.Draw(t, "capacity"),
			HighWatermark:              n.Draw(t, "watermark"),
			ProducerMaxInflight:        n.Draw(t, "inflight"),
			ProducerComplianceVerified: rapid.Bool().Draw(t, "verified"),
		})
	})
}

func TestClassStrings(t *testing.T) {
	classes := map[Class]string{
		0:                     "Class(0)",
		ClassEnforced:         "enforced",
		ClassAdvisoryVerified: "advisory-verified",
		ClassAdvisoryHeadroom: "advisory-headroom",
		ClassAdvisoryOverflow: "advisory-overflow",
		5:                     "Class(5)",
	}
	for c, want := range classes {
		if c.String() != want {
			t.Errorf("Class(%d).String() = %q, want %q", uint8(c), c.String(), want)
		}
	}
	protective := []bool{false, true, true, true, false, false}
	cooperation := []bool{false, false, true, false, false, false}
	modes := []backpressure.Mode{0, backpressure.ModeBackpressureProtective, backpressure.ModeBackpressureProtective, backpressure.ModeBackpressureProtective, backpressure.ModeAddEnforcedCredit, 0}
	for c := range Class(6) {
		if c.Protective() != protective[c] || c.AssumesCooperation() != cooperation[c] || c.Mode() != modes[c] {
			t.Errorf("%v: Protective %v, AssumesCooperation %v, Mode %v; want %v, %v, %v",
				c, c.Protective(), c.AssumesCooperation(), c.Mode(), protective[c], cooperation[c], modes[c])
		}
	}
}

func TestGateVerdictGaps(t *testing.T) {
	enforced := backpressure.BackpressureGate{Enforced: true, QueueCapacity: 100, HighWatermark: 70, ProducerMaxInflight: 50}
	verified := backpressure.BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 100, HighWatermark: 70, ProducerMaxInflight: 50}
	headroom := backpressure.BackpressureGate{QueueCapacity: 120, HighWatermark: 70, ProducerMaxInflight: 50}
	overflow := backpressure.BackpressureGate{QueueCapacity: 100, HighWatermark: 70, ProducerMaxInflight: 50}
	credit := SignalReceipt{Kind: SignalCredit}
	retry := SignalReceipt{Kind: SignalRetryAfter, Acknowledged: true}
	met := ComplianceSignature{Verdict: ComplianceMet}
	tests := []struct {
		g         backpressure.BackpressureGate
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
		v, err := NewVerdict(tt.g, tt.signal, tt.comp, tt.bound)
		if err != nil {
			t.Fatalf("case %d: NewVerdict(%+v) error %v", i, tt.g, err)
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
