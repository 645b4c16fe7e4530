package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// wakeReason names why an idle sweep loop sweeps again when its waker
// fires. Notifications and written results end an idle wait too, through
// wakeCoalesce (or at once, without a Coalesce).
type wakeReason uint8

const (
	wakePoll     wakeReason = iota // the jittered poll interval passed
	wakeBackoff                    // a failed sweep's ErrorBackoff passed
	wakeCoalesce                   // Coalesce passed after a notification or a written result
	wakeDue                        // the earliest delayed or scheduled row is due (the store's NextDue, or a retry the completer wrote)
	wakeRate                       // the next rate token of a namespace the last sweep held by its rate is due
	wakeHold                       // a downstream's Retry-After hold of a namespace ends
)

func (w wakeReason) String() string {
	return [...]string{wakePoll: "poll", wakeBackoff: "backoff", wakeCoalesce: "coalesce", wakeDue: "due", wakeRate: "rate", wakeHold: "hold"}[w]
}

// waker is the idle sweep loop's one timer: it fires at the earliest of
// the instants armed since the last set, and remembers which reason that
// was. The loop sets it to the poll (or a failure's backoff) when it goes
// idle, then brings it sooner for a due row, rate tokens or a coalesced
// wake-up. It is used by the sweep loop alone.
type waker struct {
	timer  *time.Timer
	at     time.Time // when it fires
	reason wakeReason
}

func newWaker() *waker {
	w := &waker{timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	return w
}

// C is the channel the timer fires on.
func (w *waker) C() <-chan time.Time { return w.timer.C }

// set arms the waker d after now for reason, replacing what it was armed
// for.
func (w *waker) set(now time.Time, d time.Duration, reason wakeReason) {
	w.at, w.reason = now.Add(d), reason
	w.timer.Reset(d)
}

// sooner arms the waker d after now for reason if that is before the
// instant it is armed for, and reports whether it did. A d ≤ 0 is a time
// already passed: the loop never arms for one (it would sweep in a spin
// for a row or a token it cannot have), so sooner ignores it.
func (w *waker) sooner(now time.Time, d time.Duration, reason wakeReason) bool {
	if d <= 0 || !now.Add(d).Before(w.at) {
		return false
	}
	w.set(now, d, reason)
	return true
}

func (w *waker) stop() { w.timer.Stop() }

// signal wakes the one goroutine that waits on c (the sweep loop, the
// extender), without blocking: a signal already pending stands for both.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// rateHeld reports whether a sweep held namespace n's rows by its rate: its
// next sweep may start more of them when its next token is due.
func rateHeld(n backpressure.NamespaceReport) bool {
	return n.Rate.PerSecond > 0 && (n.Reason == backpressure.HeldRate || n.Capped && n.Granted >= n.Tokens)
}

// nextToken returns how long after now the first of the namespaces plan
// held by their rate has its next token due, on the Backpressure's clock
// (clock), and false if plan held none.
func nextToken(bp *backpressure.Backpressure, plan backpressure.Plan, clock func() time.Time) (time.Duration, bool) {
	var (
		wait  time.Duration
		found bool
		now   time.Time
	)
	for _, n := range plan.Namespaces {
		if !rateHeld(n) {
			continue
		}
		if now.IsZero() {
			now = clock()
		}
		due, ok := bp.NextTokenAt(n.Namespace, now)
		if d := due.Sub(now); ok && (!found || d < wait) {
			wait, found = d, true
		}
	}
	return wait, found
}

// dueRows is what the sweep loop knows of when the next delayed or
// scheduled row of its shards is due: from the store's NextDue (an
// [outbox.DueProber]) and from the retries the completer writes, which it
// learns without a probe.
type dueRows struct {
	prober outbox.DueProber // nil: the store cannot say
	every  time.Duration    // the least time between two probes

	mu      sync.Mutex // guards retryAt: the completer writes it
	retryAt time.Time  // the earliest retry written since the loop last took it; zero: none

	// The loop's own, unguarded.
	at        time.Time // the earliest row known due; zero: none known
	stale     bool      // rows may have been enqueued since the last probe: probe again
	lastProbe time.Time
}

// retried records that a row whose retry was written by written is due
// delay later: at or after its run-at, which the store took from its own
// clock before written (a sweep then finds it claimable: see probe).
// Called by the completer.
func (d *dueRows) retried(written time.Time, delay time.Duration) {
	at := written.Add(delay)
	d.mu.Lock()
	if d.retryAt.IsZero() || at.Before(d.retryAt) {
		d.retryAt = at
	}
	d.mu.Unlock()
}

// takeRetries merges the retries written since the last call into at, and
// reports whether one of them is due by now already (a retry of no delay,
// or one written while a sweep was in flight): the loop should sweep for
// it, since the probe only finds rows due later.
func (d *dueRows) takeRetries(now time.Time) (dueNow bool) {
	d.mu.Lock()
	at := d.retryAt

	d.retryAt = time.Time{}
	d.mu.Unlock()
	if at.IsZero() {
		return false
	}
	if !at.After(now) {
		return true
	}
	d.merge(at)
	return false
}

// merge takes at as a row's due time if it is the earliest known.
func (d *dueRows) merge(at time.Time) {
	if !at.IsZero() && (d.at.IsZero() || at.Before(d.at)) {
		d.at = at
	}
}

// next returns how long after now the next row is due, probing the store
// when what the loop knows may be out of date (rows enqueued since the
// last probe, or the row it knew of due already) and the last probe is at
// least every old; a probe it skips for that reason makes next return the
// time the probe is allowed again, so that the loop sweeps then and probes
// at its next idle. false: no row known due. A failed probe is reported
// through m and the log, and leaves nothing known.
func (d *dueRows) next(ctx context.Context, r *run, shards backpressure.OwnedShardFraction, now time.Time) (time.Duration, bool) {
	if d.takeRetries(now) {
		return sweepNow, true
	}
	if !d.at.IsZero() && !d.at.After(now) {
		d.at, d.stale = time.Time{}, true // due already: the sweep saw it; what comes next is unknown
	}
	if d.stale && d.prober != nil {
		if since := now.Sub(d.lastProbe); since < d.every {
			wait := d.every - since
			if !d.at.IsZero() {
				wait = min(wait, d.at.Sub(now))
			}
			return wait, true
		}
		d.probe(ctx, r, shards, now)
	}
	if d.at.IsZero() {
		return 0, false
	}
	return d.at.Sub(now), true
}

// probe asks the store when its next row is due.
func (d *dueRows) probe(ctx context.Context, r *run, shards backpressure.OwnedShardFraction, now time.Time) {
	d.lastProbe, d.stale = now, false
	wait, ok, err := d.prober.NextDue(ctx, shards)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.m.StoreFailed("NextDue", err)
			r.log.Debug("dispatch: NextDue failed; waiting for the poll", "err", err)
		}
	case ok:
		// From the time the answer came back, not the call's start: a
		// sweep at the row's due time then finds it claimable (a sweep a
		// moment early would not, and the row, claimable by the next
		// probe, would not be in it either).
		d.merge(time.Now().Add(wait))
	}
}

// minRateWait is the least wait the loop arms for rate tokens: above a
// rate of one row per minRateWait, a sweep starts the tokens accrued
// meanwhile, up to the burst.
const minRateWait = time.Millisecond

// sweepNow is the wait the loop arms for a sweep at once: the waker takes
// no wait ≤ 0.
const sweepNow = time.Nanosecond

// dueProbeEvery is the least time between two of the sweep loop's NextDue
// probes (or the poll interval, if shorter): while rows trickle in, every
// short sweep could probe, and one more statement per sweep would undo
// what Coalesce saves.
const dueProbeEvery = 20 * time.Millisecond

func newDueRows(store Store, o *Options) *dueRows {
	p, _ := store.(outbox.DueProber)
	return &dueRows{prober: p, every: min(o.PollInterval, max(dueProbeEvery, o.Coalesce)), stale: true}
}

// armIdle brings w sooner, as the loop goes idle after a short sweep
// whose plan is plan: for the next rate token of a namespace the plan held
// by its rate, and for the next delayed or scheduled row.
func (r *run) armIdle(ctx context.Context, w *waker, plan backpressure.Plan) {
	if wait, ok := nextToken(r.d.bp, plan, r.bpClock); ok {
		// A token due now means the claim came back short of the grant
		// (rows the count saw that the claim could not take): sweep again
		// after a pause, not in a spin.
		w.sooner(time.Now(), max(wait, r.o.Coalesce, minRateWait), wakeRate)
	}
	now := time.Now()
	if wait, ok := r.due.next(ctx, r, r.d.bp.OwnedShards(), now); ok {
		w.sooner(now, wait, wakeDue)
	}
	if d, ok := shortestHold(plan); ok {
		// A downstream's Retry-After holds a namespace for d more.
		w.sooner(now, max(d, r.o.Coalesce, minRateWait), wakeHold)
	}
}
