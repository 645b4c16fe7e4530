package dispatch

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// sweepFunc is how the sweep loop sweeps: [backpressure.SweepAhead], or
// [backpressure.SweepN] with Options.FreshCounts.
type sweepFunc = func(context.Context, *backpressure.Backpressure, backpressure.OutboxStore[outbox.Row], int) ([]outbox.Row, backpressure.Plan, error)

// sweepLoop sweeps until ctx is done: again at once while sweeps come back
// full, else when a worker is freed, a notification arrives, a result is
// written (only while the last sweep left a namespace at its ceiling (see
// atCeiling), or failed, or with a queue: otherwise a written result frees
// nothing a sweep could claim; a result written while a sweep was in
// flight counts when that sweep comes back), or its waker fires: the
// jittered poll interval, or sooner the next delayed row's due time or a
// rate-held namespace's next token (armIdle); a result or a notification
// that ends such a wait starts the sweep Options.Coalesce later. While
// sweeps come back full it keeps up to Options.ClaimsInFlight sweeps in
// flight (see backpressure.SweepAhead), each asking for the credit the
// others have not reserved (a sweep beside others only once that is at
// least a full sweep's share, min(Workers, BatchSize)/ClaimsInFlight), so
// the rows claimed or being claimed never exceed the idle workers (or the
// queue's room). On shutdown it waits for the sweeps in flight and hands
// their rows over (they are then released unstarted). The steps are the
// sweeper's.
func (r *run) sweepLoop(ctx context.Context) {
	s, ok := r.newSweeper(ctx)
	if !ok {
		return
	}
	defer s.stop()
	for {
		if launched, stop := s.launch(); stop {
			return
		} else if launched {
			continue
		}
		if ctx.Err() != nil && s.inflight == 0 {
			return
		}
		s.wait()
	}
}

// sweeper is the state of one Run's sweep loop, used by that loop alone.
// The loop is sweeping (launch starts sweeps while it has credit) or idle
// (a sweep came back short or failed): then it waits for its waker, which
// owns every timed wait (the poll, a failure's backoff, a coalesced
// wake-up, a due row, a rate token), or for a notification or a written
// result that wakes it (wakeUp). Each event it waits for has its step:
// swept (a sweep's result), flushed (a written result), notified, polled
// (the waker fired). The waits for credit (a freed worker, and refill's
// RefillDelay) are not the waker's: they are no idle wait, and the loop
// sweeps as soon as the credit is there.
type sweeper struct {
	r           *run
	ctx         context.Context
	sweep       sweepFunc
	depth       int             // the most sweeps in flight: ClaimsInFlight, or 1 with FreshCounts
	notes       <-chan struct{} // the store's notifications; nil: poll only
	w           *waker          // the idle waits
	refillTimer *time.Timer     // refill's RefillDelay
	results     chan swept      // the sweeps in flight report here

	inflight   int  // sweeps in flight
	reserved   int  // the credit they asked for, not yet held by rows
	failures   int  // consecutive failed sweeps
	idle       bool // waiting for the waker, a notification or a written result before sweeping
	coalescing bool // woken while idle, waiting Options.Coalesce (on the waker) before sweeping; only while idle
	// heldAtCeiling: the last sweep held rows at a ceiling, or failed: a
	// written result may free them.
	heldAtCeiling bool
	lastFull      bool // the last sweep came back full (or none came back yet)
	flushes       int  // r.flushed signals received
	launchedAt    int  // flushes when the last sweep started
}

// newSweeper subscribes to the store's notifications, if it has them,
// and returns the loop's state, sweeping. false: ctx ended the
// subscription; nothing is to be swept.
func (r *run) newSweeper(ctx context.Context) (*sweeper, bool) {
	s := &sweeper{r: r, ctx: ctx, sweep: backpressure.SweepAhead[outbox.Row], depth: r.o.ClaimsInFlight, lastFull: true}
	if r.o.FreshCounts {
		s.sweep, s.depth = backpressure.SweepN[outbox.Row], 1
	}
	if n := r.d.notifier; n != nil {
		c, err := n.Subscribe(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false
			}
			r.log.Warn("dispatch: subscribe failed; polling only", "err", err)
		} else {
			s.notes = c
		}
	}
	s.w = newWaker()
	s.refillTimer = time.NewTimer(time.Hour)
	s.refillTimer.Stop()
	s.results = make(chan swept, s.depth)
	return s, true
}

func (s *sweeper) stop() {
	s.w.stop()
	s.refillTimer.Stop()
}

// launch starts a sweep if the loop is sweeping, has room for one more in
// flight (another beside those in flight only while sweeps come back
// full) and the credit for it, and reports whether it did; stop: ctx
// ended refill's wait, and the loop should return.
func (s *sweeper) launch() (launched, stop bool) {
	if s.ctx.Err() != nil || s.idle || s.inflight >= s.depth || s.inflight > 0 && !s.lastFull {
		return false, false
	}
	r := s.r
	// A sweep beside others in flight waits for a share of a full sweep's
	// credit: tiny sweeps would cost round trips for few rows.
	least := 1
	if s.inflight > 0 {
		least = max(1, min(r.o.Workers, r.d.bp.BatchSize())/s.depth)
	}
	n := r.credit() - s.reserved
	if n < least {
		return false, false
	}
	if s.inflight == 0 {
		if n = r.refill(s.ctx, n, s.refillTimer); n <= 0 {
			return false, true
		}
	}
	s.inflight++
	s.reserved += n
	since := s.launchedAt
	s.launchedAt = s.flushes
	go s.claim(n, since)
	return true, false
}

// claim is one sweep in flight, for n rows; since is the loop's flushes
// when the sweep before it started.
func (s *sweeper) claim(n, since int) {
	r := s.r
	began := time.Now()
	var launched time.Time
	if a := r.d.adapt; a != nil {
		launched = a.p.Now()
	}
	if r.op != nil {
		r.op.sweepStarted()
	}
	rows, plan, err := s.sweep(s.ctx, r.d.bp, r.d.claimer, n)
	if r.op != nil {
		r.op.swept(rows, plan, err)
	}
	s.results <- swept{asked: n, rows: rows, plan: plan, err: err, took: time.Since(began), flushes: since, launched: launched}
}

// wait waits for one event and takes it: a sweep's result, a freed
// worker, a written result, or, while idle, the waker or a notification
// (not while coalescing: the waker is already armed for it); or ctx's end.
func (s *sweeper) wait() {
	var (
		done  <-chan struct{}
		pollC <-chan time.Time
	)
	if s.ctx.Err() == nil {
		done = s.ctx.Done()
	}
	if s.idle {
		pollC = s.w.C()
	}
	select {
	case <-done:
	case res := <-s.results:
		s.swept(res)
	case <-s.r.freed:
	case <-s.r.flushed:
		s.flushed()
	case _, ok := <-s.listening():
		s.notified(ok)
	case <-pollC:
		s.polled()
	}
}

// listening returns the notifications the loop waits for now: the
// store's, while idle and not coalescing; else nil.
func (s *sweeper) listening() <-chan struct{} {
	if s.idle && !s.coalescing {
		return s.notes
	}
	return nil
}

// swept takes a sweep's result: a failure waits its ErrorBackoff; rows are
// handed to the workers; a full sweep sweeps again, a short one goes idle
// (armIdle brings its waker sooner for tokens and due rows).
func (s *sweeper) swept(res swept) {
	r := s.r
	s.inflight--
	if res.err != nil {
		s.reserved -= res.asked
		if s.ctx.Err() != nil {
			return
		}
		s.failures++
		r.m.Swept(SweepEvent{Asked: res.asked, Duration: res.took, Err: res.err})
		delay := r.o.ErrorBackoff.Delay(s.failures, rand.Float64())
		r.log.Warn("dispatch: sweep failed", "err", res.err, "failures", s.failures, "retry_in", delay)
		s.lastFull, s.heldAtCeiling = false, true
		s.goIdle(delay, wakeBackoff)
		return
	}
	s.failures = 0
	r.hand(res.rows)
	s.reserved -= res.asked // after hand: the rows now hold the credit
	r.selfCheck(res)
	r.m.Swept(SweepEvent{Asked: res.asked, Claimed: len(res.rows), Duration: res.took, Plan: res.plan})
	r.logHeld(s.ctx, res.plan, time.Now())
	s.heldAtCeiling = slices.ContainsFunc(res.plan.Namespaces, atCeiling)
	if s.lastFull = len(res.rows) >= res.asked; s.lastFull {
		s.leaveIdle() // full: there may be more
	} else {
		if !s.idle {
			s.goIdle(jittered(r.o.PollInterval, r.o.PollJitter, rand.Float64()), wakePoll)
		}
		r.armIdle(s.ctx, s.w, res.plan)
	}
	if s.heldAtCeiling && s.flushes > res.flushes {
		// Results written while it swept: the signal came before the loop
		// was idle, and it may have freed headroom the sweep's counts did
		// not see.
		s.wakeUp()
	}
}

// flushed takes a written result: while idle, a retry it wrote due now
// wakes the loop and one due later brings the waker sooner; and headroom
// may be back (a namespace at its ceiling, or a failed sweep), and with a
// queue, credit. Otherwise a written result frees nothing a sweep could
// claim (a notification or the poll brings new rows).
func (s *sweeper) flushed() {
	s.flushes++
	if s.idle {
		now := time.Now()
		if s.r.due.takeRetries(now) {
			s.wakeUp()
		} else if at := s.r.due.at; !at.IsZero() {
			s.w.sooner(now, at.Sub(now), wakeDue)
		}
	}
	if s.heldAtCeiling || s.r.o.Queue > 0 {
		s.wakeUp()
	}
}

// notified takes a notification (ok false: the store closed its channel,
// and the loop polls from then on): the rows enqueued may be scheduled,
// so the next due row is probed again.
func (s *sweeper) notified(ok bool) {
	if !ok {
		s.notes = nil
	}
	s.r.due.stale = true
	s.wakeUp()
}

// polled takes the waker's firing: the loop sweeps. After a poll, rows may
// have come without a notification, so the next due row is probed again.
func (s *sweeper) polled() {
	if s.w.reason == wakePoll {
		s.r.due.stale = true
	}
	s.leaveIdle()
}

// wakeUp ends an idle wait, after Options.Coalesce if set (so that rows
// trickling in meanwhile are claimed by one sweep), else at once. It does
// nothing while sweeping or already coalescing.
func (s *sweeper) wakeUp() {
	switch {
	case !s.idle || s.coalescing:
	case s.r.o.Coalesce > 0:
		s.coalescing = true
		s.w.sooner(time.Now(), s.r.o.Coalesce, wakeCoalesce)
	default:
		s.leaveIdle()
	}
}

// goIdle makes the loop idle (or keeps it so) until its waker fires d from
// now for reason, or something sooner wakes it. The waker set anew is no
// longer armed for a coalesced wake-up, so the loop is not coalescing: a
// notification may end this wait (Coalesce later), as it may any.
func (s *sweeper) goIdle(d time.Duration, reason wakeReason) {
	s.idle, s.coalescing = true, false
	s.w.set(time.Now(), d, reason)
}

// leaveIdle ends an idle wait: the loop sweeps. Leaving idle, however it
// happens (the waker, a wake-up without Coalesce, a full sweep), always
// ends a coalesced wake-up too: otherwise the next idle wait would ignore
// notifications until its waker fired, up to a poll interval late.
func (s *sweeper) leaveIdle() {
	s.idle, s.coalescing = false, false
}

// swept is a sweep's outcome, sent back to the sweep loop.
type swept struct {
	asked int
	rows  []outbox.Row
	plan  backpressure.Plan
	err   error
	took  time.Duration
	// flushes is the loop's count of written results (r.flushed signals
	// received) when the sweep before this one started: results written
	// after it may have freed headroom this sweep's counts did not see
	// (its counts may have been read ahead, beside that sweep's claim).
	flushes int
	// launched is when the sweep began on the adaptive controller's
	// clock (zero without Options.Adaptive), for its self-check.
	launched time.Time
}

// atCeiling reports whether a sweep left namespace n at its ceiling with
// rows that may still wait, so that a result written for one of its rows
// frees headroom a sweep could use: held at the ceiling, or granted all its
// headroom while its count was capped. Sweep counts a namespace only as
// deep as its claim can go (its headroom), so a namespace that fills its
// ceiling reports Held 0 and Reason HeldNone, with Capped set.
func atCeiling(n backpressure.NamespaceReport) bool {
	if n.Reason == backpressure.HeldAtCeiling || n.Reason == backpressure.HeldAdaptive && n.Hold == 0 {
		return true
	}
	return n.Headroom != backpressure.Unlimited && n.Granted >= n.Headroom && (n.Capped || n.Held > 0)
}

// credit returns how many rows the next sweep may claim, before the
// credit of sweeps in flight is taken off: the idle workers, or with a
// queue, while it is at or below its watermark, a full batch but never
// more than the queue's free room (bp.SetConfig may have raised the batch
// above what New's gate verified), nor more than leaves at most Queue +
// Workers rows held (queued, running, or with their result unwritten: a
// queue's claims must not run ahead of completion). Only the sweep loop
// adds to r.rows, so the room can only grow until hand; hand never blocks.
func (r *run) credit() int {
	if r.o.Queue > 0 {
		if queued := len(r.rows); queued <= r.o.QueueHighWatermark {
			r.mu.Lock()
			held := len(r.jobs)
			r.mu.Unlock()
			return min(r.d.bp.BatchSize(), r.o.Queue-queued, r.o.Queue+r.o.Workers-held)
		}
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return min(r.o.Workers-r.outstanding, r.d.bp.BatchSize())
}

// refill returns the credit for the next sweep, n or more: while n is
// below the most a sweep can ask of the workers and others are running, it
// waits up to RefillDelay for more to be freed (see Options.RefillDelay).
// It returns 0 if ctx is done.
func (r *run) refill(ctx context.Context, n int, timer *time.Timer) int {
	full := min(r.o.Workers, r.d.bp.BatchSize())
	if r.o.RefillDelay <= 0 || r.o.Queue > 0 || n >= full || !r.busy() {
		return n
	}
	timer.Reset(r.o.RefillDelay)
	for n < full && r.busy() {
		select {
		case <-ctx.Done():
			return 0
		case <-timer.C:
			return r.credit()
		case <-r.freed:
			n = r.credit()
		}
	}
	return n
}

// busy reports whether a worker holds a row.
func (r *run) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outstanding > 0
}

// selfCheck settles the adaptive controller under the sweep's static
// ceilings and runs its self-check on the sweep's claim, with
// Options.Adaptive.
func (r *run) selfCheck(res swept) {
	a := r.d.adapt
	if a == nil {
		return
	}
	a.settle(res.plan)
	if len(res.rows) == 0 {
		return
	}
	claimed := make(map[string]int)
	for _, row := range res.rows {
		claimed[row.Namespace]++
	}
	a.check(res.plan, claimed, res.launched)
}

// hand registers claimed rows for lease extension and hands them to the
// workers. The channel has room for them all: credit never exceeds the
// free slots or the queue's free room.
func (r *run) hand(rows []outbox.Row) {
	if len(rows) == 0 {
		return
	}
	now := time.Now()
	jobs := make([]*job, len(rows))
	r.mu.Lock()
	for i, row := range rows {
		j := &job{row: row, lease: r.leaseOf(row)}
		j.extendAt = now.Add(r.renewEvery(j))
		r.jobs[row.Lease()] = j
		if r.nsHeld != nil {
			r.nsHeld[row.Namespace]++
		}
		jobs[i] = j
	}
	r.outstanding += len(rows)
	r.mu.Unlock()
	signal(r.kick)
	for _, j := range jobs {
		r.rows <- j
	}
}
