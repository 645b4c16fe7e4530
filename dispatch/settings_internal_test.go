package dispatch

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// TestCheckSettingsMatchesNew checks outbox.CheckSettings, which checks a
// setting's values itself (outbox imports nothing of the planner's),
// against the reference it stands for: backpressure.New on a code
// configuration with the setting applied (applySettings), unpaused so that
// a pause cannot hide a bad quota. Both accept the same settings and refuse
// the others with the same *ConfigError (field, value and reason), for
// values on and around every bound and namespaces no row can have.
// (AdaptivePin, which no Config holds, is left unset.)
func TestCheckSettingsMatchesNew(t *testing.T) {
	f, err := backpressure.AllShards(1)
	if err != nil {
		t.Fatal(err)
	}
	base := backpressure.Config{BatchSize: 1, DefaultQuota: backpressure.Unlimited}
	rapid.Check(t, func(t *rapid.T) {
		s := outbox.NamespaceSettings{
			Namespace: rapid.SampledFrom([]string{"acme", "", "a\x00b", "\xff", string(make([]byte, outbox.MaxNamespaceBytes+1))}).Draw(t, "namespace"),
			Paused:    rapid.Bool().Draw(t, "paused"),
		}
		if rapid.Bool().Draw(t, "quota") {
			q := rapid.SampledFrom([]int{-5, -2, backpressure.Unlimited, 0, 1, 7, math.MaxInt}).Draw(t, "q")
			s.Quota = &q
		}
		if rapid.Bool().Draw(t, "weight") {
			w := rapid.SampledFrom([]int{-1, 0, 1, 2, 1 << 20, 1<<20 + 1}).Draw(t, "w")
			s.Weight = &w
		}
		if rapid.Bool().Draw(t, "rate") {
			r := outbox.Rate{
				PerSecond: rapid.SampledFrom([]float64{0, -1, 0.5, 1e9, 1e9 + 1, math.NaN(), math.Inf(1)}).Draw(t, "perSecond"),
				Burst:     rapid.SampledFrom([]int{-1, 0, 1, 1 << 30, 1<<30 + 1}).Draw(t, "burst"),
			}
			s.Rate = &r
		}
		got := outbox.CheckSettings(s)
		unpaused := s
		unpaused.Paused = false
		_, want := backpressure.New(applySettings(base, []outbox.NamespaceSettings{unpaused}), f)
		if (got == nil) != (want == nil) || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("CheckSettings(%+v) = %v; New with it applied = %v", s, got, want)
		}
		var ce *backpressure.ConfigError
		if got != nil && (!errors.As(got, &ce) || !errors.Is(got, backpressure.ErrInvalidConfig)) {
			t.Fatalf("CheckSettings(%+v) = %v, want a *ConfigError matching ErrInvalidConfig", s, got)
		}
	})
}
