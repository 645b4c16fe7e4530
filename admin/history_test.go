package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// TestBuildHistory checks the sums of two nodes' points in one bucket,
// the newest point's backlog per node, and the refusals of a bad span.
func TestBuildHistory(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	pt := func(node string, at time.Duration, started, settled int64, backlog int) outbox.HistoryPoint {
		return outbox.HistoryPoint{Node: node, At: t0.Add(at), Interval: time.Second,
			NamespaceCounters: outbox.NamespaceCounters{Namespace: "a", Started: started, Settled: settled, Backlog: backlog, Held: map[string]int{"rate": backlog}}}
	}
	points := []outbox.HistoryPoint{pt("n1", time.Second, 10, 8, 50), pt("n1", 2*time.Second, 20, 20, 40), pt("n2", 1500*time.Millisecond, 5, 5, 7)}
	hs, err := admin.BuildHistory(points, t0, t0.Add(10*time.Second), 2)
	if err != nil || len(hs) != 1 || len(hs[0].Samples) != 1 {
		t.Fatalf("BuildHistory = %+v, %v; want one tenant with one sample", hs, err)
	}
	s := hs[0].Samples[0]
	// n1: 30 started over 2s = 15/s; n2: 5/s.
	if s.StartedPerSecond != 20 || s.SettledPerSecond != 19 || s.Backlog != 47 || s.Held["rate"] != 47 || s.Nodes != 2 {
		t.Errorf("sample = %+v; want 20 started/s, 19 settled/s, backlog 47 (40 + 7), 2 nodes", s)
	}
	for _, c := range []struct {
		from, to time.Time
		buckets  int
	}{{t0, t0, 1}, {t0, t0.Add(time.Second), 0}, {t0, t0.Add(time.Second), admin.MaxHistoryBuckets + 1}} {
		if _, err := admin.BuildHistory(points, c.from, c.to, c.buckets); !errors.Is(err, admin.ErrBadInput) {
			t.Errorf("BuildHistory(%v, %v, %d) = %v; want ErrBadInput", c.from, c.to, c.buckets, err)
		}
	}
}

// TestEstimateDrain checks the estimate of a backlog falling at 10 rows/s
// while 10 rows/s settle (no arrivals), one where arrivals match the
// settles (not draining), and one with capped backlogs (arrivals unknown).
func TestEstimateDrain(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	mk := func(capped bool, backlogs ...int) admin.TenantHistory {
		h := admin.TenantHistory{Namespace: "a", Step: time.Second}
		for i, b := range backlogs {
			h.Samples = append(h.Samples, admin.HistorySample{At: t0.Add(time.Duration(i) * time.Second), SettledPerSecond: 10, Backlog: b, BacklogCapped: capped})
		}
		return h
	}
	if d := admin.EstimateDrain(mk(false, 100, 90, 80), 80, false); !d.Draining || d.Estimate != 8*time.Second || d.ArrivalsUnknown {
		t.Errorf("falling backlog: %+v; want 8s", d)
	}
	if d := admin.EstimateDrain(mk(false, 100, 100, 100), 100, false); d.Draining || d.Why != "not draining" {
		t.Errorf("steady backlog: %+v; want not draining", d)
	}
	if d := admin.EstimateDrain(mk(true, 100, 100), 50, true); !d.Draining || !d.ArrivalsUnknown || d.Estimate != 5*time.Second {
		t.Errorf("capped backlog: %+v; want 5s with arrivals unknown", d)
	}
	if d := admin.EstimateDrain(admin.TenantHistory{}, 0, false); d.Why != "empty" {
		t.Errorf("empty: %+v", d)
	}
	if d := admin.EstimateDrain(admin.TenantHistory{}, 5, false); d.Why != "no history" {
		t.Errorf("no history: %+v", d)
	}
}
