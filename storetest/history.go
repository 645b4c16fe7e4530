package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// setupHistorian is setupStore for a store that also implements
// [outbox.Historian]; it skips the test otherwise.
func setupHistorian[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) (*ox, outbox.Historian) {
	t.Helper()
	o := setupStore(t, newHarness)
	h, ok := o.s.(outbox.Historian)
	if !ok {
		t.Skipf("the store (%T) does not implement outbox.Historian: its history is not checked", o.s)
	}
	return o, h
}

// testHistory checks [outbox.Historian]: what History returns after
// appends and prunes matches [outbox.ThinHistory] over the points
// appended (itself checked against a naive reference in outbox), newest
// Limit first cut, one namespace or all; a bad point stores nothing; every
// call honours its context.
func testHistory[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("PruneMatchesThinHistory", func(t *testing.T) { checkHistoryPrune(t, newHarness) })
	t.Run("LimitAndNamespace", func(t *testing.T) { checkHistoryLimit(t, newHarness) })
	t.Run("BadPointStoresNothing", func(t *testing.T) {
		o, h := setupHistorian(t, newHarness)
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		good := outbox.HistoryPoint{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Namespace: "a", Started: 1}}
		for _, bad := range []outbox.HistoryPoint{
			{Node: "", At: at},
			{Node: "n"},
			{Node: "n", At: at, Interval: -time.Second},
			{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Namespace: "a", Settled: -1}},
			{Node: "n", At: at, NamespaceCounters: outbox.NamespaceCounters{Namespace: "a\x00"}},
		} {
			err := h.AppendHistory(o.ctx, []outbox.HistoryPoint{good, bad})
			var ae *outbox.ArgumentError
			if !errors.As(err, &ae) || !errors.Is(err, outbox.ErrInvalidArgument) {
				t.Errorf("AppendHistory with %+v = %v; want an *outbox.ArgumentError", bad, err)
			}
		}
		got, err := h.History(o.ctx, outbox.HistoryParams{})
		if err != nil || len(got) != 0 {
			t.Errorf("History after refused appends = %d points, %v; want none", len(got), err)
		}
		if _, err := h.History(o.ctx, outbox.HistoryParams{Limit: outbox.MaxHistoryPage + 1}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("History with Limit above MaxHistoryPage = %v; want ErrInvalidArgument", err)
		}
	})
	t.Run("HonoursContext", func(t *testing.T) {
		o, h := setupHistorian(t, newHarness)
		ctx, cancel := context.WithCancel(o.ctx)
		cancel()
		p := outbox.HistoryPoint{Node: "n", At: time.Now(), NamespaceCounters: outbox.NamespaceCounters{Namespace: "a"}}
		if err := h.AppendHistory(ctx, []outbox.HistoryPoint{p}); !errors.Is(err, context.Canceled) {
			t.Errorf("AppendHistory on a cancelled context = %v; want context.Canceled", err)
		}
		if _, err := h.History(ctx, outbox.HistoryParams{}); !errors.Is(err, context.Canceled) {
			t.Errorf("History on a cancelled context = %v; want context.Canceled", err)
		}
		if _, err := h.PruneHistory(ctx, time.Now()); !errors.Is(err, context.Canceled) {
			t.Errorf("PruneHistory on a cancelled context = %v; want context.Canceled", err)
		}
		if got, _ := h.History(o.ctx, outbox.HistoryParams{}); len(got) != 0 {
			t.Errorf("History after a cancelled append = %d points; want none", len(got))
		}
	})
}

// historyView is what the suite compares of a point: At in Unix
// microseconds (pgstore's column; the body keeps nanoseconds) and Held
// sorted.
type historyView struct {
	Node, Namespace                string
	At                             int64
	Interval                       time.Duration
	Started, Settled, Failed, Dead int64
	Backlog                        int
	Capped                         bool
	Held                           string
}

func viewsOf(points []outbox.HistoryPoint) []historyView {
	out := make([]historyView, len(points))
	for i, p := range points {
		var held []string
		for r, n := range p.Held {
			held = append(held, fmt.Sprintf("%s=%d", r, n))
		}
		slices.Sort(held)
		out[i] = historyView{Node: p.Node, Namespace: p.Namespace, At: p.At.UnixMicro(), Interval: p.Interval,
			Started: p.Started, Settled: p.Settled, Failed: p.Failed, Dead: p.Dead, Backlog: p.Backlog, Capped: p.BacklogCapped,
			Held: strings.Join(held, ",")}
	}
	return out
}

// drawPoints draws up to 60 points of nodes prefix+{a,b} and namespaces
// prefix+{x,y}, At within 30h 10min before now to 10 min after (whole
// milliseconds) and mostly near the prune's edges, in batches.
func drawPoints(rt *rapid.T, prefix string, now time.Time) [][]outbox.HistoryPoint {
	var batches [][]outbox.HistoryPoint
	for b := range rapid.IntRange(0, 6).Draw(rt, "batches") {
		var batch []outbox.HistoryPoint
		for i := range rapid.IntRange(0, 10).Draw(rt, "points") {
			// Near now, near the HistoryFull and HistoryRetention edges, or anywhere.
			center := rapid.SampledFrom([]time.Duration{0, -outbox.HistoryFull, -outbox.HistoryRetention, -3 * time.Hour}).Draw(rt, "near")
			at := now.Add(center + time.Duration(rapid.Int64Range(-600*1000, 600*1000).Draw(rt, "at_ms"))*time.Millisecond)
			p := outbox.HistoryPoint{
				Node: prefix + rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "node"), At: at,
				Interval: time.Duration(rapid.IntRange(0, 5000).Draw(rt, "interval_ms")) * time.Millisecond,
				NamespaceCounters: outbox.NamespaceCounters{
					Namespace: prefix + rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "ns"),
					Started:   int64(b*100 + i), Settled: rapid.Int64Range(0, 1000).Draw(rt, "settled"),
					Backlog: rapid.IntRange(0, 1000).Draw(rt, "backlog"), BacklogCapped: rapid.Bool().Draw(rt, "capped"),
				},
			}
			if rapid.Bool().Draw(rt, "held") {
				p.Held = map[string]int{"rate": rapid.IntRange(0, 9).Draw(rt, "rate"), "budget": 1}
			}
			batch = append(batch, p)
		}
		batches = append(batches, batch)
	}
	return batches
}

// checkHistoryPrune appends random points, prunes at now, and compares
// History with SortHistory(ThinHistory(appended, now)). Each check has its
// own epoch, 100 days after the last, so its prune removes every earlier
// check's points.
func checkHistoryPrune[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, h := setupHistorian(t, newHarness)
	check := 0
	rapid.Check(t, func(rt *rapid.T) {
		check++
		prefix := fmt.Sprintf("c%04d-", check)
		// Not aligned to HistoryBucket, so buckets straddle the edges.
		now := time.Date(2025, 1, 1, 0, 2, 30, 0, time.UTC).Add(time.Duration(check) * 100 * 24 * time.Hour)
		var all []outbox.HistoryPoint
		for _, batch := range drawPoints(rt, prefix, now) {
			if err := h.AppendHistory(o.ctx, batch); err != nil {
				rt.Fatalf("AppendHistory: %v", err)
			}
			all = append(all, batch...)
		}
		if _, err := h.PruneHistory(o.ctx, now); err != nil {
			rt.Fatalf("PruneHistory: %v", err)
		}
		want := outbox.ThinHistory(all, now)
		outbox.SortHistory(want)
		got, err := h.History(o.ctx, outbox.HistoryParams{Limit: outbox.MaxHistoryPage})
		if err != nil {
			rt.Fatalf("History: %v", err)
		}
		if g, w := viewsOf(got), viewsOf(want); !reflect.DeepEqual(g, w) && !(len(g) == 0 && len(w) == 0) {
			rt.Fatalf("History after PruneHistory at now:\n got  %+v\n want %+v", g, w)
		}
		ns := prefix + "x"
		var wantNS []outbox.HistoryPoint
		for _, p := range want {
			if p.Namespace == ns {
				wantNS = append(wantNS, p)
			}
		}
		got, err = h.History(o.ctx, outbox.HistoryParams{Namespace: ns})
		if err != nil {
			rt.Fatalf("History of %s: %v", ns, err)
		}
		if g, w := viewsOf(got), viewsOf(wantNS); !reflect.DeepEqual(g, w) && !(len(g) == 0 && len(w) == 0) {
			rt.Fatalf("History of %s:\n got  %+v\n want %+v", ns, g, w)
		}
	})
}

// checkHistoryLimit checks that History returns the newest Limit points
// at or after Since, oldest first.
func checkHistoryLimit[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, h := setupHistorian(t, newHarness)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var pts []outbox.HistoryPoint
	for i := range 10 {
		ns := "a"
		if i%2 == 1 {
			ns = "b"
		}
		pts = append(pts, outbox.HistoryPoint{Node: "n", At: base.Add(time.Duration(i) * time.Second), Interval: time.Second,
			NamespaceCounters: outbox.NamespaceCounters{Namespace: ns, Started: int64(i)}})
	}
	if err := h.AppendHistory(o.ctx, pts); err != nil {
		t.Fatal(err)
	}
	started := func(ps []outbox.HistoryPoint) []int64 {
		var out []int64
		for _, p := range ps {
			out = append(out, p.Started)
		}
		return out
	}
	for _, c := range []struct {
		p    outbox.HistoryParams
		want []int64
	}{
		{outbox.HistoryParams{Limit: 3}, []int64{7, 8, 9}},
		{outbox.HistoryParams{Namespace: "a", Limit: 2}, []int64{6, 8}},
		{outbox.HistoryParams{Namespace: "b", Since: base.Add(4 * time.Second)}, []int64{5, 7, 9}},
		{outbox.HistoryParams{Since: base.Add(8 * time.Second)}, []int64{8, 9}},
	} {
		got, err := h.History(o.ctx, c.p)
		if err != nil {
			t.Fatalf("History(%+v): %v", c.p, err)
		}
		if g := started(got); !reflect.DeepEqual(g, c.want) {
			t.Errorf("History(%+v) = points %v; want %v", c.p, g, c.want)
		}
	}
}
