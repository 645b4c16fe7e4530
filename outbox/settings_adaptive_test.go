package outbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// TestAdaptivePinSetting: a pin round-trips through EncodeSettings and
// DecodeSettings, and CheckSettings refuses one outside 1 to
// MaxAdaptivePin with a *ConfigError matching ErrInvalidConfig (so a
// decoded row with such a pin has a Fault and no values).
func TestAdaptivePinSetting(t *testing.T) {
	n := 7
	s := outbox.NamespaceSettings{Namespace: "acme", AdaptivePin: &n}
	body := outbox.EncodeSettings(s)
	if !strings.Contains(string(body), `"adaptive_pin":7`) {
		t.Fatalf("EncodeSettings = %s", body)
	}
	var got outbox.NamespaceSettings
	got.Namespace = "acme"
	outbox.DecodeSettings(&got, body)
	if got.Fault != "" || got.AdaptivePin == nil || *got.AdaptivePin != 7 {
		t.Fatalf("DecodeSettings(%s) = %+v", body, got)
	}
	for _, bad := range []int{0, -1, outbox.MaxAdaptivePin + 1} {
		s.AdaptivePin = &bad
		err := outbox.CheckSettings(s)
		var ce *backpressure.ConfigError
		if !errors.Is(err, backpressure.ErrInvalidConfig) || !errors.As(err, &ce) || !strings.Contains(ce.Field, "AdaptivePin") {
			t.Fatalf("CheckSettings(pin %d) = %v", bad, err)
		}
		got = outbox.NamespaceSettings{Namespace: "acme"}
		outbox.DecodeSettings(&got, outbox.EncodeSettings(s))
		if got.Fault == "" || got.AdaptivePin != nil {
			t.Fatalf("decoded pin %d: %+v", bad, got)
		}
	}
}
