package admin

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// ParseRate reads a rate as an operator writes it: "N/s", "N/m" or "N/h"
// (rows started per second, minute or hour, cluster-wide; N a positive
// decimal such as 20 or 0.5), or "none" for the zero Rate (no limit).
// burst is the most rows started at once after an idle spell; 0 means one
// second's worth, ⌈N per second⌉, at least 1 (a "none" rate takes burst
// 0 only). What it returns is then checked whole by [Apply] (as
// [backpressure.Rate] is: at most 1e9/s, a burst up to 2^30). Anything
// else is an [*outbox.ArgumentError].
func ParseRate(rate string, burst int) (backpressure.Rate, error) {
	fail := func(reason string) (backpressure.Rate, error) {
		return backpressure.Rate{}, &outbox.ArgumentError{Op: "ParseRate", Arg: "rate", Reason: fmt.Sprintf("%q: %s", rate, reason)}
	}
	v := strings.TrimSpace(rate)
	if v == "none" {
		if burst != 0 {
			return fail("a burst without a rate")
		}
		return backpressure.Rate{}, nil
	}
	num, unit, ok := strings.Cut(v, "/")
	if !ok {
		return fail(`want N/s, N/m, N/h or none`)
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n <= 0 {
		return fail("N is not a positive number")
	}
	switch unit {
	case "s":
	case "m", "min":
		n /= 60
	case "h":
		n /= 3600
	default:
		return fail(fmt.Sprintf("unknown unit %q: want s, m or h", unit))
	}
	if burst < 0 {
		return fail(fmt.Sprintf("burst %d is negative", burst))
	}
	if burst == 0 {
		burst = max(1, int(min(math.Ceil(n), float64(1<<30))))
	}
	return backpressure.Rate{PerSecond: n, Burst: burst}, nil
}

// RateText renders r for a person: "20/s burst 10", or "none" for the
// zero Rate.
func RateText(r backpressure.Rate) string {
	if r.PerSecond == 0 {
		return "none"
	}
	return strconv.FormatFloat(r.PerSecond, 'g', -1, 64) + "/s burst " + strconv.Itoa(r.Burst)
}
