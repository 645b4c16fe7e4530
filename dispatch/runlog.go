package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// heldLogInterval is the shortest time between two Debug lines on one held
// namespace, and about the longest a namespace that stays held goes
// without one (the package doc states it).
const heldLogInterval = 10 * time.Second

// tally counts one Run's results as the store applied them, for its stop
// line.
type tally struct {
	settled, retried, dead, lost atomic.Int64
}

func (t *tally) add(res outbox.Result) {
	switch {
	case res.Err != nil:
		t.lost.Add(1)
	case res.State == outbox.StateSettled:
		t.settled.Add(1)
	case res.State == outbox.StateDead:
		t.dead.Add(1)
	default:
		t.retried.Add(1)
	}
}

// logStart logs Run's Info start line: what the dispatcher runs with.
func (r *run) logStart() {
	d, o := r.d, r.o
	owned := d.bp.OwnedShards()
	attrs := []any{
		"workers", o.Workers,
		"store", fmt.Sprintf("%T", d.store),
		"shards_owned", owned.OwnedCount(),
		"shard_count", owned.ShardCount(),
		"batch_size", d.bp.BatchSize(),
	}
	if o.Queue > 0 {
		attrs = append(attrs, "handoff", "queue", "queue", o.Queue, "queue_high_watermark", o.QueueHighWatermark)
	} else {
		attrs = append(attrs, "handoff", "credit")
	}
	gate := "advisory"
	if d.gate.Enforced {
		gate = "enforced"
	}
	attrs = append(attrs, "gate", gate)
	// New verified the gate, so this is its verdict, not a new check.
	if mode, err := d.gate.Mode(); err == nil {
		attrs = append(attrs, "mode", mode.String())
	}
	counts := "read-ahead"
	if o.FreshCounts {
		counts = "fresh"
	}
	attrs = append(attrs, "counts", counts, "notify", d.notifier != nil)
	r.log.Info("dispatch: run started", attrs...)
}

// logStop logs Run's Info stop line: the rows whose results were written,
// why Run stopped, and what its shutdown left undone.
func (r *run) logStop(ctx context.Context, err error) {
	attrs := []any{
		"settled", r.results.settled.Load(),
		"retried", r.results.retried.Load(),
		"dead_lettered", r.results.dead.Load(),
		"lease_lost", r.results.lost.Load(),
	}
	if cause := context.Cause(ctx); cause != nil {
		attrs = append(attrs, "reason", cause.Error())
	}
	clean := err == nil
	attrs = append(attrs, "clean", clean)
	if se := (*ShutdownError)(nil); errors.As(err, &se) {
		attrs = append(attrs, "abandoned", se.Abandoned, "unwritten", se.Unwritten)
	}
	r.log.Info("dispatch: run stopped", attrs...)
}

// logHeld logs, at Debug, the namespaces plan held for a reason that is
// the namespace's own (its ceiling, a pause, an invalid route), each at
// most once per heldLogInterval. A namespace held only by the budget is
// being served in its turn, so it gets no line. Nothing is computed unless
// Debug is enabled.
func (r *run) logHeld(ctx context.Context, plan backpressure.Plan, now time.Time) {
	if !r.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	r.held.note(now, plan, func(rep backpressure.NamespaceReport) {
		attrs := []any{
			"namespace", rep.Namespace,
			"reason", rep.Reason.String(),
			"held", rep.Held,
			"claimed", rep.Claimed,
			"ceiling", rep.Ceiling,
			"quota", rep.Quota,
		}
		if rep.Invalid > 0 {
			attrs = append(attrs, "invalid", rep.Invalid)
		}
		if rep.Capped {
			attrs = append(attrs, "capped", true) // held is a lower bound
		}
		r.log.Debug("dispatch: namespace held", attrs...)
	})
}

// heldLimiter decides which held namespaces get a line. last holds the
// time of each namespace's last line, for the namespaces logged in the
// last two intervals at most: every interval, entries an interval old are
// dropped, so its size is bounded by the namespaces logged meanwhile. Only
// the sweep loop uses it.
type heldLimiter struct {
	interval time.Duration
	last     map[string]time.Time
	pruned   time.Time
}

// logged reports whether a namespace held for reason gets a line.
func logged(reason backpressure.HoldReason) bool {
	switch reason {
	case backpressure.HeldAtCeiling, backpressure.HeldPaused, backpressure.HeldInvalidRoute:
		return true
	}
	return false
}

// note calls emit for every namespace of plan held for a reason of its
// own that has had no line in the interval before now.
func (h *heldLimiter) note(now time.Time, plan backpressure.Plan, emit func(backpressure.NamespaceReport)) {
	if h.last == nil {
		h.last = make(map[string]time.Time)
		h.pruned = now
	}
	if now.Sub(h.pruned) >= h.interval {
		for ns, t := range h.last {
			if now.Sub(t) >= h.interval {
				delete(h.last, ns)
			}
		}
		h.pruned = now
	}
	for _, rep := range plan.Namespaces {
		if rep.Held == 0 || !logged(rep.Reason) {
			continue
		}
		if t, ok := h.last[rep.Namespace]; ok && now.Sub(t) < h.interval {
			continue
		}
		h.last[rep.Namespace] = now
		emit(rep)
	}
}
