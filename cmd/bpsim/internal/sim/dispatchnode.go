package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// A backpressure node is a real dispatch.Dispatcher, the code that ships,
// driven in lockstep with the simulated clock. dispatch runs on the wall
// clock and takes no clock of its own, so the simulation does not try to
// fake its timers; it makes them irrelevant instead:
//
//   - Sweeps are gated. A sweep ends with the Swept metric, which hands the
//     driver the rows the sweep claimed and then blocks until the driver
//     grants the node its next sweep; the first sweep waits for its grant
//     in the store's first planner call instead. So a node sweeps at most
//     once a tick, exactly when the old loop swept it, and it reads the
//     planner's settings (SweepN reads them before its first store call)
//     only after the grant: a SetConfig or SetOwnedShards the driver makes
//     before granting the tick's sweeps is the one that sweep uses.
//   - A crash is a gate that never opens again. The node is never granted
//     another sweep nor released a row, and its store refuses every write
//     from then on (completions, lease extensions), as a killed process
//     writes nothing: its claimed rows stay claimed until their leases run
//     out.
//   - The budget is deterministic. With RefillDelay longer than any run, a
//     dispatcher whose workers are busy waits for min(Workers, BatchSize)
//     of them to be free before it sweeps (or for all to be idle), and then
//     asks for exactly that many: the rule the other policies follow. The
//     driver grants a node's sweep only when its free workers reach that
//     number, so the grant and the dispatcher agree.
//   - Work is a handler that blocks until the driver releases its row, at
//     the tick its service time ends. The dispatcher's batched completer
//     writes the settle through the store, with the simulated clock; the
//     driver waits for every released row's completion before it goes on.
//
// The poll interval is a nanosecond and there is no wake-up (the gate is
// the wake-up); lease extension runs on the wall clock every third of a
// lease, far longer than a run, so it does not fire in practice, and would
// be harmless if it did.

// dispatchNode is one backpressure node: its dispatcher and the gate.
type dispatchNode struct {
	d      *dispatch.Dispatcher
	store  *gatedStore
	cancel context.CancelFunc
	done   chan error // Run's result
	once   sync.Once
	runErr error
}

// sweepDone is what the driver learns of a granted sweep.
type sweepDone struct {
	event dispatch.SweepEvent
	rows  []outbox.Row
}

// completion is one row the dispatcher completed: err is nil when the
// store applied it, else the row's lease was lost. outcome is what the
// dispatcher wrote: a settle, or a snooze for a call answered 429.
type completion struct {
	lease   outbox.Lease
	outcome outbox.Outcome
	err     error
}

// gatedStore is the store a dispatcher sees: the policy's store, with each
// sweep waiting for a grant and each claim and completion reported to the
// driver. It forwards the sweep's optional counting extensions, so the
// planner takes the store's own I/O path.
type gatedStore struct {
	s *simStore

	grant chan struct{} // one token per granted sweep
	// inSweep says a granted sweep is under way. Only the dispatcher's
	// sweep loop touches it: its planner calls and its Swept metric.
	inSweep bool
	// stopped is closed when the dispatcher's context ends, so that a
	// Swept waiting for the next grant returns.
	stopped <-chan struct{}
	// crashed makes every later store call fail without touching the
	// store (see crash).
	crashed atomic.Bool

	mu       sync.Mutex
	claimed  []outbox.Row                   // rows of the sweep under way
	released map[outbox.Lease]chan struct{} // closed when the row's service ends
	results  map[outbox.Lease]error         // what the handler returns once released (nil: success)

	swept     chan sweepDone
	completed chan completion
	failed    chan error // a Complete or ExtendLeases the store refused
}

func newGatedStore(s *simStore, rows int) *gatedStore {
	return &gatedStore{
		s:         s,
		grant:     make(chan struct{}, 1),
		released:  make(map[outbox.Lease]chan struct{}),
		results:   make(map[outbox.Lease]error),
		swept:     make(chan sweepDone, 1),
		completed: make(chan completion, max(rows, 1)),
		failed:    make(chan error, 1),
	}
}

// enter waits, on the first planner call of a sweep, for the sweep's grant.
func (g *gatedStore) enter(ctx context.Context) error {
	if g.crashed.Load() {
		return errCrashed
	}
	if g.inSweep {
		return nil
	}
	select {
	case <-g.grant:
		g.inSweep = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Claimer returns g itself: the dispatcher's sweeps go through the gate.
func (g *gatedStore) Claimer() backpressure.OutboxStore[outbox.Row] { return g }

// errCrashed is what a crashed node's store calls return.
var errCrashed = errors.New("bpsim: node crashed")

func (g *gatedStore) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	if err := g.enter(ctx); err != nil {
		return nil, err
	}
	return g.s.CountClaimedOutboxRows(ctx, shards)
}

func (g *gatedStore) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	if err := g.enter(ctx); err != nil {
		return nil, err
	}
	return g.s.CountPendingOutboxRows(ctx, shards, capPerRoute)
}

// CountOutboxRows forwards backpressure.Counter, so sweeps take each
// store's own fast path; a store without it refuses every combination, and
// the sweep falls back to the plain counts.
func (g *gatedStore) CountOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	c, ok := g.s.OutboxStore.(backpressure.Counter)
	if !ok {
		return nil, nil, backpressure.ErrNotSupported
	}
	if err := g.enter(ctx); err != nil {
		return nil, nil, err
	}
	return c.CountOutboxRows(ctx, shards, p)
}

func (g *gatedStore) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	if err := g.enter(ctx); err != nil {
		return nil, err
	}
	rows, err := g.s.ClaimOutboxRowsScoped(ctx, shards, claims)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	for _, r := range rows {
		g.released[r.Lease()] = make(chan struct{})
	}
	g.claimed = append(g.claimed, rows...)
	g.mu.Unlock()
	return rows, nil
}

// Complete writes the dispatcher's results and reports each to the driver.
func (g *gatedStore) Complete(ctx context.Context, cs []outbox.Completion) ([]outbox.Result, error) {
	if g.crashed.Load() {
		return nil, errCrashed
	}
	res, err := g.s.Complete(ctx, cs)
	if err != nil {
		return nil, err
	}
	for i, c := range cs {
		g.completed <- completion{lease: c.Lease, outcome: c.Outcome, err: res[i].Err}
	}
	return res, nil
}

func (g *gatedStore) ExtendLeases(ctx context.Context, leases []outbox.Lease) ([]outbox.Result, error) {
	if g.crashed.Load() {
		return nil, errCrashed
	}
	return g.s.ExtendLeases(ctx, leases)
}

// Lease is the store's lease, for the dispatcher's extension schedule.
func (g *gatedStore) Lease() time.Duration { return g.s.Lease() }

// release ends the service of the row claimed with lease: its handler
// returns result (nil: success) and the dispatcher completes it. The
// handler may not have started yet, so the closed channel stays for it to
// find; the handler forgets it.
func (g *gatedStore) release(lease outbox.Lease, result error) {
	g.mu.Lock()
	ch := g.released[lease]
	if result != nil {
		g.results[lease] = result
	}
	g.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// handler is the simulated work: it runs until the driver releases the row.
func (g *gatedStore) handler(ctx context.Context, row outbox.Row) error {
	g.mu.Lock()
	ch := g.released[row.Lease()]
	g.mu.Unlock()
	if ch == nil {
		return fmt.Errorf("bpsim: row %q was handed to a worker but never claimed", row.DispatchKey)
	}
	select {
	case <-ch:
		g.mu.Lock()
		delete(g.released, row.Lease())
		err := g.results[row.Lease()]
		delete(g.results, row.Lease())
		g.mu.Unlock()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gateMetrics ends a granted sweep and reports refused store calls.
type gateMetrics struct {
	dispatch.NopMetrics
	g *gatedStore
}

func (m gateMetrics) Swept(e dispatch.SweepEvent) {
	g := m.g
	g.inSweep = false
	g.mu.Lock()
	rows := g.claimed
	g.claimed = nil
	g.mu.Unlock()
	g.swept <- sweepDone{event: e, rows: rows}
	// Hold the loop until the next grant, so that the next sweep reads the
	// planner's settings after the driver's changes for its tick.
	select {
	case <-g.grant:
		g.inSweep = true
	case <-g.stopped:
	}
}

func (m gateMetrics) StoreFailed(op string, err error) {
	select {
	case m.g.failed <- fmt.Errorf("%s: %w", op, err):
	default:
	}
}

// startDispatchNode starts a dispatcher over s for bp with workers workers;
// adapt sets the options of an arm (nil: none).
func startDispatchNode(ctx context.Context, bp *backpressure.Backpressure, s *simStore, workers, rows int, adapt func(*dispatch.Options)) (*dispatchNode, error) {
	g := newGatedStore(s, rows)
	opts := dispatch.Options{
		Workers:         workers,
		PollInterval:    dispatch.MinPollInterval,
		PollJitter:      -1,
		RefillDelay:     1000 * time.Hour,
		FlushInterval:   50 * time.Microsecond,
		ShutdownTimeout: 10 * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler),
		Metrics:         gateMetrics{g: g},
		// Every sweep counts at its start, inside its gate: counts read
		// ahead would run outside the lockstep, on the wall clock.
		FreshCounts: true,
		// A row a downstream keeps answering 429 is snoozed as often as it
		// is: past MaxSnoozes it would spend an attempt instead, which the
		// audit would count as a second run.
		MaxSnoozes: dispatch.MaxSnoozesLimit,
	}
	if adapt != nil {
		adapt(&opts)
	}
	d, err := dispatch.New(bp, g, g.handler, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	g.stopped = ctx.Done()
	n := &dispatchNode{d: d, store: g, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- d.Run(ctx) }()
	return n, nil
}

// stallAfter bounds how long the driver waits, in wall-clock time, for a
// dispatcher to do what the lockstep says it must: a guard against a bug in
// the lockstep, never reached by a working run. It is generous because a
// -race test run on a machine loaded far past its cores (a load average of
// 69 on 2 cores) once took over a minute for one granted sweep.
const stallAfter = 5 * time.Minute

// sweep grants the node its sweep of the tick and returns it.
func (n *dispatchNode) sweep(ctx context.Context) (sweepDone, error) {
	n.store.grant <- struct{}{}
	guard := time.NewTimer(stallAfter)
	defer guard.Stop()
	select {
	case s := <-n.store.swept:
		if s.event.Err != nil {
			return s, s.event.Err
		}
		return s, nil
	case err := <-n.store.failed:
		return sweepDone{}, err
	case err := <-n.done:
		return sweepDone{}, fmt.Errorf("dispatcher stopped: %v", err)
	case <-ctx.Done():
		return sweepDone{}, ctx.Err()
	case <-guard.C:
		return sweepDone{}, errors.New("bpsim: a granted dispatcher did not sweep (lockstep broken)")
	}
}

// settle releases the rows of leases, each handler returning its results
// entry (nil: success), and waits until the dispatcher has completed each
// of them, returning the completions.
func (n *dispatchNode) settle(ctx context.Context, leases []outbox.Lease, results []error) ([]completion, error) {
	for i, l := range leases {
		n.store.release(l, results[i])
	}
	out := make([]completion, 0, len(leases))
	guard := time.NewTimer(stallAfter)
	defer guard.Stop()
	for len(out) < len(leases) {
		select {
		case c := <-n.store.completed:
			out = append(out, c)
		case err := <-n.store.failed:
			return nil, err
		case err := <-n.done:
			return nil, fmt.Errorf("dispatcher stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-guard.C:
			return nil, errors.New("bpsim: released rows were never completed (lockstep broken)")
		}
	}
	return out, nil
}

// crash kills the node: from now on its store writes nothing, and its
// dispatcher is stopped. Rows it had claimed keep their leases, which run
// out in simulated time; a completion its dispatcher attempts on the way
// down is refused, as a killed process's would never arrive.
func (n *dispatchNode) crash() {
	n.store.crashed.Store(true)
	n.stop()
}

// stop shuts the dispatcher down and waits for it.
func (n *dispatchNode) stop() {
	n.once.Do(func() {
		n.cancel()
		n.runErr = <-n.done
	})
}
