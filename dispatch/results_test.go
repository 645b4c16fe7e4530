package dispatch_test

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// TestResults runs the handler results' checks on the reference store.
func TestResults(t *testing.T) {
	dispatchtest.Results{Open: func(t *testing.T) outbox.Store { return newStore(t, memstore.Options{}) }}.Run(t)
}

func TestResultOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		field string
		opts  dispatch.Options
	}{
		{"MaxSnoozes", dispatch.Options{MaxSnoozes: -1}},
		{"MaxSnoozes", dispatch.Options{MaxSnoozes: dispatch.MaxSnoozesLimit + 1}},
		{`RetryPolicies["slow"].Base`, dispatch.Options{RetryPolicies: map[string]dispatch.Backoff{"slow": {Base: -time.Second}}}},
		{`RetryPolicies["slow"].Max`, dispatch.Options{RetryPolicies: map[string]dispatch.Backoff{"slow": {Base: time.Hour, Max: time.Second}}}},
		{"RetryPolicies", dispatch.Options{RetryPolicies: manyPolicies(dispatch.MaxRetryPolicies + 1)}},
	} {
		c.opts.Workers = 1
		_, err := dispatch.New(newBP(t, 10, 10, nil), newStore(t, memstore.Options{}), noop, c.opts)
		var oe *dispatch.OptionError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, dispatch.ErrInvalidOptions) {
			t.Errorf("New with a bad %s = %v, want an *OptionError for %s", c.field, err, c.field)
		}
	}
	policies := map[string]dispatch.Backoff{"slow": {Base: time.Hour}}
	if _, err := dispatch.New(newBP(t, 10, 10, nil), newStore(t, memstore.Options{}), noop,
		dispatch.Options{Workers: 1, MaxSnoozes: dispatch.MaxSnoozesLimit, RetryPolicies: policies}); err != nil {
		t.Errorf("New at the limits: %v", err)
	}
	if policies["slow"] != (dispatch.Backoff{Base: time.Hour}) {
		t.Errorf("New changed the caller's RetryPolicies: %v", policies)
	}
}

func manyPolicies(n int) map[string]dispatch.Backoff {
	m := make(map[string]dispatch.Backoff, n)
	for i := range n {
		m[string(rune('a'+i%26))+time.Duration(i).String()] = dispatch.Backoff{}
	}
	return m
}

func TestSnoozeErrorText(t *testing.T) {
	reason := errors.New("busy")
	err := dispatch.Snooze(time.Second, reason)
	var se *dispatch.SnoozeError
	if !errors.As(err, &se) || se.Delay != time.Second || !errors.Is(err, reason) || err.Error() != "dispatch: snoozed for 1s: busy" {
		t.Errorf("Snooze(1s, busy) = %v (%T)", err, err)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	err = dispatch.RetryAt(at, reason)
	var ra *dispatch.RetryAtError
	if !errors.As(err, &ra) || !ra.At.Equal(at) || !errors.Is(err, reason) || err.Error() != "busy" {
		t.Errorf("RetryAt = %v (%T)", err, err)
	}
	if got := dispatch.RetryAt(at, nil).Error(); got != "dispatch: retry at 2030-01-02T03:04:05Z" {
		t.Errorf("RetryAt without an error: %q", got)
	}
}
