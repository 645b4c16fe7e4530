package outbox_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// naiveThin is the reference of ThinHistory: each point checked against
// every other, O(n²).
func naiveThin(points []outbox.HistoryPoint, now time.Time) []outbox.HistoryPoint {
	var out []outbox.HistoryPoint
	old := func(p outbox.HistoryPoint) bool {
		return now.Sub(p.At) > outbox.HistoryFull && now.Sub(p.At) <= outbox.HistoryRetention
	}
	for i, p := range points {
		if now.Sub(p.At) <= outbox.HistoryFull {
			out = append(out, p)
			continue
		}
		if !old(p) {
			continue
		}
		newest := true
		for j, q := range points {
			same := q.Node == p.Node && q.Namespace == p.Namespace &&
				q.At.UnixNano()/int64(outbox.HistoryBucket) == p.At.UnixNano()/int64(outbox.HistoryBucket)
			if j != i && old(q) && same && (q.At.After(p.At) || (q.At.Equal(p.At) && j > i)) {
				newest = false
			}
		}
		if newest {
			out = append(out, p)
		}
	}
	return out
}

// TestThinHistoryMatchesReference checks ThinHistory against naiveThin
// on random points near the edges of HistoryFull and HistoryRetention
// (every At after 1970, where the naive bucket's division rounds as
// HistoryBucketOf does), and that thinning twice changes nothing.
func TestThinHistoryMatchesReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		now := time.Unix(rapid.Int64Range(1e9, 2e9).Draw(rt, "now"), 0)
		var points []outbox.HistoryPoint
		for i := range rapid.IntRange(0, 80).Draw(rt, "n") {
			near := rapid.SampledFrom([]time.Duration{0, -outbox.HistoryFull, -outbox.HistoryRetention, -2 * time.Hour}).Draw(rt, "near")
			off := time.Duration(rapid.Int64Range(-15*60, 15*60).Draw(rt, "off_s")) * time.Second
			points = append(points, outbox.HistoryPoint{
				Node: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "node"), At: now.Add(near + off),
				NamespaceCounters: outbox.NamespaceCounters{Namespace: rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "ns"), Started: int64(i)},
			})
		}
		got, want := outbox.ThinHistory(points, now), naiveThin(points, now)
		if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			rt.Fatalf("ThinHistory kept %d points, the reference %d:\n got  %v\n want %v", len(got), len(want), got, want)
		}
		if again := outbox.ThinHistory(got, now); len(again) != len(got) {
			rt.Fatalf("thinning twice kept %d of %d points", len(again), len(got))
		}
		// The stated bound: per node and namespace, the points older than
		// HistoryFull are at most one per bucket of the retention.
		perKey := map[[2]string]int{}
		for _, p := range got {
			if now.Sub(p.At) > outbox.HistoryFull {
				perKey[[2]string{p.Node, p.Namespace}]++
			}
		}
		for k, n := range perKey {
			if limit := int((outbox.HistoryRetention-outbox.HistoryFull)/outbox.HistoryBucket) + 1; n > limit {
				rt.Fatalf("%v keeps %d older points, above %d", k, n, limit)
			}
		}
	})
}

// TestCheckHistoryPoint checks the refusals of CheckHistoryPoint and
// CheckCounters, each an *ArgumentError.
func TestCheckHistoryPoint(t *testing.T) {
	at := time.Unix(1e9, 0)
	ok := outbox.HistoryPoint{Node: "n", At: at, Interval: time.Second, NamespaceCounters: outbox.NamespaceCounters{Namespace: "a", Held: map[string]int{"rate": 3}}}
	if err := outbox.CheckHistoryPoint("op", 0, ok); err != nil {
		t.Fatalf("a good point: %v", err)
	}
	held := map[string]int{}
	for i := range outbox.MaxHeldReasons + 1 {
		held[string(rune('a'+i))] = 1
	}
	for _, p := range []outbox.HistoryPoint{
		{At: at}, {Node: "n"}, {Node: "n", At: at, Interval: -1}, {Node: "n", At: at, Interval: outbox.HistoryRetention + 1},
		{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Dead: -1}},
		{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Held: map[string]int{"rate": -1}}},
		{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Held: held}},
		{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Namespace: "\xff"}},
	} {
		var ae *outbox.ArgumentError
		if err := outbox.CheckHistoryPoint("op", 0, p); !errors.As(err, &ae) {
			t.Errorf("CheckHistoryPoint(%+v) = %v; want an *ArgumentError", p, err)
		}
	}
	if err := outbox.CheckCounters("op", make([]outbox.NamespaceCounters, outbox.MaxReportNamespaces+1)); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("CheckCounters with too many namespaces = %v", err)
	}
}
