package dispatch_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

func TestOverloadedResponse(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	resp := func(code int, retryAfter string) *http.Response {
		r := &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}}
		if retryAfter != "" {
			r.Header.Set("Retry-After", retryAfter)
		}
		return r
	}
	for _, c := range []struct {
		name  string
		resp  *http.Response
		want  time.Duration
		isNil bool
	}{
		{"nil", nil, 0, true},
		{"200", resp(200, "5"), 0, true},
		{"500", resp(500, "5"), 0, true},
		{"429 without a header", resp(429, ""), 0, false},
		{"429 seconds", resp(429, "3"), 3 * time.Second, false},
		{"503 date", resp(503, now.Add(10*time.Second).Format(http.TimeFormat)), 10 * time.Second, false},
		{"503 date past", resp(503, now.Add(-time.Hour).Format(http.TimeFormat)), 0, false},
		{"429 garbage", resp(429, "soon"), 0, false},
		{"429 negative", resp(429, "-4"), 0, false},
		{"429 beyond MaxDelay", resp(429, "999999999999"), outbox.MaxDelay, false},
	} {
		err := dispatch.OverloadedResponse(c.resp, now)
		var oe *dispatch.OverloadedError
		switch {
		case c.isNil && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case !c.isNil && (!errors.As(err, &oe) || oe.RetryAfter != c.want):
			t.Errorf("%s: %v, want an *OverloadedError with RetryAfter %v", c.name, err, c.want)
		}
	}
	err := dispatch.Overloaded(2*time.Second, errors.New("busy"))
	if err.Error() != "dispatch: downstream overloaded, retry after 2s: busy" {
		t.Errorf("Overloaded's text: %q", err)
	}
}
