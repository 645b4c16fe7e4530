package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/handoff"
	"github.com/outboxkit/backpressure/outbox"
)

// Store is what a [Dispatcher] needs of an outbox store: the planner's
// calls (through Claimer, as [outbox.Store] has them) and batched
// completion and lease extension. Every [outbox.Store] is one; a store that
// also implements [outbox.Notifier] wakes an idle dispatcher when rows are
// enqueued, and one that implements [outbox.DueProber] when its next
// delayed or scheduled row is due. [New] calls Claimer once and sweeps
// through the value it returns. A Dispatcher calls its store from several
// goroutines at once (completions and extensions beside sweeps, and unless
// Options.FreshCounts a count read ahead beside a claim), so the store must
// be safe for concurrent use.
type Store interface {
	// Claimer returns the counts and the claim a sweep makes, as
	// [outbox.Store.Claimer] does.
	Claimer() backpressure.OutboxStore[outbox.Row]
	outbox.Completer
}

// Handler runs one claimed row. It returns nil to settle the row, an error
// to retry it after the Backoff (or dead-letter it past its MaxAttempts), or
// an error wrapped by [Permanent] to dead-letter it at once. ctx is
// cancelled when the row's lease is lost or the shutdown deadline passes:
// the handler should then return, and its result is not written. A handler
// may run more than once for one row (after a crash or a lost lease), so its
// effects should be idempotent, keyed by row.DispatchKey.
type Handler func(ctx context.Context, row outbox.Row) error

// Dispatcher runs a Handler over the rows a Backpressure plans. Build it
// with [New]; the zero value is not usable. Its methods are safe for
// concurrent use; Run runs at most once at a time.
type Dispatcher struct {
	bp       *backpressure.Backpressure
	store    Store
	claimer  backpressure.OutboxStore[outbox.Row] // store.Claimer()
	notifier outbox.Notifier                      // nil if store is not one
	handler  Handler
	opts     Options // defaults filled in
	gate     backpressure.BackpressureGate
	running  atomic.Bool
	operate  *Operate // Options.Operate with its defaults; nil when off
}

// New returns a Dispatcher that runs handler over the rows bp plans from
// store. It returns an error matching [ErrInvalidOptions] (a *[OptionError])
// for a nil argument (a store that is a nil pointer, map, slice, channel or
// func inside a non-nil interface counts as nil: Field "store"), a
// Backpressure not built with [backpressure.New], or an invalid option; and the gate's error (a
// *[backpressure.AdvisoryOverflowError]) when Options.Queue describes an
// advisory hand-off without the headroom for a batch.
func New(bp *backpressure.Backpressure, store Store, handler Handler, opts Options) (*Dispatcher, error) {
	switch {
	case bp == nil:
		return nil, &OptionError{Field: "bp", Reason: "is nil"}
	case bp.BatchSize() < 1:
		return nil, &OptionError{Field: "bp", Reason: "was not built with backpressure.New"}
	case store == nil:
		return nil, &OptionError{Field: "store", Reason: "is nil"}
	case isNilValue(store):
		return nil, &OptionError{Field: "store", Reason: fmt.Sprintf("is a nil %T", store)}
	case handler == nil:
		return nil, &OptionError{Field: "handler", Reason: "is nil"}
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	claimer := store.Claimer()
	if claimer == nil {
		return nil, &OptionError{Field: "store", Reason: "Claimer() returned nil"}
	}
	d := &Dispatcher{bp: bp, store: store, claimer: claimer, handler: handler, opts: o}
	if o.Operate != nil {
		if d.operate, err = o.Operate.withDefaults(store); err != nil {
			return nil, err
		}
	}
	d.notifier, _ = store.(outbox.Notifier)
	if o.Queue > 0 {
		// An advisory hand-off: only the watermark check holds sweeps back.
		g, err := handoff.WorkerQueueGate(bp, o.Queue, o.QueueHighWatermark)
		if err != nil {
			return nil, err
		}
		d.gate = g
	} else {
		// Credit: a sweep asks for at most the idle workers, so the worker
		// slots can never be oversubscribed, whatever the batch size.
		d.gate = backpressure.BackpressureGate{
			Enforced:            true,
			QueueCapacity:       o.Workers,
			HighWatermark:       o.Workers - 1,
			ProducerMaxInflight: min(bp.BatchSize(), o.Workers),
		}
		if err := d.gate.Verify(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// isNilValue reports whether v holds a nil pointer, map, slice, channel or
// func: a typed nil that passes v != nil, whose methods every store answers
// with an error (or a panic), so that Run would sweep nothing forever. A
// reflect check, because dispatch cannot know every store's type.
func isNilValue(v any) bool {
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// Gate returns the gate New verified for the hand-off between sweeps and
// workers, for logging: enforced for credit, advisory with headroom for a
// queue.
func (d *Dispatcher) Gate() backpressure.BackpressureGate { return d.gate }

// Run dispatches until ctx is done, then shuts down (see the package doc)
// and returns nil, or a *[ShutdownError] if it had to abandon handlers or
// results. Failed store calls are logged, reported and retried after
// Options.ErrorBackoff; they never end Run. It returns [ErrRunning] if
// another Run of d is in progress. Run may be called again after it
// returns; handlers a previous Run abandoned may then still be running,
// outside the new Run's Workers.
func (d *Dispatcher) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer d.running.Store(false)
	r := newRun(d, ctx)
	r.logStart()
	err := r.run(ctx)
	r.logStop(ctx, err)
	return err
}

// run is the state of one Run.
type run struct {
	d   *Dispatcher
	o   *Options
	log *slog.Logger
	m   Metrics

	rows        chan *job // claimed rows on their way to a worker
	completions chan *job // finished rows on their way to the completer
	freed       chan struct{}
	flushed     chan struct{}
	kick        chan struct{} // new leases for the extender
	closed      chan struct{} // closed when Run stops accepting results

	// stopCtx is Run's ctx: once it is done, queued rows are not started.
	// workCtx is the handlers' parent, cancelled at the shutdown deadline;
	// extendCtx is the extender's, cancelled when it is stopped; writeCtx
	// is the completer's, cancelled ShutdownTimeout after the completer is
	// stopped (so a Complete call in flight cannot hold the shutdown up),
	// or when Run returns. All three outlive Run's ctx.
	stopCtx      context.Context
	workCtx      context.Context
	workCancel   context.CancelFunc
	extendCtx    context.Context
	extendCancel context.CancelFunc
	writeCtx     context.Context
	writeCancel  context.CancelFunc

	mu          sync.Mutex
	jobs        map[outbox.Lease]*job // every row held: queued, running, or result unwritten
	outstanding int                   // rows claimed whose worker has not let go of them
	done        int                   // jobs marked done: each one's result is sent to the completer

	unstarted atomic.Int64 // queued rows released unstarted at shutdown, counted as abandoned

	results tally       // results the store applied, for the stop line
	held    heldLimiter // the sweep loop's Debug lines on held namespaces

	due     *dueRows         // when the next delayed or scheduled row is due (waker.go)
	bpClock func() time.Time // the Backpressure's clock, for its rate buckets

	op *operator // shared settings and node reports (operate.go); nil when off
}

func newRun(d *Dispatcher, ctx context.Context) *run {
	o := &d.opts
	capacity := o.Workers
	if o.Queue > 0 {
		capacity = o.Queue
	}
	r := &run{
		d:           d,
		o:           o,
		log:         o.Logger,
		m:           o.Metrics,
		rows:        make(chan *job, capacity),
		completions: make(chan *job, o.CompletionBacklog),
		freed:       make(chan struct{}, 1),
		flushed:     make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
		closed:      make(chan struct{}),
		jobs:        make(map[outbox.Lease]*job),
		stopCtx:     ctx,
		held:        heldLimiter{interval: heldLogInterval},
		due:         newDueRows(d.store, o),
		bpClock:     d.bp.Config().Clock,
	}
	if r.bpClock == nil {
		r.bpClock = time.Now
	}
	base := context.WithoutCancel(ctx)
	r.workCtx, r.workCancel = context.WithCancel(base)
	r.extendCtx, r.extendCancel = context.WithCancel(base)
	r.writeCtx, r.writeCancel = context.WithCancel(base)
	return r
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (r *run) run(ctx context.Context) error {
	var workers sync.WaitGroup
	for range r.o.Workers {
		workers.Go(r.worker)
	}
	stopExtender, extenderDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(extenderDone); r.extender(stopExtender) }()
	stopCompleter := make(chan struct{})
	completerDone := make(chan flushOutcome, 1)
	go func() { completerDone <- r.completer(stopCompleter) }()

	var operating sync.WaitGroup
	if o := r.d.operate; o != nil {
		r.op = newOperator(r, o)
		if o.SharedSettings {
			// Before the first sweep, and until they are read: no claim
			// against a pause. If ctx ends first, sweepLoop sweeps nothing.
			r.op.first(ctx)
		}
		operating.Go(func() { r.op.loop(ctx) })
	}

	r.sweepLoop(ctx)
	operating.Wait()

	// Shutdown: no more claims. Workers finish what they hold, for up to
	// ShutdownTimeout; then the rest are cancelled and abandoned.
	close(r.rows)
	drained := make(chan struct{})
	go func() { workers.Wait(); close(drained) }()
	deadline := time.NewTimer(r.o.ShutdownTimeout)
	defer deadline.Stop()
	abandoned := 0
	select {
	case <-drained:
	case <-deadline.C:
		// Mark before cancelling, so that a handler returning at once on
		// the cancel is counted, and its result not written.
		abandoned = r.abandonRunning()
		r.workCancel()
		r.log.Warn("dispatch: shutdown deadline passed; abandoning running handlers", "abandoned", abandoned, "timeout", r.o.ShutdownTimeout)
	}
	abandoned += int(r.unstarted.Load()) // final: every worker has let go, or abandonRunning marked the rest
	r.workCancel()
	close(stopExtender)
	r.extendCancel() // an extension in flight is of no use now
	<-extenderDone
	close(stopCompleter)
	out := <-completerDone
	close(r.closed)
	r.writeCancel()
	if abandoned == 0 && out.unwritten == 0 {
		return nil
	}
	return &ShutdownError{Abandoned: abandoned, Unwritten: out.unwritten, Err: out.err}
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
}

// sweepLoop sweeps until ctx is done: again at once while sweeps come back
// full, else when a worker is freed, a notification arrives, a result is
// written (only while the last sweep left a namespace at its ceiling (see
// atCeiling), or failed, or with a queue: otherwise a written result frees
// nothing a sweep could claim; a result written while a sweep was in
// flight counts when that sweep comes back), or its waker fires: the
// jittered poll interval, or sooner the next delayed row's due time or a
// rate-held namespace's next token (armIdle); a result or a notification
// that ends such a wait starts the sweep Options.Coalesce later. While
// sweeps come back
// full it keeps up to Options.ClaimsInFlight sweeps in flight (see
// backpressure.SweepAhead), each asking for the credit the others have not
// reserved (a sweep beside others only once that is at least a full
// sweep's share, min(Workers, BatchSize)/ClaimsInFlight), so the rows
// claimed or being claimed never exceed the idle workers (or the queue's
// room). On shutdown it waits for the sweeps in
// flight and hands their rows over (they are then released unstarted).
func (r *run) sweepLoop(ctx context.Context) {
	var wake <-chan struct{}
	if n := r.d.notifier; n != nil {
		c, err := n.Subscribe(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("dispatch: subscribe failed; polling only", "err", err)
		} else {
			wake = c
		}
	}
	sweep := backpressure.SweepAhead[outbox.Row]
	depth := r.o.ClaimsInFlight
	if r.o.FreshCounts {
		sweep, depth = backpressure.SweepN[outbox.Row], 1
	}
	w := newWaker()
	defer w.stop()
	refillTimer := time.NewTimer(time.Hour)
	refillTimer.Stop()
	defer refillTimer.Stop()
	results := make(chan swept, depth)
	var (
		inflight, reserved int
		failures           int
		idle               bool // waiting for the poll, a flush or a notification before sweeping
		coalescing         bool // woken while idle, waiting Options.Coalesce (on poll) before sweeping
		heldAtCeiling      bool // the last sweep held rows at a ceiling, or failed: a written result may free them
		lastFull           = true
		flushes            int // r.flushed signals received
		launchedAt         int // flushes when the last sweep started
	)
	for {
		if ctx.Err() == nil && !idle && inflight < depth && (inflight == 0 || lastFull) {
			// A sweep beside others in flight waits for a share of a
			// full sweep's credit: tiny sweeps would cost round trips
			// for few rows.
			least := 1
			if inflight > 0 {
				least = max(1, min(r.o.Workers, r.d.bp.BatchSize())/depth)
			}
			if n := r.credit() - reserved; n >= least {
				if inflight == 0 {
					if n = r.refill(ctx, n, refillTimer); n <= 0 {
						return
					}
				}
				inflight++
				reserved += n
				since := launchedAt
				launchedAt = flushes
				go func(n int) {
					began := time.Now()
					if r.op != nil {
						r.op.sweepStarted()
					}
					rows, plan, err := sweep(ctx, r.d.bp, r.d.claimer, n)
					if r.op != nil {
						r.op.swept(len(rows), plan, err)
					}
					results <- swept{asked: n, rows: rows, plan: plan, err: err, took: time.Since(began), flushes: since}
				}(n)
				continue
			}
		}
		if ctx.Err() != nil && inflight == 0 {
			return
		}
		var (
			done  <-chan struct{}
			pollC <-chan time.Time
			wakeC <-chan struct{}
		)
		if ctx.Err() == nil {
			done = ctx.Done()
		}
		if idle {
			pollC = w.C()
			if !coalescing {
				wakeC = wake
			}
		}
		// wakeUp ends an idle wait, after Options.Coalesce if set: rows
		// trickling in meanwhile are claimed by one sweep.
		wakeUp := func() {
			switch {
			case !idle || coalescing:
			case r.o.Coalesce > 0:
				coalescing = true
				w.sooner(time.Now(), r.o.Coalesce, wakeCoalesce)
			default:
				idle = false
			}
		}
		select {
		case <-done:
		case s := <-results:
			inflight--
			if s.err != nil {
				reserved -= s.asked
				if ctx.Err() != nil {
					continue
				}
				failures++
				r.m.Swept(SweepEvent{Asked: s.asked, Duration: s.took, Err: s.err})
				delay := r.o.ErrorBackoff.Delay(failures, rand.Float64())
				r.log.Warn("dispatch: sweep failed", "err", s.err, "failures", failures, "retry_in", delay)
				idle, lastFull, heldAtCeiling = true, false, true
				w.set(time.Now(), delay, wakeBackoff)
				continue
			}
			failures = 0
			r.hand(s.rows)
			reserved -= s.asked // after hand: the rows now hold the credit
			r.m.Swept(SweepEvent{Asked: s.asked, Claimed: len(s.rows), Duration: s.took, Plan: s.plan})
			r.logHeld(ctx, s.plan, time.Now())
			heldAtCeiling = slices.ContainsFunc(s.plan.Namespaces, atCeiling)
			if lastFull = len(s.rows) >= s.asked; lastFull {
				idle = false // full: there may be more
			} else {
				if !idle {
					idle = true
					w.set(time.Now(), jittered(r.o.PollInterval, r.o.PollJitter, rand.Float64()), wakePoll)
				}
				r.armIdle(ctx, w, s.plan)
			}
			if heldAtCeiling && flushes > s.flushes {
				// Results written while it swept: the signal came before
				// the loop was idle, and it may have freed headroom the
				// sweep's counts did not see.
				wakeUp()
			}
		case <-r.freed:
		case <-r.flushed:
			flushes++
			if idle {
				// A retry just written: sweep when it is due.
				now := time.Now()
				if r.due.takeRetries(now) {
					wakeUp()
				} else if at := r.due.at; !at.IsZero() {
					w.sooner(now, at.Sub(now), wakeDue)
				}
			}
			// Headroom may be back, and with a queue, credit; otherwise a
			// written result frees nothing a sweep could claim (a
			// notification or the poll brings new rows).
			if heldAtCeiling || r.o.Queue > 0 {
				wakeUp()
			}
		case _, ok := <-wakeC:
			if !ok {
				wake = nil // the store closed it: poll from now on
			}
			r.due.stale = true // the rows enqueued may be scheduled
			wakeUp()
		case <-pollC:
			if w.reason == wakePoll {
				r.due.stale = true // rows may have come without a notification
			}
			idle, coalescing = false, false
		}
	}
}

// atCeiling reports whether a sweep left namespace n at its ceiling with
// rows that may still wait, so that a result written for one of its rows
// frees headroom a sweep could use: held at the ceiling, or granted all its
// headroom while its count was capped. Sweep counts a namespace only as
// deep as its claim can go (its headroom), so a namespace that fills its
// ceiling reports Held 0 and Reason HeldNone, with Capped set.
func atCeiling(n backpressure.NamespaceReport) bool {
	if n.Reason == backpressure.HeldAtCeiling {
		return true
	}
	return n.Headroom != backpressure.Unlimited && n.Granted >= n.Headroom && (n.Capped || n.Held > 0)
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
		jobs[i] = j
	}
	r.outstanding += len(rows)
	r.mu.Unlock()
	signal(r.kick)
	for _, j := range jobs {
		r.rows <- j
	}
}

// leaseOf returns the length of row's lease as the store set it, or the
// store's Lease(), or outbox.DefaultLease.
func (r *run) leaseOf(row outbox.Row) time.Duration {
	if l := row.LeaseExpiresAt.Sub(row.ClaimedAt); l > 0 && !row.ClaimedAt.IsZero() {
		return l
	}
	if s, ok := r.d.store.(interface{ Lease() time.Duration }); ok && s.Lease() > 0 {
		return s.Lease()
	}
	return outbox.DefaultLease
}

func (r *run) renewEvery(j *job) time.Duration {
	return time.Duration(float64(j.lease) * r.o.LeaseRenewal)
}
