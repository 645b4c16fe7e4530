package dispatch

import (
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure/outbox"
)

// Against the switch it replaced: for any Options, mostly at and around
// the bounds, the table of optionRules refuses exactly what the switch
// refused, with the same *OptionError (field and reason, so the same
// message), and fills in the same defaults for what it accepts.
func TestOptionRulesAgainstReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		for range 20 { // many draws a check: most Options fail an early rule
			o := drawOptions(rt)
			got, err := o.withDefaults()
			want, wantErr := referenceWithDefaults(o)
			if wantErr != nil {
				var oe *OptionError
				require.ErrorAs(rt, err, &oe)
				require.Equal(rt, wantErr, err)
				require.Equal(rt, wantErr.Error(), err.Error())
				continue
			}
			require.NoError(rt, err)
			// The result options came after the switch: their checks and
			// defaults are TestResultOptionsRefused's and TestResults'.
			got.MaxSnoozes, got.OverloadSnooze, got.RetryPolicies = o.MaxSnoozes, o.OverloadSnooze, o.RetryPolicies
			require.Equal(rt, want, got)
		}
	})
}

// TestOptionRulesNameFields: every rule names a field of Options (or of a
// Backoff in one), so an OptionError's Field is one a caller can find.
func TestOptionRulesNameFields(t *testing.T) {
	fields := map[string]bool{}
	for _, f := range []string{"Workers", "Queue", "QueueHighWatermark", "PollInterval", "PollJitter", "CompleteBatch",
		"FlushInterval", "CompletionBacklog", "LeaseRenewal", "Coalesce", "ClaimsInFlight", "ShutdownTimeout"} {
		fields[f] = true
	}
	for _, b := range []string{"Backoff", "ErrorBackoff"} {
		for _, f := range []string{"Base", "Max", "Jitter"} {
			fields[b+"."+f] = true
		}
	}
	for _, f := range []string{"Floor", "Increase", "Decrease", "Window"} {
		fields["Adaptive."+f] = true
	}
	for _, r := range optionRules {
		require.True(t, fields[r.name], "rule for %q", r.name)
	}
}

func drawOptions(t *rapid.T) Options {
	ints := func(name string, bounds ...int) int {
		var near []int
		for _, b := range append(bounds, 0) {
			near = append(near, b-1, b, b+1)
		}
		near = append(near, math.MaxInt, math.MinInt)
		if rapid.Bool().Draw(t, name+" any") {
			return rapid.Int().Draw(t, name)
		}
		return rapid.SampledFrom(near).Draw(t, name)
	}
	durations := func(name string, bounds ...time.Duration) time.Duration {
		var near []time.Duration
		for _, b := range append(bounds, 0, time.Second) {
			near = append(near, b-1, b, b+1, -b)
		}
		if rapid.Bool().Draw(t, name+" any") {
			return time.Duration(rapid.Int64().Draw(t, name))
		}
		return rapid.SampledFrom(near).Draw(t, name)
	}
	floats := func(name string) float64 {
		if rapid.Bool().Draw(t, name+" any") {
			return rapid.Float64Range(-2, 2).Draw(t, name)
		}
		return rapid.SampledFrom([]float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 0, 1e-300, MinLeaseRenewal, math.Nextafter(MinLeaseRenewal, 0), 0.2, 0.5, math.Nextafter(0.5, 1), 0.6, 1, math.Nextafter(1, 2), 1.5}).Draw(t, name)
	}
	backoff := func(name string) Backoff {
		return Backoff{
			Base:   durations(name+".Base", MinErrorBackoff, time.Hour, outbox.MaxDelay),
			Max:    durations(name+".Max", MinErrorBackoff, time.Hour, outbox.MaxDelay),
			Jitter: floats(name + ".Jitter"),
		}
	}
	// Each field is valid, at its zero value, most of the time, so that
	// the draws reach the later rules.
	zeroOr := func(name string, draw func()) {
		if rapid.IntRange(0, 3).Draw(t, name+" set") == 0 {
			draw()
		}
	}
	o := Options{Workers: 4, Logger: slog.Default()}
	zeroOr("Workers", func() { o.Workers = ints("Workers", 1, MaxWorkers) })
	zeroOr("Queue", func() { o.Queue = ints("Queue", MaxQueue, 20) })
	zeroOr("QueueHighWatermark", func() { o.QueueHighWatermark = ints("QueueHighWatermark", o.Queue, 3) })
	zeroOr("PollInterval", func() { o.PollInterval = durations("PollInterval", MinPollInterval, time.Millisecond) })
	zeroOr("PollJitter", func() { o.PollJitter = floats("PollJitter") })
	zeroOr("RefillDelay", func() { o.RefillDelay = durations("RefillDelay", time.Millisecond) })
	zeroOr("Coalesce", func() { o.Coalesce = durations("Coalesce", o.PollInterval, defaultCoalesce, defaultPollInterval) })
	zeroOr("ClaimsInFlight", func() { o.ClaimsInFlight = ints("ClaimsInFlight", MaxClaimsInFlight) })
	zeroOr("CompleteBatch", func() { o.CompleteBatch = ints("CompleteBatch", MaxCompleteBatch) })
	zeroOr("FlushInterval", func() { o.FlushInterval = durations("FlushInterval", MinFlushInterval) })
	zeroOr("CompletionBacklog", func() { o.CompletionBacklog = ints("CompletionBacklog", MaxCompletionBacklog, o.CompleteBatch) })
	zeroOr("LeaseRenewal", func() { o.LeaseRenewal = floats("LeaseRenewal") })
	zeroOr("ShutdownTimeout", func() { o.ShutdownTimeout = durations("ShutdownTimeout") })
	zeroOr("Backoff", func() { o.Backoff = backoff("Backoff") })
	zeroOr("ErrorBackoff", func() { o.ErrorBackoff = backoff("ErrorBackoff") })
	return o
}

// referenceWithDefaults is Options.withDefaults as it was before its
// checks became optionRules (one switch), kept verbatim as the reference.
func referenceWithDefaults(o Options) (Options, error) {
	bad := func(field, format string, args ...any) (Options, error) {
		return o, &OptionError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.Workers < 1 || o.Workers > MaxWorkers:
		return bad("Workers", "is %d, not in [1, %d]", o.Workers, MaxWorkers)
	case o.Queue < 0 || o.Queue > MaxQueue:
		return bad("Queue", "is %d, not in [0, %d]", o.Queue, MaxQueue)
	case o.QueueHighWatermark < 0:
		return bad("QueueHighWatermark", "is %d, negative", o.QueueHighWatermark)
	case o.Queue == 0 && o.QueueHighWatermark != 0:
		return bad("QueueHighWatermark", "is set without a Queue")
	case o.Queue > 0 && o.QueueHighWatermark >= o.Queue:
		return bad("QueueHighWatermark", "is %d, not below Queue (%d)", o.QueueHighWatermark, o.Queue)
	case o.PollInterval < 0 || o.PollInterval > 0 && o.PollInterval < MinPollInterval:
		return bad("PollInterval", "is %v, below %v (0 means 1s)", o.PollInterval, MinPollInterval)
	case math.IsNaN(o.PollJitter):
		return bad("PollJitter", "is NaN; want a fraction in [0, 1], or negative for none")
	case o.PollJitter > 1:
		return bad("PollJitter", "is %v, above 1", o.PollJitter)
	case o.CompleteBatch < 0 || o.CompleteBatch > MaxCompleteBatch:
		return bad("CompleteBatch", "is %d, not in [0, %d]", o.CompleteBatch, MaxCompleteBatch)
	case o.FlushInterval < 0 || o.FlushInterval > 0 && o.FlushInterval < MinFlushInterval:
		return bad("FlushInterval", "is %v, below %v (0 means 10ms)", o.FlushInterval, MinFlushInterval)
	case o.CompletionBacklog < 0 || o.CompletionBacklog > MaxCompletionBacklog:
		return bad("CompletionBacklog", "is %d, not in [0, %d]", o.CompletionBacklog, MaxCompletionBacklog)
	case math.IsNaN(o.LeaseRenewal):
		return bad("LeaseRenewal", "is NaN; want a fraction in [%v, 0.5], or 0 for the default 1/3", MinLeaseRenewal)
	case o.LeaseRenewal != 0 && (o.LeaseRenewal < MinLeaseRenewal || o.LeaseRenewal > 0.5):
		return bad("LeaseRenewal", "is %v, not in [%v, 0.5] (0 means 1/3)", o.LeaseRenewal, MinLeaseRenewal)
	case o.Coalesce > o.pollInForce():
		return bad("Coalesce", "is %v, above the poll interval in force (PollInterval %v)", o.Coalesce, o.pollInForce())
	case o.ClaimsInFlight < 0 || o.ClaimsInFlight > MaxClaimsInFlight:
		return bad("ClaimsInFlight", "is %d, not in [0, %d] (0 means 2)", o.ClaimsInFlight, MaxClaimsInFlight)
	case o.ShutdownTimeout < 0:
		return bad("ShutdownTimeout", "is %v, negative", o.ShutdownTimeout)
	}
	if err := referenceValidateBackoff(o.Backoff, "Backoff", 0); err != nil {
		return o, err
	}
	if err := referenceValidateBackoff(o.ErrorBackoff, "ErrorBackoff", MinErrorBackoff); err != nil {
		return o, err
	}
	o.PollInterval = o.pollInForce()
	switch {
	case o.PollJitter == 0:
		o.PollJitter = 0.2
	case o.PollJitter < 0:
		o.PollJitter = 0
	}
	switch {
	case o.RefillDelay == 0:
		o.RefillDelay = time.Millisecond
	case o.RefillDelay < 0:
		o.RefillDelay = 0
	}
	switch {
	case o.Coalesce == 0:
		o.Coalesce = min(defaultCoalesce, o.PollInterval)
	case o.Coalesce < 0:
		o.Coalesce = 0
	}
	if o.ClaimsInFlight == 0 {
		o.ClaimsInFlight = 2
	}
	if o.CompleteBatch == 0 {
		o.CompleteBatch = 100
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = 10 * time.Millisecond
	}
	if o.CompletionBacklog == 0 {
		o.CompletionBacklog = 10_000
	}
	o.CompletionBacklog = max(o.CompletionBacklog, o.CompleteBatch)
	if o.LeaseRenewal == 0 {
		o.LeaseRenewal = 1.0 / 3
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	o.Backoff = o.Backoff.withDefaults(defaultBackoff)
	o.ErrorBackoff = o.ErrorBackoff.withDefaults(defaultErrorBackoff)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NopMetrics{}
	}
	return o, nil
}

// referenceValidateBackoff is Backoff's validate as it was before its
// checks became backoffRules, kept verbatim as the reference.
func referenceValidateBackoff(b Backoff, field string, minBase time.Duration) error {
	bad := func(f, format string, args ...any) error {
		return &OptionError{Field: field + "." + f, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case b.Base < 0 || b.Base > outbox.MaxDelay:
		return bad("Base", "is %v, not in [0, outbox.MaxDelay = %v]", b.Base, outbox.MaxDelay)
	case b.Base > 0 && b.Base < minBase:
		return bad("Base", "is %v, below %v", b.Base, minBase)
	case b.Max < 0 || b.Max > outbox.MaxDelay:
		return bad("Max", "is %v, not in [0, outbox.MaxDelay = %v]", b.Max, outbox.MaxDelay)
	case b.Max > 0 && b.Max < b.Base:
		return bad("Max", "is %v, below Base (%v)", b.Max, b.Base)
	case math.IsNaN(b.Jitter):
		return bad("Jitter", "is NaN; want a fraction in [0, 1], or negative for none")
	case b.Jitter > 1:
		return bad("Jitter", "is %v, above 1", b.Jitter)
	}
	return nil
}
