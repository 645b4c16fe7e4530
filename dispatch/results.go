package dispatch

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// What a handler can ask for besides success and failure, as the error it
// returns (wrapped further or not):
//
//   - [Snooze]: the row comes back after a while without spending an
//     attempt (the downstream said "later"), at most Options.MaxSnoozes
//     times; [Overloaded] and [OverloadedResponse] (HTTP 429 and 503 with
//     Retry-After) are snoozes for the wait the downstream asked;
//   - [Permanent]: the row is dead-lettered now, whatever its attempts
//     (cancelled: the order was deleted), its error recorded;
//   - [RetryAt]: a failure retried at the time the handler chose, not
//     after the backoff.
//
// Any other error is a failure retried after Options.Backoff (or the row's
// task queue's Options.RetryPolicies entry), dead-lettered once the row
// has had its MaxAttempts claims. Each is the row's completion's Outcome
// in [CompletionEvent] and the row's state, Attempts, Snoozes, RunAt and
// LastError in the store.

// Bounds of the result options.
const (
	// MaxSnoozesLimit bounds Options.MaxSnoozes.
	MaxSnoozesLimit = 1 << 20
	// MaxRetryPolicies bounds the entries of Options.RetryPolicies.
	MaxRetryPolicies = 1024
)

const (
	defaultMaxSnoozes     = 100
	defaultOverloadSnooze = time.Second
)

// SnoozeError is the error [Snooze] returns. A handler returning it
// (wrapped or not) snoozes its row.
type SnoozeError struct {
	Delay  time.Duration // how long the row stays invisible: 0 to outbox.MaxDelay
	Reason error         // recorded as the row's LastError when not nil
}

// Error describes the snooze.
func (e *SnoozeError) Error() string {
	if e.Reason == nil {
		return fmt.Sprintf("dispatch: snoozed for %v", e.Delay)
	}
	return fmt.Sprintf("dispatch: snoozed for %v: %v", e.Delay, e.Reason)
}

// Unwrap returns Reason.
func (e *SnoozeError) Unwrap() error { return e.Reason }

// Snooze returns the error a handler returns to put its row back to
// pending for d without spending an attempt: the row keeps its place in
// its route, its Attempts is what it was before the claim, its Snoozes one
// more, and reason (nil: none) becomes its LastError. A row already
// snoozed Options.MaxSnoozes times, or a d outside 0 to outbox.MaxDelay,
// makes the snooze a failure instead: retried after the backoff, spending
// an attempt, with the reason for it recorded.
func Snooze(d time.Duration, reason error) error { return &SnoozeError{Delay: d, Reason: reason} }

// RetryAtError is the error [RetryAt] returns.
type RetryAtError struct {
	At  time.Time // when the row becomes claimable again
	Err error     // the failure, recorded as the row's LastError
}

// Error returns Err's text, or a description without one.
func (e *RetryAtError) Error() string {
	if e.Err == nil {
		return "dispatch: retry at " + e.At.Format(time.RFC3339Nano)
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *RetryAtError) Unwrap() error { return e.Err }

// RetryAt returns the error a handler returns to fail its row and have it
// claimable again at t (at once if t has passed) instead of after the
// backoff. It spends an attempt like any failure: a row that has had its
// MaxAttempts claims is dead-lettered. A t more than outbox.MaxDelay
// ahead is retried after the backoff instead, and says so in LastError.
func RetryAt(t time.Time, err error) error { return &RetryAtError{At: t, Err: err} }

// completionFor turns a handler's result into the row's completion.
func (r *run) completionFor(row outbox.Row, err error) outbox.Completion {
	switch {
	case err == nil:
		return outbox.SettleRow(row)
	case IsPermanent(err):
		return truncated(outbox.DeadLetterRow(row, err))
	}
	if c, ok := r.snooze(row, &err); ok {
		return c
	}
	backoff := r.o.Backoff
	if b, ok := r.o.RetryPolicies[row.TaskQueue]; ok {
		backoff = b
	}
	delay := backoff.Delay(row.Attempts, rand.Float64())
	var at *RetryAtError
	if errors.As(err, &at) {
		switch d := time.Until(at.At); {
		case d > outbox.MaxDelay:
			err = fmt.Errorf("%w (dispatch: RetryAt %v is more than outbox.MaxDelay ahead: retried after the backoff)", err, at.At)
		default:
			delay = max(d, 0)
		}
	}
	c := truncated(outbox.RetryRow(row, delay, err))
	var pe *PanicError
	if !errors.As(err, &pe) {
		r.log.Debug("dispatch: handler failed; retrying", "dispatch_key", row.DispatchKey, "namespace", row.Namespace,
			"attempt", row.Attempts, "retry_in", delay, "err", err)
	}
	return c
}

// snooze returns the completion of a handler's snooze, or false with *err
// replaced by why it is a failure instead (past MaxSnoozes, a delay out of
// range), or left alone when it is no snooze.
func (r *run) snooze(row outbox.Row, err *error) (outbox.Completion, bool) {
	var se *SnoozeError
	if oe := (*OverloadedError)(nil); errors.As(*err, &oe) {
		// A downstream's "slow down": a snooze for the wait it asked.
		se = &SnoozeError{Delay: cmp.Or(oe.RetryAfter, r.o.OverloadSnooze), Reason: oe}
	} else if !errors.As(*err, &se) {
		return outbox.Completion{}, false
	}
	switch {
	case se.Delay < 0 || se.Delay > outbox.MaxDelay:
		*err = fmt.Errorf("dispatch: Snooze(%v) is outside 0 to outbox.MaxDelay: failed instead: %w", se.Delay, *err)
	case row.Snoozes >= r.o.MaxSnoozes:
		*err = fmt.Errorf("dispatch: snoozed %d times, the limit (Options.MaxSnoozes): failed instead: %w", row.Snoozes, *err)
	default:
		return truncated(outbox.SnoozeRow(row, se.Delay, se.Reason)), true
	}
	return outbox.Completion{}, false
}

func truncated(c outbox.Completion) outbox.Completion {
	c.Error = outbox.TruncateError(c.Error)
	return c
}
