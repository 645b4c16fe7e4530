package dispatch

import (
	"log/slog"
	"math"
	"time"
)

// Options configures a [Dispatcher]. Only Workers is required; every other
// zero field takes the default its comment names.
type Options struct {
	// Workers is the most handlers that run at once (≥ 1). Each sweep
	// claims at most the idle workers' number of rows (enforced credit).
	Workers int

	// Queue, when > 0, switches the hand-off from credit to a prefetch
	// queue: claimed rows wait in a queue of Queue rows for a worker, and
	// the dispatcher sweeps a full batch (the Backpressure's BatchSize, but
	// never more than the queue's free room, should SetConfig raise it)
	// whenever the queue holds at most QueueHighWatermark rows. Workers
	// then never wait for a sweep, but queued rows wait for workers while
	// their leases run (the dispatcher extends them). This hand-off is
	// advisory, so New verifies it with [backpressure.WorkerQueueGate] and
	// refuses it unless Queue ≥ QueueHighWatermark + BatchSize. 0 (the
	// default): no queue, enforced credit.
	Queue              int
	QueueHighWatermark int

	// PollInterval is how long an idle dispatcher waits before sweeping
	// again when no notification arrives. Default 1s.
	PollInterval time.Duration
	// PollJitter is the fraction of PollInterval randomised around it, in
	// [0, 1], so that nodes do not sweep in step. 0 means 0.2; negative
	// means none.
	PollJitter float64
	// RefillDelay is how long the dispatcher may wait, while some workers
	// are running and fewer than min(Workers, BatchSize) are idle, for
	// more of them to be freed before it sweeps, so that workers freed one
	// by one are refilled by fewer, larger sweeps: every sweep costs the
	// store the same round trips, however few rows it claims. 0 means 1ms;
	// negative means none (sweep as soon as one worker is idle).
	RefillDelay time.Duration
	// FreshCounts makes every sweep count the outbox at its start
	// ([backpressure.SweepN]). By default the dispatcher sweeps with
	// [backpressure.SweepAhead]: while it sweeps back to back (draining a
	// backlog with workers to spare), the next sweep's counts are read
	// beside each full sweep's claim, and the sweeps that follow plan from
	// them, corrected by the claims since; every ceiling holds as with
	// fresh counts, given shard ownership that never overlaps (pgstore's
	// Membership fences it). That takes the counts off the path of a
	// backlog's drain; rows enqueued meanwhile wait a few sweeps for the
	// next read. When its sweeps wait for busy workers, it reads nothing
	// ahead.
	FreshCounts bool

	// CompleteBatch is the most results one Complete call writes; a batch
	// is written as soon as it is full. Default 100.
	CompleteBatch int
	// FlushInterval is the longest a result waits for its batch to fill
	// before it is written anyway. Default 10ms.
	FlushInterval time.Duration
	// CompletionBacklog bounds the results waiting to be written: a
	// worker hands its result over and takes the next row at once, until
	// CompletionBacklog results wait on their way to the writer (which
	// holds at most CompletionBacklog more while the store is slow or
	// failing); then workers block until the store catches up, so
	// completion is under backpressure too. The rows stay claimed until
	// written, so ceilings count them. Default 10,000.
	CompletionBacklog int

	// LeaseRenewal is the fraction of a row's lease after which the
	// dispatcher extends it (and again every such fraction), in (0, 0.5].
	// Default 1/3: a lease of 30s is extended every 10s, so two
	// extensions can fail before it is lost.
	LeaseRenewal float64

	// ShutdownTimeout bounds each of the two phases of a shutdown: the
	// running handlers get this long to finish, then the results get this
	// long to be written (Complete calls still in flight then have their
	// ctx cancelled, and their results count as unwritten). Default 10s.
	ShutdownTimeout time.Duration

	// Backoff is the delay before a row whose handler failed is claimable
	// again, by its attempt (Row.Attempts). Zero fields default to Base
	// 1s, Max 1h, Jitter 0.2.
	Backoff Backoff
	// ErrorBackoff is the delay before a failed store call (a sweep, a
	// Complete, an ExtendLeases) is tried again, by consecutive failures.
	// Zero fields default to Base 100ms, Max 30s, Jitter 0.2.
	ErrorBackoff Backoff

	// Logger receives the dispatcher's logs: store failures (warn),
	// handler panics with their stack (error), dead letters (warn),
	// retries and lost leases (debug). Nil means slog.Default().
	Logger *slog.Logger
	// Metrics receives what the dispatcher does. Nil means [NopMetrics].
	Metrics Metrics

	// Operate, when not nil, turns on shared settings and node reports
	// (see [Operate]). Nil, the default: neither; the dispatcher runs on
	// its Backpressure's configuration alone and reports nothing.
	Operate *Operate
}

var (
	defaultBackoff      = Backoff{Base: time.Second, Max: time.Hour, Jitter: 0.2}
	defaultErrorBackoff = Backoff{Base: 100 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}
)

// withDefaults validates o and returns it with its defaults filled in.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Workers < 1:
		return o, &OptionError{Field: "Workers", Reason: "must be at least 1"}
	case o.Queue < 0:
		return o, &OptionError{Field: "Queue", Reason: "must not be negative"}
	case o.QueueHighWatermark < 0:
		return o, &OptionError{Field: "QueueHighWatermark", Reason: "must not be negative"}
	case o.Queue == 0 && o.QueueHighWatermark != 0:
		return o, &OptionError{Field: "QueueHighWatermark", Reason: "is set without a Queue"}
	case o.PollInterval < 0:
		return o, &OptionError{Field: "PollInterval", Reason: "must not be negative"}
	case o.PollJitter > 1 || math.IsNaN(o.PollJitter):
		return o, &OptionError{Field: "PollJitter", Reason: "must be at most 1"}
	case o.CompleteBatch < 0:
		return o, &OptionError{Field: "CompleteBatch", Reason: "must not be negative"}
	case o.FlushInterval < 0:
		return o, &OptionError{Field: "FlushInterval", Reason: "must not be negative"}
	case o.CompletionBacklog < 0:
		return o, &OptionError{Field: "CompletionBacklog", Reason: "must not be negative"}
	case o.LeaseRenewal < 0 || o.LeaseRenewal > 0.5 || math.IsNaN(o.LeaseRenewal):
		return o, &OptionError{Field: "LeaseRenewal", Reason: "must be in (0, 0.5], or 0 for the default 1/3"}
	case o.ShutdownTimeout < 0:
		return o, &OptionError{Field: "ShutdownTimeout", Reason: "must not be negative"}
	}
	if err := o.Backoff.validate("Backoff"); err != nil {
		return o, err
	}
	if err := o.ErrorBackoff.validate("ErrorBackoff"); err != nil {
		return o, err
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	switch {
	case o.PollJitter == 0:
		o.PollJitter = 0.2
	case o.PollJitter < 0:
		o.PollJitter = 0
	}
	switch {
	case o.RefillDelay == 0:
		o.RefillDelay = time.Millisecond
	case o.RefillDelay < 0:
		o.RefillDelay = 0
	}
	if o.CompleteBatch == 0 {
		o.CompleteBatch = 100
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = 10 * time.Millisecond
	}
	if o.CompletionBacklog == 0 {
		o.CompletionBacklog = 10_000
	}
	o.CompletionBacklog = max(o.CompletionBacklog, o.CompleteBatch)
	if o.LeaseRenewal == 0 {
		o.LeaseRenewal = 1.0 / 3
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	o.Backoff = o.Backoff.withDefaults(defaultBackoff)
	o.ErrorBackoff = o.ErrorBackoff.withDefaults(defaultErrorBackoff)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NopMetrics{}
	}
	return o, nil
}

// jittered returns d spread by ±jitter/2 for u in [0, 1): its mean is d.
func jittered(d time.Duration, jitter, u float64) time.Duration {
	return d + time.Duration(float64(d)*jitter*(u-0.5))
}
