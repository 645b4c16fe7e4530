package admin

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// ErrBadInput is matched by the errors of [BuildHistory] for a span or
// bucket count it cannot use.
var ErrBadInput = errors.New("admin: bad input")

// MaxHistoryBuckets is the most samples [BuildHistory] makes of one
// tenant's history (the charts' width in points).
const MaxHistoryBuckets = 240

// HistorySample is one bucket of a tenant's history: the nodes' counters
// summed over [At − Step, At).
type HistorySample struct {
	At     time.Time // the end of the bucket
	Newest time.Time // the newest point's At in the bucket
	// StartedPerSecond, SettledPerSecond and DeadPerSecond sum, over the
	// nodes with points in the bucket, each node's count divided by the
	// intervals its points cover.
	StartedPerSecond, SettledPerSecond, DeadPerSecond float64
	// Backlog sums each node's backlog at its newest point of the bucket;
	// BacklogCapped says one of them was a lower bound.
	Backlog       int
	BacklogCapped bool
	// Held sums, by reason, each node's rows held at its newest point.
	Held  map[string]int
	Nodes int // nodes with points in the bucket
}

// TenantHistory is one namespace's history in buckets of Step, oldest
// first; buckets without points are left out.
type TenantHistory struct {
	Namespace string
	Step      time.Duration
	Samples   []HistorySample
}

// BuildHistory returns the history of each namespace of points (sorted by
// namespace) over [from, to) in buckets equal buckets (1 to
// [MaxHistoryBuckets]); points outside the span are ignored. O(points +
// namespaces × buckets). A bad span or bucket count is an error matching
// [ErrBadInput].
func BuildHistory(points []outbox.HistoryPoint, from, to time.Time, buckets int) ([]TenantHistory, error) {
	switch {
	case buckets < 1 || buckets > MaxHistoryBuckets:
		return nil, fmt.Errorf("%w: %d buckets, outside 1 to %d", ErrBadInput, buckets, MaxHistoryBuckets)
	case !to.After(from):
		return nil, fmt.Errorf("%w: the span %v to %v is empty", ErrBadInput, from, to)
	}
	step := to.Sub(from) / time.Duration(buckets)
	if step <= 0 {
		return nil, fmt.Errorf("%w: the span %v to %v is shorter than %d ns", ErrBadInput, from, to, buckets)
	}
	type nodeBucket struct {
		started, settled, dead int64
		interval               time.Duration
		newest                 outbox.HistoryPoint
	}
	type key struct {
		ns     string
		bucket int
		node   string
	}
	acc := map[key]*nodeBucket{}
	for _, p := range points {
		if p.At.Before(from) || !p.At.Before(to) {
			continue
		}
		k := key{p.Namespace, int(p.At.Sub(from) / step), p.Node}
		k.bucket = min(k.bucket, buckets-1)
		nb := acc[k]
		if nb == nil {
			nb = &nodeBucket{}
			acc[k] = nb
		}
		nb.started, nb.settled, nb.dead = nb.started+p.Started, nb.settled+p.Settled, nb.dead+p.Dead
		nb.interval += p.Interval
		if !p.At.Before(nb.newest.At) {
			nb.newest = p
		}
	}
	byNS := map[string]map[int]*HistorySample{}
	for k, nb := range acc {
		if byNS[k.ns] == nil {
			byNS[k.ns] = map[int]*HistorySample{}
		}
		s := byNS[k.ns][k.bucket]
		if s == nil {
			s = &HistorySample{At: from.Add(time.Duration(k.bucket+1) * step), Held: map[string]int{}}
			byNS[k.ns][k.bucket] = s
		}
		if secs := nb.interval.Seconds(); secs > 0 {
			s.StartedPerSecond += float64(nb.started) / secs
			s.SettledPerSecond += float64(nb.settled) / secs
			s.DeadPerSecond += float64(nb.dead) / secs
		}
		if nb.newest.At.After(s.Newest) {
			s.Newest = nb.newest.At
		}
		s.Backlog += nb.newest.Backlog
		s.BacklogCapped = s.BacklogCapped || nb.newest.BacklogCapped
		for r, n := range nb.newest.Held {
			s.Held[r] += n
		}
		s.Nodes++
	}
	out := make([]TenantHistory, 0, len(byNS))
	for ns, bs := range byNS {
		th := TenantHistory{Namespace: ns, Step: step}
		for b := range buckets {
			if s := bs[b]; s != nil {
				th.Samples = append(th.Samples, *s)
			}
		}
		out = append(out, th)
	}
	slices.SortFunc(out, func(a, b TenantHistory) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out, nil
}

// AllTenants returns points with every namespace replaced by "": their
// [BuildHistory] is the whole outbox's.
func AllTenants(points []outbox.HistoryPoint) []outbox.HistoryPoint {
	out := slices.Clone(points)
	for i := range out {
		out[i].Namespace = ""
	}
	return out
}

// DrainWindow is the span of recent history [EstimateDrain] reads.
const DrainWindow = time.Minute

// Drain is a time-to-drain estimate: how long a backlog takes to empty
// at the rate it fell over the last [DrainWindow] of history.
type Drain struct {
	Backlog int  // the rows to drain (live: ready, scheduled and claimed)
	Capped  bool // Backlog is a lower bound, and so is Estimate
	// Rate is the net rows per second the backlog falls by: rows
	// finished (settled or dead) per second, less the rows that arrived
	// (estimated from the backlog's change when the history's backlog is
	// exact; taken as none otherwise, and ArrivalsUnknown set).
	Rate            float64
	ArrivalsUnknown bool
	// Estimate is Backlog / Rate when Draining.
	Estimate time.Duration
	Draining bool
	// Why says why there is no estimate when not Draining: "empty", "no
	// history", "not draining".
	Why string
}

// EstimateDrain estimates when a tenant's backlog (live, from the store;
// capped says it is a lower bound) is empty, from h's samples of the last
// DrainWindow before its newest.
func EstimateDrain(h TenantHistory, backlog int, capped bool) Drain {
	d := Drain{Backlog: backlog, Capped: capped}
	if backlog == 0 && !capped {
		d.Why = "empty"
		return d
	}
	if len(h.Samples) == 0 {
		d.Why = "no history"
		return d
	}
	last := h.Samples[len(h.Samples)-1]
	var window []HistorySample
	for _, s := range h.Samples {
		if last.At.Sub(s.At) <= DrainWindow {
			window = append(window, s)
		}
	}
	var finished float64
	exact := true
	for _, s := range window {
		finished += s.SettledPerSecond + s.DeadPerSecond
		exact = exact && !s.BacklogCapped
	}
	finished /= float64(len(window))
	first := window[0]
	arrivals := 0.0
	if span := last.At.Sub(first.At).Seconds(); exact && len(window) >= 2 && span > 0 {
		slope := float64(last.Backlog-first.Backlog) / span
		arrivals = max(0, finished+slope)
	} else {
		d.ArrivalsUnknown = true
	}
	d.Rate = finished - arrivals
	if d.Rate <= 0 || math.IsNaN(d.Rate) {
		d.Why = "not draining"
		return d
	}
	d.Draining = true
	d.Estimate = time.Duration(float64(backlog) / d.Rate * float64(time.Second))
	return d
}

// String describes d for an operator: "empty", "no history", "not
// draining", or the estimate rounded to the second ("3m20s"), with "≥ "
// when the backlog is capped and " (assuming no new rows)" when the
// arrivals are unknown.
func (d Drain) String() string {
	if !d.Draining {
		return d.Why
	}
	s := d.Estimate.Round(time.Second).String()
	if d.Estimate < time.Second {
		s = "<1s"
	}
	if d.Capped {
		s = "≥ " + s
	}
	if d.ArrivalsUnknown {
		s += " (assuming no new rows)"
	}
	return s
}
