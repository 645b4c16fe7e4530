package storetest

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// testLimits checks the rules every store shares for values at the edge of
// what it can store: MaxAttempts from 0 to [outbox.MaxAttemptsLimit], a
// RunAt up to [outbox.MaxTime] and a retry delay up to [outbox.MaxDelay]
// are kept exactly as given (read back equal, never clamped); one past any
// of them is refused whole with a typed error, changing nothing.
func testLimits[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("MaxAttempts", func(t *testing.T) {
		o := setupStore(t, newHarness)
		top := msg("a", "q", "top")
		top.MaxAttempts = outbox.MaxAttemptsLimit
		o.enqueue(top)
		if got := o.get("top").MaxAttempts; got != outbox.MaxAttemptsLimit {
			t.Errorf("MaxAttempts %d read back as %d", outbox.MaxAttemptsLimit, got)
		}
		if math.MaxInt == math.MaxInt32 {
			t.Skip("int has 32 bits: no MaxAttempts above the limit to refuse")
		}
		over := msg("a", "q", "over")
		over.MaxAttempts = int(min(int64(outbox.MaxAttemptsLimit)+1, math.MaxInt))
		o.refusedMessage(t, "MaxAttempts", over)
		over.MaxAttempts = math.MaxInt
		o.refusedMessage(t, "MaxAttempts", over)
	})

	t.Run("RunAt", func(t *testing.T) {
		o := setupStore(t, newHarness)
		last := msg("a", "q", "last")
		last.RunAt = outbox.MaxTime
		o.enqueue(last)
		if got := o.get("last"); !got.RunAt.Equal(outbox.MaxTime) || got.State != outbox.StatePending {
			t.Errorf("RunAt outbox.MaxTime read back as %v (%s), want %v, pending", got.RunAt, got.State, outbox.MaxTime)
		}
		if st := o.stats(); st.Scheduled != 1 {
			t.Errorf("a row scheduled at outbox.MaxTime: Stats = %+v, want it scheduled", st)
		}
		for _, at := range []time.Time{outbox.MaxTime.Add(time.Microsecond), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)} {
			m := msg("a", "q", "late")
			m.RunAt = at
			o.refusedMessage(t, "RunAt", m)
		}
	})

	t.Run("RetryDelay", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msg("a", "q", "k"))
		row := o.claimN("claim", 1, scope("a", "q", 1))[0]
		before := o.snapshot([]string{"k"})
		for _, d := range []time.Duration{outbox.MaxDelay + time.Microsecond, math.MaxInt64} {
			_, err := o.s.Complete(o.ctx, []outbox.Completion{outbox.RetryRow(row, d, errors.New("e"))})
			var ae *outbox.ArgumentError
			if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ae) {
				t.Errorf("Complete with a retry delay of %v = %v, want an *outbox.ArgumentError", d, err)
			}
			o.unchanged("a refused retry delay", before, nil)
		}
		o.complete("retry after MaxDelay", outbox.RetryRow(row, outbox.MaxDelay, errors.New("e")))
		want := o.h.Now().Add(outbox.MaxDelay)
		if got := o.get("k"); got.State != outbox.StatePending || !got.RunAt.Equal(want) {
			t.Errorf("row retried after outbox.MaxDelay: %s, RunAt %v; want pending, RunAt %v", got.State, got.RunAt, want)
		}
	})
}

// refusedMessage checks that Enqueue refuses m, between two good messages,
// with a *MessageError on field, and inserts nothing.
func (o *ox) refusedMessage(t *testing.T, field string, m outbox.Message) {
	t.Helper()
	before := o.stats()
	n, err := o.h.Enqueue(o.ctx, []outbox.Message{msg("a", "q", "good1"), m, msg("a", "q", "good2")})
	var me *outbox.MessageError
	if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &me) || me.Index != 1 || me.Field != field {
		t.Errorf("Enqueue with %s out of range (%+v) = %d, %v; want a *outbox.MessageError on msgs[1].%s", field, m, n, err, field)
	}
	if after := o.stats(); n != 0 || after.Total != before.Total {
		t.Errorf("Enqueue with %s out of range inserted %d (rows %d, then %d)", field, n, before.Total, after.Total)
	}
}
