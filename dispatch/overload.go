package dispatch

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// OverloadedError is a downstream's advisory "slow down", as a handler
// returns it ([Overloaded], [OverloadedResponse]). The dispatcher snoozes
// the row (no attempt spent, at most Options.MaxSnoozes times; see
// [Snooze]) for RetryAfter, or Options.OverloadSnooze when RetryAfter is
// 0, and reports the signal in the row's CompletionEvent (match it with
// errors.As on the event's Err).
type OverloadedError struct {
	RetryAfter time.Duration // how long the downstream asked to wait; 0 if it did not say
	Reason     error         // what the downstream said, recorded as the row's LastError
}

// Error describes the signal.
func (e *OverloadedError) Error() string {
	var b strings.Builder
	b.WriteString("dispatch: downstream overloaded")
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", retry after %v", e.RetryAfter)
	}
	if e.Reason != nil {
		b.WriteString(": ")
		b.WriteString(e.Reason.Error())
	}
	return b.String()
}

// Unwrap returns Reason.
func (e *OverloadedError) Unwrap() error { return e.Reason }

// Overloaded returns the error a handler returns when the downstream it
// called said it is overloaded, with the wait it asked for (0: none
// given). A retryAfter outside 0 to outbox.MaxDelay is a failure instead
// of a snooze, as for [Snooze].
func Overloaded(retryAfter time.Duration, reason error) error {
	return &OverloadedError{RetryAfter: retryAfter, Reason: reason}
}

// OverloadedResponse returns an *OverloadedError for a response with
// status 429 (Too Many Requests) or 503 (Service Unavailable), with its
// Retry-After header (delay-seconds or an HTTP-date, read against now; a
// date in the past is 0; a value that parses as neither is ignored) and
// the status as the reason; nil for any other response or a nil one. It
// reads only the status and the header: the caller still closes the body.
func OverloadedResponse(resp *http.Response, now time.Time) error {
	if resp == nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
		return nil
	}
	return &OverloadedError{RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now), Reason: fmt.Errorf("HTTP %s", resp.Status)}
}

// retryAfter parses a Retry-After value, capped at outbox.MaxDelay (a
// value past it would be refused as a snooze; the downstream's intent, a
// long wait, is kept).
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(outbox.MaxDelay/time.Second) {
			return outbox.MaxDelay
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), outbox.MaxDelay)
	}
	return 0
}
