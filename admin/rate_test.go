package admin

import (
	"errors"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

func TestParseRate(t *testing.T) {
	for i, c := range []struct {
		rate  string
		burst int
		want  backpressure.Rate
		bad   bool
	}{
		{rate: "20/s", burst: 10, want: backpressure.Rate{PerSecond: 20, Burst: 10}},
		{rate: "20/s", want: backpressure.Rate{PerSecond: 20, Burst: 20}},  // one second's worth
		{rate: "0.5/s", want: backpressure.Rate{PerSecond: 0.5, Burst: 1}}, // at least 1
		{rate: "300/m", want: backpressure.Rate{PerSecond: 5, Burst: 5}},   // per minute
		{rate: "7200/h", want: backpressure.Rate{PerSecond: 2, Burst: 2}},  // per hour
		{rate: " 1/min ", want: backpressure.Rate{PerSecond: 1.0 / 60, Burst: 1}},
		{rate: "none", want: backpressure.Rate{}},
		{rate: "none", burst: 3, bad: true},
		{rate: "20", bad: true},
		{rate: "20/d", bad: true},
		{rate: "0/s", bad: true},
		{rate: "-1/s", bad: true},
		{rate: "NaN/s", bad: true},
		{rate: "Inf/s", bad: true},
		{rate: "x/s", bad: true},
		{rate: "20/s", burst: -1, bad: true},
	} {
		got, err := ParseRate(c.rate, c.burst)
		var arg *outbox.ArgumentError
		switch {
		case c.bad && !errors.As(err, &arg):
			t.Errorf("step %d: ParseRate(%q, %d) = %+v, %v; want an *outbox.ArgumentError", i, c.rate, c.burst, got, err)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("step %d: ParseRate(%q, %d) = %+v, %v; want %+v", i, c.rate, c.burst, got, err, c.want)
		}
	}
	if got := RateText(backpressure.Rate{PerSecond: 20, Burst: 10}); got != "20/s burst 10" {
		t.Errorf("RateText(20/s, 10) = %q", got)
	}
	if got := RateText(backpressure.Rate{}); got != "none" {
		t.Errorf("RateText(zero) = %q, want none", got)
	}
}
