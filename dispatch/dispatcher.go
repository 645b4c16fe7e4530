package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
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
	operate  *Operate  // Options.Operate with its defaults; nil when off
	adapt    *adaptive // the adaptive ceilings (adaptive.go); nil when Options.Adaptive is
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
	if o.Adaptive != nil {
		d.adapt = newAdaptive(bp, &o)
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

	// nsHeld counts r.jobs per namespace, for the adaptive controller
	// (guarded by mu); nil when Options.Adaptive is.
	nsHeld map[string]int
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
	if d.adapt != nil {
		r.nsHeld = make(map[string]int)
	}
	base := context.WithoutCancel(ctx)
	r.workCtx, r.workCancel = context.WithCancel(base)
	r.extendCtx, r.extendCancel = context.WithCancel(base)
	r.writeCtx, r.writeCancel = context.WithCancel(base)
	return r
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
