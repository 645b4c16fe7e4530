package dispatch

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Bounds of the options that size an allocation, a goroutine count or a
// loop. New refuses a value beyond one with an *[OptionError].
const (
	// MaxWorkers bounds Options.Workers (65,536): Run starts one goroutine
	// and one channel slot per worker, so the bound caps what Run
	// allocates up front (a few hundred MiB of stacks at worst) far above
	// any store's useful concurrency.
	MaxWorkers = 1 << 16
	// MaxQueue bounds Options.Queue (1,048,576 rows): the prefetch queue
	// is a channel of that many slots, allocated by Run.
	MaxQueue = 1 << 20
	// MaxCompleteBatch bounds Options.CompleteBatch (10,000 results): one
	// Complete call, one statement.
	MaxCompleteBatch = 10_000
	// MaxCompletionBacklog bounds Options.CompletionBacklog (1,048,576
	// results): a channel of that many slots, allocated by Run.
	MaxCompletionBacklog = 1 << 20

	// MinPollInterval is the shortest Options.PollInterval (100µs): an
	// idle dispatcher sweeps at most 10,000 times a second, so a store that
	// answers at once is not polled in a spin.
	MinPollInterval = 100 * time.Microsecond
	// MinFlushInterval is the shortest Options.FlushInterval (10µs): the
	// completer's timer fires at most 100,000 times a second, and only
	// while results wait.
	MinFlushInterval = 10 * time.Microsecond
	// MinErrorBackoff is the shortest Options.ErrorBackoff.Base (1ms): a
	// failing store is retried at most a thousand times a second.
	MinErrorBackoff = time.Millisecond
	// MinLeaseRenewal is the smallest Options.LeaseRenewal (0.01): with
	// the shortest lease, outbox.MinLease (100ms), a lease is extended at
	// most every millisecond.
	MinLeaseRenewal = 0.01
)

// Options configures a [Dispatcher]. Only Workers is required; every other
// zero field takes the default its comment names.
type Options struct {
	// Workers is the most handlers that run at once, 1 to [MaxWorkers].
	// Each sweep claims at most the idle workers' number of rows (enforced
	// credit).
	Workers int

	// Queue, when > 0, switches the hand-off from credit to a prefetch
	// queue: claimed rows wait in a queue of Queue rows for a worker, and
	// the dispatcher sweeps a full batch (the Backpressure's BatchSize, but
	// never more than the queue's free room, should SetConfig raise it)
	// whenever the queue holds at most QueueHighWatermark rows. Workers
	// then never wait for a sweep, but queued rows wait for workers while
	// their leases run (the dispatcher extends them). This hand-off is
	// advisory, so New verifies it with
	// [github.com/outboxkit/backpressure/handoff.WorkerQueueGate] and
	// refuses it unless Queue ≥ QueueHighWatermark + BatchSize. 0 (the
	// default): no queue, enforced credit. At most [MaxQueue];
	// QueueHighWatermark is below Queue.
	Queue              int
	QueueHighWatermark int

	// PollInterval is the longest an idle dispatcher waits before sweeping
	// again when nothing else wakes it (a notification, a written result
	// that frees a held namespace's headroom, a delayed row or a rate
	// token coming due: see the package doc). Default 1s; at least
	// [MinPollInterval].
	PollInterval time.Duration
	// PollJitter is the fraction of PollInterval randomised around it, in
	// [0, 1], so that nodes do not sweep in step. 0 means 0.2; negative
	// means none; NaN is refused.
	PollJitter float64
	// RefillDelay is how long the dispatcher may wait, while some workers
	// are running and fewer than min(Workers, BatchSize) are idle, for
	// more of them to be freed before it sweeps, so that workers freed one
	// by one are refilled by fewer, larger sweeps: every sweep costs the
	// store the same round trips, however few rows it claims. 0 means 1ms;
	// negative means none (sweep as soon as one worker is idle).
	RefillDelay time.Duration
	// Coalesce picks a point between latency and database work while rows
	// trickle in: after a sweep that came back short (no backlog), the
	// notification or written result that wakes the dispatcher starts the
	// next sweep Coalesce later, so that the rows enqueued meanwhile are
	// claimed by one sweep (its counts and claim cost the database about
	// the same for one row as for many). A row then waits at most Coalesce
	// more before it is claimed; at a steady rate r a sweep claims about
	// r·Coalesce rows. A backlog (sweeps coming back full) is never
	// delayed. 0 means the default, 2ms; negative means none (sweep at
	// once on every wake-up: the lowest latency). At most the poll
	// interval in force (PollInterval, or its default 1s when 0): New
	// refuses a longer one with an *[OptionError].
	// The default is the widest of none, 2ms, 10ms and 50ms that kept the
	// p99 from enqueue to handler start within 10ms at 500 and 2,000
	// rows/s on pgstore (bench's BenchmarkSteady, 2026-12-01: p99 5.3–5.4ms,
	// with 30–57% less database CPU per row than none).
	Coalesce time.Duration
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
	// ClaimsInFlight is the most sweeps the dispatcher keeps in flight at
	// once while sweeps come back full, 1 to [MaxClaimsInFlight]: a sweep
	// plans while the claims of the ones before it are still running (see
	// [backpressure.SweepAhead]), each asking for the idle workers the
	// others have not reserved, so the workers are never oversubscribed.
	// 0 means 2. With FreshCounts it is 1. Two against one drained a
	// backlog on pgstore at 0.95–1.18× (10 namespaces) and 0.99–1.07×
	// (1,000) on a quiet 2-core machine and 1.36–1.59× on a loaded one
	// (bench's BenchmarkDrain, 2026-12-01, -wide and -wide-serial arms).
	ClaimsInFlight int

	// CompleteBatch is the most results one Complete call writes; a batch
	// is written as soon as it is full. Default 100; at most
	// [MaxCompleteBatch].
	CompleteBatch int
	// FlushInterval is the longest a result waits for its batch to fill
	// before it is written anyway. Default 10ms; at least
	// [MinFlushInterval].
	FlushInterval time.Duration
	// CompletionBacklog bounds the results waiting to be written: a
	// worker hands its result over and takes the next row at once, until
	// CompletionBacklog results wait on their way to the writer (which
	// holds at most CompletionBacklog more while the store is slow or
	// failing); then workers block until the store catches up, so
	// completion is under backpressure too. The rows stay claimed until
	// written, so ceilings count them. Default 10,000, and never below
	// CompleteBatch; at most [MaxCompletionBacklog].
	CompletionBacklog int

	// LeaseRenewal is the fraction of a row's lease after which the
	// dispatcher extends it (and again every such fraction), from
	// [MinLeaseRenewal] to 0.5.
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
	// 1s, Max 1h (or Base, if longer), Jitter 0.2. Max is at most
	// [outbox.MaxDelay], the longest retry delay a store takes.
	Backoff Backoff
	// RetryPolicies overrides Backoff for the rows of the task queues it
	// names (key: Row.TaskQueue, "" the default task queue), each policy's
	// zero fields defaulted as Backoff's are. At most [MaxRetryPolicies]
	// entries. A handler's [RetryAt] overrides both.
	RetryPolicies map[string]Backoff
	// MaxSnoozes bounds the snoozes of a row (see [Snooze]): a handler's
	// snooze of a row already snoozed MaxSnoozes times is a failure
	// instead, retried after the backoff, spending an attempt. 0 means
	// 100; at most [MaxSnoozesLimit].
	MaxSnoozes int
	// OverloadSnooze is how long a row whose handler returned an
	// [Overloaded] signal without a Retry-After is snoozed. 0 means 1s;
	// at most outbox.MaxDelay.
	OverloadSnooze time.Duration
	// ErrorBackoff is the delay before a failed store call (a sweep, a
	// Complete, an ExtendLeases) is tried again, by consecutive failures.
	// Zero fields default to Base 100ms, Max 30s (or Base, if longer),
	// Jitter 0.2. Base is at least [MinErrorBackoff]; Max at most
	// [outbox.MaxDelay].
	ErrorBackoff Backoff

	// Logger receives the dispatcher's logs: Run's start and stop (info),
	// store failures (warn), handler panics with their stack (error), dead
	// letters (warn), retries, lost leases and held namespaces (debug, at
	// most one line per namespace per 10s; see the package doc). Nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics receives what the dispatcher does. Nil means [NopMetrics].
	Metrics Metrics

	// Adaptive, when not nil, turns on adaptive ceilings: a namespace
	// whose handlers report a downstream's [Overloaded] signal gets a
	// lower ceiling on this node, learned from the signals, not raised
	// before their Retry-After (with HoldClaims, its rows are held until
	// then; see [AdaptiveCeilings], docs/adaptive.md).
	// Nil, the default: off; the dispatcher behaves as without it.
	Adaptive *AdaptiveCeilings

	// Operate, when not nil, turns on shared settings and node reports
	// (see [Operate]). Nil, the default: neither; the dispatcher runs on
	// its Backpressure's configuration alone and reports nothing.
	Operate *Operate
}

// defaultCoalesce is Options.Coalesce's default.
const defaultCoalesce = 2 * time.Millisecond

// MaxClaimsInFlight is the largest Options.ClaimsInFlight: beyond a few,
// claims in flight only contend for the same rows and connections.
const MaxClaimsInFlight = 8

var (
	defaultBackoff      = Backoff{Base: time.Second, Max: time.Hour, Jitter: 0.2}
	defaultErrorBackoff = Backoff{Base: 100 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}
)

// withDefaults validates o and returns it with its defaults filled in.
func (o Options) withDefaults() (Options, error) {
	if err := o.validate(); err != nil {
		return o, err
	}
	if err := o.validateResults(); err != nil {
		return o, err
	}
	o = o.defaulted()
	o.defaultResults()
	return o, nil
}

// optionRule is one check New makes of Options as given, before their
// defaults: check returns why the field name is invalid (its value
// included), or "" if it is valid.
type optionRule struct {
	name  string
	check func(o Options) string
}

// optionRules are every check of Options, in the order New makes them:
// the first that fails is the *[OptionError] it returns.
var optionRules = slices.Concat([]optionRule{
	{"Workers", func(o Options) string { return notIn(o.Workers, 1, MaxWorkers, "") }},
	{"Queue", func(o Options) string { return notIn(o.Queue, 0, MaxQueue, "") }},
	{"QueueHighWatermark", func(o Options) string {
		switch {
		case o.QueueHighWatermark < 0:
			return fmt.Sprintf("is %d, negative", o.QueueHighWatermark)
		case o.Queue == 0 && o.QueueHighWatermark != 0:
			return "is set without a Queue"
		case o.Queue > 0 && o.QueueHighWatermark >= o.Queue:
			return fmt.Sprintf("is %d, not below Queue (%d)", o.QueueHighWatermark, o.Queue)
		}
		return ""
	}},
	{"PollInterval", func(o Options) string { return below(o.PollInterval, MinPollInterval, " (0 means 1s)") }},
	{"PollJitter", func(o Options) string { return notFraction(o.PollJitter) }},
	{"CompleteBatch", func(o Options) string { return notIn(o.CompleteBatch, 0, MaxCompleteBatch, "") }},
	{"FlushInterval", func(o Options) string { return below(o.FlushInterval, MinFlushInterval, " (0 means 10ms)") }},
	{"CompletionBacklog", func(o Options) string { return notIn(o.CompletionBacklog, 0, MaxCompletionBacklog, "") }},
	{"LeaseRenewal", func(o Options) string {
		switch {
		case math.IsNaN(o.LeaseRenewal):
			return fmt.Sprintf("is NaN; want a fraction in [%v, 0.5], or 0 for the default 1/3", MinLeaseRenewal)
		case o.LeaseRenewal != 0 && (o.LeaseRenewal < MinLeaseRenewal || o.LeaseRenewal > 0.5):
			return fmt.Sprintf("is %v, not in [%v, 0.5] (0 means 1/3)", o.LeaseRenewal, MinLeaseRenewal)
		}
		return ""
	}},
	{"Coalesce", func(o Options) string {
		if o.Coalesce > o.pollInForce() {
			return fmt.Sprintf("is %v, above the poll interval in force (PollInterval %v)", o.Coalesce, o.pollInForce())
		}
		return ""
	}},
	{"ClaimsInFlight", func(o Options) string { return notIn(o.ClaimsInFlight, 0, MaxClaimsInFlight, " (0 means 2)") }},
	{"ShutdownTimeout", func(o Options) string {
		if o.ShutdownTimeout < 0 {
			return fmt.Sprintf("is %v, negative", o.ShutdownTimeout)
		}
		return ""
	}},
},
	backoffRules("Backoff", func(o Options) Backoff { return o.Backoff }, 0),
	backoffRules("ErrorBackoff", func(o Options) Backoff { return o.ErrorBackoff }, MinErrorBackoff),
	adaptiveRules,
)

// backoffRules are the checks of the Backoff of o's field name (of
// returns it), as given (before defaults): in optionRules. minBase is the
// shortest non-zero Base.
func backoffRules(name string, of func(Options) Backoff, minBase time.Duration) []optionRule {
	return []optionRule{
		{name + ".Base", func(o Options) string {
			switch b := of(o); {
			case b.Base < 0 || b.Base > outbox.MaxDelay:
				return fmt.Sprintf("is %v, not in [0, outbox.MaxDelay = %v]", b.Base, outbox.MaxDelay)
			case b.Base > 0 && b.Base < minBase:
				return fmt.Sprintf("is %v, below %v", b.Base, minBase)
			}
			return ""
		}},
		{name + ".Max", func(o Options) string {
			switch b := of(o); {
			case b.Max < 0 || b.Max > outbox.MaxDelay:
				return fmt.Sprintf("is %v, not in [0, outbox.MaxDelay = %v]", b.Max, outbox.MaxDelay)
			case b.Max > 0 && b.Max < b.Base:
				return fmt.Sprintf("is %v, below Base (%v)", b.Max, b.Base)
			}
			return ""
		}},
		{name + ".Jitter", func(o Options) string { return notFraction(of(o).Jitter) }},
	}
}

// validate returns the *[OptionError] of the first of optionRules o fails,
// or nil.
func (o Options) validate() error {
	for _, rule := range optionRules {
		if reason := rule.check(o); reason != "" {
			return &OptionError{Field: rule.name, Reason: reason}
		}
	}
	return nil
}

// notIn is the reason for an integer v outside [lo, hi], or "".
func notIn(v, lo, hi int, note string) string {
	if v < lo || v > hi {
		return fmt.Sprintf("is %d, not in [%d, %d]%s", v, lo, hi, note)
	}
	return ""
}

// below is the reason for a duration d that is negative, or positive and
// below least, or "" (0 takes the default note names).
func below(d, least time.Duration, note string) string {
	if d < 0 || d > 0 && d < least {
		return fmt.Sprintf("is %v, below %v%s", d, least, note)
	}
	return ""
}

// notFraction is the reason for a jitter f that is NaN or above 1, or ""
// (negative means none).
func notFraction(f float64) string {
	switch {
	case math.IsNaN(f):
		return "is NaN; want a fraction in [0, 1], or negative for none"
	case f > 1:
		return fmt.Sprintf("is %v, above 1", f)
	}
	return ""
}

// defaulted returns o, valid, with its defaults filled in.
func (o Options) defaulted() Options {
	o.PollInterval = o.pollInForce()
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
	switch {
	case o.Coalesce == 0:
		o.Coalesce = min(defaultCoalesce, o.PollInterval)
	case o.Coalesce < 0:
		o.Coalesce = 0
	}
	if o.ClaimsInFlight == 0 {
		o.ClaimsInFlight = 2
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
	if o.Adaptive != nil {
		a := o.Adaptive.withDefaults() // a copy: the caller's stays as it is
		o.Adaptive = &a
	}
	return o
}

// defaultPollInterval is Options.PollInterval's default.
const defaultPollInterval = time.Second

// pollInForce returns the poll interval o runs with: PollInterval, or its
// default when it is 0.
func (o Options) pollInForce() time.Duration {
	if o.PollInterval == 0 {
		return defaultPollInterval
	}
	return o.PollInterval
}

// jittered returns d spread by ±jitter/2 for u in [0, 1): its mean is d.
func jittered(d time.Duration, jitter, u float64) time.Duration {
	return d + time.Duration(float64(d)*jitter*(u-0.5))
}

// validateResults checks the result options as given (before defaults):
// optionRules' checks of the fields whose names are not fixed.
func (o Options) validateResults() error {
	bad := func(field, format string, args ...any) error {
		return &OptionError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.MaxSnoozes < 0 || o.MaxSnoozes > MaxSnoozesLimit:
		return bad("MaxSnoozes", "is %d, not in [0, %d] (0 means %d)", o.MaxSnoozes, MaxSnoozesLimit, defaultMaxSnoozes)
	case o.OverloadSnooze < 0 || o.OverloadSnooze > outbox.MaxDelay:
		return bad("OverloadSnooze", "is %v, not in [0, outbox.MaxDelay]", o.OverloadSnooze)
	case len(o.RetryPolicies) > MaxRetryPolicies:
		return bad("RetryPolicies", "has %d entries, over the limit of %d", len(o.RetryPolicies), MaxRetryPolicies)
	}
	for q, b := range o.RetryPolicies {
		for _, rule := range backoffRules(fmt.Sprintf("RetryPolicies[%q]", q), func(Options) Backoff { return b }, 0) {
			if reason := rule.check(o); reason != "" {
				return &OptionError{Field: rule.name, Reason: reason}
			}
		}
	}
	return nil
}

// defaultResults fills the result options' defaults; RetryPolicies
// becomes a copy, so the caller's map stays as it is.
func (o *Options) defaultResults() {
	if o.MaxSnoozes == 0 {
		o.MaxSnoozes = defaultMaxSnoozes
	}
	if o.OverloadSnooze == 0 {
		o.OverloadSnooze = defaultOverloadSnooze
	}
	if len(o.RetryPolicies) == 0 {
		return
	}
	policies := make(map[string]Backoff, len(o.RetryPolicies))
	for q, b := range o.RetryPolicies {
		policies[q] = b.withDefaults(defaultBackoff)
	}
	o.RetryPolicies = policies
}
