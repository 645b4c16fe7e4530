package backpressure

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"
)

// Sweep runs one sweep of a dispatcher node against store: it counts the
// rows each namespace has claimed and those pending per route on the
// node's shards, plans them as [Backpressure.Plan] does, and claims the
// plan's rows in one atomic ClaimOutboxRowsScoped. It returns the rows
// claimed and the plan.
//
// The claims are exactly those Plan would make from uncapped counts of
// the outbox as it is when the sweep counts, less the grants of claims
// still in flight on b (see [SweepAhead]). A report's Pending, Demand and
// Held may be lower bounds (see [NamespaceReport.Capped] and
// [Plan.Windowed]). A sweep runs with the configuration and shards b has
// when it starts. Sweeps on one b plan one at a time: Sweep waits for a
// sweep in progress.
//
// On error no row is claimed and b's rotation is unchanged. The error is
// ctx's if ctx is done before the sweep starts; one matching [ErrStore]
// (a *[StoreError] naming the failed call) if the store failed; a
// *[SnapshotError] if the store's counts break its contract; or one
// matching [ErrInvalidConfig] if b was not built by [New] or store is nil.
// How a sweep reads is in docs/engine.md.
func Sweep[R any](ctx context.Context, b *Backpressure, store OutboxStore[R]) ([]R, Plan, error) {
	return SweepN(ctx, b, store, math.MaxInt)
}

// SweepN is [Sweep] with a budget of min(n, B) rows for this sweep, B the
// batch size it starts with, as a dispatcher with n idle workers asks for
// no more rows than it can start. The plan's guarantees hold with that
// budget in place of B, and the rotation carries over whatever the
// budgets. With n ≤ 0 it returns (nil, Plan{}, nil) without calling the
// store. Errors are as for Sweep; SweepN forgets counts a SweepAhead read
// ahead.
func SweepN[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweepN(ctx, b, store, n, sweepMode{})
}

// SweepAhead is [SweepN] for a caller that sweeps again at once while
// sweeps come back full (a dispatcher draining a backlog), possibly from
// several goroutines. It reads the next sweep's counts beside a full
// sweep's claim, and the next SweepAhead within the last one's duration
// plans from them, corrected by every grant since the read
// (K′ = K + Σg, P′ = min(max(0, P − Σg), c)). And it lets the next plan
// start while its claim is in flight; that plan counts the grants in flight
// as claimed and no longer pending. Plans stay one at a time, in order.
//
// Every ceiling and the budget per plan hold as with [Sweep], given shard
// ownership that never overlaps; rows enqueued since a read wait a few
// sweeps. The store must be safe for concurrent use, and ctx should outlive
// the call (a read-ahead runs under it). Errors are as for Sweep, but a
// failed claim leaves the rotation to a plan made meanwhile, if any.
// docs/engine.md has the mechanism.
func SweepAhead[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweepN(ctx, b, store, n, sweepMode{readAhead: true, overlap: true})
}

// sweepMode is how a sweep runs beside the sweeps before and after it.
type sweepMode struct {
	readAhead bool // read the next sweep's counts beside the claim, and plan from the last sweep's (SweepAhead)
	overlap   bool // let the next sweep plan while this one's claim is in flight (SweepAhead)
}

// sweepN is every sweep: it takes b's planner, reads and plans (sweeper),
// records the plan's grants as in flight, claims, and commits the plan's
// rotation to b. Without overlap it holds the planner until the claim
// returns and commits only a claim that succeeded; with overlap it commits
// the plan and lets the planner go before it claims (see claimOverlapped).
func sweepN[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int, m sweepMode) ([]R, Plan, error) {
	if b == nil || b.sem == nil {
		return nil, Plan{}, errNotNew
	}
	if store == nil {
		return nil, Plan{}, errNilStore
	}
	if n <= 0 {
		return nil, Plan{}, nil
	}
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, Plan{}, ctx.Err()
	}
	held := true
	release := func() {
		if held {
			held = false
			<-b.sem
		}
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return nil, Plan{}, err
	}

	began := b.now()
	s := newSweeper(b, store, n)
	carried := b.ahead // used by this sweep or by none
	b.ahead = nil
	// Released whatever happens (take and drop are idempotent): SweepN
	// forgets it, and a store that is no Counter never takes it.
	defer carried.drop()
	s.readAhead = m.readAhead && b.backToBack(began)
	if !s.readAhead {
		carried = nil
	}

	if txs, ok := store.(TxSweeper[R]); ok {
		rows, out, err := sweepInTx(ctx, txs, s)
		if err != nil {
			return nil, Plan{}, err
		}
		b.commit(out, began)
		spendClaimed(b, out.plan, rows)
		return rows, out.plan, nil
	}

	out, err := s.plan(ctx, carried)
	if errors.Is(err, errShortAhead) {
		// Counts read ahead that do not fill the budget may understate
		// what is claimable now: count afresh rather than come back short
		// while rows wait.
		out, err = s.plan(ctx, nil)
	}
	if err != nil {
		return nil, Plan{}, err
	}
	if s.byWindow {
		// The store claimed the plan's rows as it resolved the window.
		b.commit(out, began)
		return s.won, out.plan, nil
	}
	if len(out.plan.Claims) == 0 {
		b.commit(out, began)
		return nil, out.plan, nil
	}
	f := b.flights.add(out.plan.Claims)
	// Rate tokens are taken for the grants now, while the planner is held,
	// so plans made beside this claim see them spent; the claim gives back
	// what it did not fill (rate.go).
	reserved := b.reserveTokens(out.plan)
	if s.readAhead && s.counter != nil && sumLimits(out.plan.Claims) == s.budget {
		// A full plan: the next sweep may come at once. It plans from the
		// counts this one did, if they serve once more, else from counts
		// read while this claim runs.
		if out.reused && carried.passOn(out.plan, s.budget) {
			out.ahead = carried
		} else {
			out.ahead = startReadAhead(ctx, b, s, out)
		}
	}
	if m.overlap {
		undo := b.commitPlan(out)
		release()
		return claimOverlapped(ctx, b, s, out, f, reserved, undo, began)
	}
	rows, err := s.store.ClaimOutboxRowsScoped(ctx, s.st.f, out.plan.Claims)
	b.flights.remove(f)
	releaseTokens(b, reserved, rows)
	if err != nil {
		out.ahead.drop()
		return nil, Plan{}, &StoreError{Op: "ClaimOutboxRowsScoped", Err: err}
	}
	b.commit(out, began)
	b.keepAhead(out.ahead, len(rows) == s.budget)
	return rows, out.plan, nil
}

// sweepInTx runs a whole sweep, counts and claim, in one transaction of a
// TxSweeper: nothing is in flight outside it, and nothing is read ahead.
func sweepInTx[R any](ctx context.Context, txs TxSweeper[R], s *sweeper[R]) ([]R, sweepResult, error) {
	var (
		rows []R
		out  sweepResult
	)
	err := txs.InSweepTx(ctx, func(tx OutboxStore[R]) error {
		ts := *s
		ts.store = tx
		ts.counter, _ = any(tx).(Counter)
		ts.wc = ts.windowClaimer()
		var err error
		if out, err = ts.plan(ctx, nil); err != nil || len(out.plan.Claims) == 0 {
			return err
		}
		if ts.byWindow {
			rows = ts.won
			return nil
		}
		if rows, err = tx.ClaimOutboxRowsScoped(ctx, ts.st.f, out.plan.Claims); err != nil {
			return &StoreError{Op: "ClaimOutboxRowsScoped", Err: err}
		}
		return nil
	})
	// fn's errors are already typed; anything else is the store's own.
	if err != nil && !errors.As(err, new(*StoreError)) && !errors.As(err, new(*SnapshotError)) {
		err = &StoreError{Op: "InSweepTx", Err: err}
	}
	if err != nil {
		return nil, sweepResult{}, err
	}
	return rows, out, nil
}

// claimOverlapped claims out's rows after its plan was committed and the
// planner let go, so that the next sweep plans beside this claim (its
// counts corrected by f's grants, in flight until the claim returns).
// Afterwards it takes the planner only if it is free, to record the sweep's
// end and forget a read-ahead that a short claim made useless; on failure
// it waits for the planner and undoes the plan's rotation, unless a later
// plan already built on it.
func claimOverlapped[R any](ctx context.Context, b *Backpressure, s *sweeper[R], out sweepResult, f *flight, reserved map[string]int, undo rotationUndo, began time.Time) ([]R, Plan, error) {
	rows, err := s.store.ClaimOutboxRowsScoped(ctx, s.st.f, out.plan.Claims)
	b.flights.remove(f)
	releaseTokens(b, reserved, rows)
	if err != nil {
		out.ahead.drop()
		b.sem <- struct{}{}
		if b.planSeq == undo.seq {
			undo.apply(b)
		}
		if b.ahead == out.ahead {
			b.ahead = nil
		}
		<-b.sem
		return nil, Plan{}, &StoreError{Op: "ClaimOutboxRowsScoped", Err: err}
	}
	full := len(rows) == s.budget
	select {
	case b.sem <- struct{}{}:
		b.ended(began)
		if !full && b.ahead == out.ahead {
			b.ahead = nil
			out.ahead.drop()
		}
		<-b.sem
	default:
		// Another sweep is planning: it is back to back with this one.
		if !full {
			out.ahead.markShort()
		}
	}
	return rows, out.plan, nil
}

// backToBack reports whether a sweep that began at began follows the last
// one within that one's duration of its end: only such a caller (draining
// a backlog, not waiting for busy workers or a ticker) reads ahead or
// plans from counts read ahead, which would otherwise be wasted or stale.
func (b *Backpressure) backToBack(began time.Time) bool {
	return noExpiry || (!b.lastEnd.IsZero() && began.Sub(b.lastEnd) <= b.lastDur)
}

// commit installs a sweep's plan on b once its claim succeeded (or it
// claimed nothing): the rotation, the hints, the sweep's end.
func (b *Backpressure) commit(out sweepResult, began time.Time) {
	b.advanceCursors(out.plan.Windowed)
	b.hints.record(out)
	b.ended(began)
}

// ended records when a sweep that began at began returned.
func (b *Backpressure) ended(began time.Time) {
	b.lastEnd = b.now()
	b.lastDur = b.lastEnd.Sub(began)
}

// keepAhead keeps a read-ahead for the next sweep when the claim returned
// every row planned: a backlog, which a short claim does not show.
func (b *Backpressure) keepAhead(a *ahead, full bool) {
	if a != nil && full {
		b.ahead = a
	} else {
		a.drop()
	}
}

// commitPlan installs an overlapped sweep's plan before its claim: the
// rotation (the next plan continues from it), the hints and its
// read-ahead. It returns what undoes the rotation should the claim fail.
func (b *Backpressure) commitPlan(out sweepResult) rotationUndo {
	u := rotationUndo{nsCursor: b.nsCursor, nsCursorSet: b.nsCursorSet, nsCursorAt: b.nsCursorAt}
	for _, m := range b.scratch.routeMoves {
		tq, ok := b.routeCursor[m.namespace]
		u.routes = append(u.routes, routeUndo{m.namespace, tq, ok})
	}
	b.advanceCursors(out.plan.Windowed)
	b.hints.record(out)
	b.ahead = out.ahead
	b.planSeq++
	u.seq = b.planSeq
	return u
}

// rotationUndo is the rotation as it was before a plan's cursor moves.
type rotationUndo struct {
	seq         uint64 // b.planSeq once the plan was installed
	nsCursor    string
	nsCursorSet bool
	nsCursorAt  roundPos
	routes      []routeUndo
}

type routeUndo struct {
	namespace, taskQueue string
	present              bool
}

// apply restores the rotation u saved. The caller holds b.sem, and no plan
// has been installed since u's.
func (u rotationUndo) apply(b *Backpressure) {
	b.nsCursor, b.nsCursorSet, b.nsCursorAt = u.nsCursor, u.nsCursorSet, u.nsCursorAt
	for _, r := range slices.Backward(u.routes) {
		if r.present {
			b.routeCursor[r.namespace] = r.taskQueue
		} else {
			delete(b.routeCursor, r.namespace)
		}
	}
}

// errShortAhead is what a sweeper returns, having claimed nothing, when
// counts read ahead give a plan short of the budget: sweepN then counts
// afresh.
var errShortAhead = errors.New("backpressure: counts read ahead fall short of the budget")

// sweepResult is a sweep's plan and what it tells b and the next sweep:
// how many namespaces its counts saw, and, for a Counter that serves
// Claimed, the k the next window is sized for.
type sweepResult struct {
	plan   Plan
	seen   int
	nextK  int
	reused bool   // planned from counts read ahead
	ahead  *ahead // the next sweep's counts, being read (SweepAhead)
}

// sweeper is one sweep between taking the planner and claiming: what it
// reads (readFirst), how it plans from that (planFrom, reading more where
// the first read cannot give the exact plan), and the grants in flight its
// fresh counts are corrected by. It never changes b's state except the
// planner's scratch (b.plan).
type sweeper[R any] struct {
	b         *Backpressure
	st        settings
	budget    int
	full      int // the deepest pending count the budget needs (pendingCountCap)
	store     OutboxStore[R]
	counter   Counter // store's, nil if it is none
	readAhead bool

	// The grants of claims in flight on b when the sweep began (overlapped
	// sweeps'). A count may or may not see them, so every count is read
	// deeper and wider by them and corrected as counts read ahead are
	// (see docs/engine.md): K + g for claimed, min(max(0, P − g), c) for
	// pending.
	inflight []ScopedClaim
	deeper   int // the largest Σ g over one route
	wider    int // the namespaces with a grant

	// The store's window claim, if this sweep may use it (windowClaimer),
	// and the rows it claimed when the plan came from it (byWindow): the
	// sweep then claims nothing more.
	wc       windowClaimer[R]
	won      []R
	byWindow bool
}

func newSweeper[R any](b *Backpressure, store OutboxStore[R], n int) *sweeper[R] {
	st := b.current()
	s := &sweeper[R]{b: b, st: st, budget: min(n, st.cfg.batchSize), store: store}
	s.full = st.fullCap(s.budget)
	s.counter, _ = any(store).(Counter)
	if s.inflight = b.flights.grants(); len(s.inflight) > 0 {
		s.deeper, s.wider = grantSpread(s.inflight)
	}
	s.wc = s.windowClaimer()
	return s
}

// counts is what a sweep has read: the claimed counts, and the pending
// counts p describes (zero p: none yet; a CapPerRoute ≥ 1 with Namespaces
// 0: full counts at that cap; Namespaces ≥ 1: a window).
type counts struct {
	claimed    map[string]int
	pending    []RouteCount
	p          CountParams
	claimedToo bool // the first read was a Counter's with the claimed counts
	ahead      bool // read ahead for an earlier sweep, corrected since (SweepAhead)
}

// plan reads and plans (see readFirst and planFrom).
func (s *sweeper[R]) plan(ctx context.Context, carried *ahead) (sweepResult, error) {
	c, err := s.readFirst(ctx, carried)
	if err != nil {
		return sweepResult{}, err
	}
	plan, err := s.planFrom(ctx, &c)
	if err != nil {
		return sweepResult{}, err
	}
	if c.ahead && sumLimits(plan.Claims) < s.budget {
		return sweepResult{}, errShortAhead
	}
	markCapped(plan.Namespaces, c.pending, plan.countCap)
	out := sweepResult{plan: plan, seen: math.MaxInt, reused: c.ahead} // a full window: at least the window, more beyond it
	if !plan.Windowed {
		out.seen = distinctNamespaces(c.pending)
	}
	if c.claimedToo && s.st.cfg.weights == nil {
		out.nextK = guessK(plan, s.st)
	}
	return out, nil
}

// readFirst makes a sweep's first read. With a Counter: counts carried
// from a read-ahead if they serve (ahead.take), else one CountOutboxRows
// with the claimed counts and the window or full counts the hints expect
// (firstParams), else full counts with the claimed counts. What a Counter
// serves is learnt by asking (ErrNotSupported costs no I/O), each sweep
// afresh, as b may sweep more than one store. Otherwise, or if the Counter
// serves neither: CountClaimedOutboxRows alone, the pending counts to
// follow in planFrom.
func (s *sweeper[R]) readFirst(ctx context.Context, carried *ahead) (counts, error) {
	if s.counter != nil {
		p := firstParams(&s.b.hints, s.b.after(), s.st, s.budget)
		if claimed, pending, want, ok := carried.take(ctx, s.st, s.store, p); ok {
			return counts{claimed: claimed, pending: pending, p: want, claimedToo: true, ahead: true}, nil
		}
		if p.Namespaces > 0 && s.wc != nil {
			// The window is claimed by the store (claimWindow), which
			// needs only the claimed counts.
			return s.countClaimed(ctx)
		}
		c, err := s.count(ctx, p)
		if p.Namespaces > 0 && errors.Is(err, ErrNotSupported) {
			c, err = s.count(ctx, CountParams{CapPerRoute: s.b.hints.firstCountCap(s.full), Claimed: true})
		}
		switch {
		case err == nil:
			return c, nil
		case !errors.Is(err, ErrNotSupported):
			return counts{}, &StoreError{Op: "CountOutboxRows", Err: err}
		}
	}
	return s.countClaimed(ctx)
}

// countClaimed reads the claimed counts alone, corrected for the claims in
// flight.
func (s *sweeper[R]) countClaimed(ctx context.Context) (counts, error) {
	claimed, err := s.store.CountClaimedOutboxRows(ctx, s.st.f)
	if err != nil {
		return counts{}, &StoreError{Op: "CountClaimedOutboxRows", Err: err}
	}
	return counts{claimed: s.correctClaimed(claimed)}, nil
}

// planFrom plans from c, reading more where c cannot give the plan
// uncapped counts would: when the window rule applies, from the store's
// window claim if it has one and no window was counted yet (claimWindow,
// which claims too), else from a counted window (planWindow); otherwise,
// or if the window falls short, from full counts (planFull).
func (s *sweeper[R]) planFrom(ctx context.Context, c *counts) (Plan, error) {
	if n, ok := s.window(c); ok {
		if s.wc != nil && c.p.Namespaces == 0 && !c.ahead {
			plan, ok, err := s.claimWindow(ctx, c)
			if err != nil || ok {
				return plan, err
			}
			if s.wc != nil {
				// Fewer namespaces with demand than the budget needs:
				// a counted window would fall short too.
				return s.planFull(ctx, c)
			}
		}
		if s.counter != nil {
			if plan, ok, err := s.planWindow(ctx, c, n); err != nil || ok {
				return plan, err
			}
		}
	}
	return s.planFull(ctx, c)
}

// window returns the namespaces a window must cover for this sweep's plan
// (windowSize), and whether to plan from one: never with weights (a
// namespace may then get several rows in a sweep that serves fewer than
// the budget), without a Counter or a window claim, or once full counts
// are read; and only
// when the last sweep saw at least that many namespaces.
func (s *sweeper[R]) window(c *counts) (int, bool) {
	if (s.counter == nil && s.wc == nil) || s.st.cfg.weights != nil || (c.claimedToo && c.p.Namespaces == 0) {
		return 0, false
	}
	n, ok := s.b.windowSize(c.claimed, s.st, s.budget)
	return n, ok && s.b.hints.seenNamespaces >= n
}

// planWindow plans from a window of n namespaces counted at cap 1: in a
// full window every grant is 0 or 1, so whether a route has a claimable
// row is all the plan needs. It reports false (and planFull takes over)
// when the store counts no windows, or the window holds fewer than n
// namespaces, or fewer than budget + 1 of them with demand (some have only
// invalid routes): a plan that may grant more than 1 needs deeper counts.
func (s *sweeper[R]) planWindow(ctx context.Context, c *counts, n int) (Plan, bool, error) {
	if c.p.Namespaces >= n {
		// A window of more namespaces than needed starts with the window
		// needed. Counts read ahead lose the namespaces the last claim
		// emptied; if that leaves the window short, count it now.
		c.pending = firstNamespaces(c.pending, c.p.After, n)
		if c.ahead && distinctNamespaces(c.pending) < n {
			if ok, err := s.countWindow(ctx, c, n); !ok || err != nil {
				return Plan{}, false, err
			}
		}
	} else if ok, err := s.countWindow(ctx, c, n); !ok || err != nil {
		return Plan{}, false, err
	}
	if distinctNamespaces(c.pending) < n {
		return Plan{}, false, nil
	}
	plan, err := s.b.plan(Snapshot{Claimed: c.claimed, Pending: c.pending, Budget: s.budget}, s.st)
	if err != nil {
		return Plan{}, false, err
	}
	// k does not count a namespace whose every route is invalid (it has
	// no demand either): the window is exact only if budget + 1 of its
	// namespaces have demand.
	if !withDemand(plan.Namespaces, s.budget+1) {
		return Plan{}, false, nil
	}
	plan.Windowed, plan.countCap = true, 1
	return plan, true, nil
}

// countWindow counts the window of n namespaces after the cursor into c;
// false if the store counts no windows (c's pending counts are then gone).
func (s *sweeper[R]) countWindow(ctx context.Context, c *counts, n int) (bool, error) {
	w, err := s.count(ctx, CountParams{CapPerRoute: 1, After: s.b.after(), Namespaces: n})
	if errors.Is(err, ErrNotSupported) {
		c.pending, c.p = nil, CountParams{}
		return false, nil
	}
	if err != nil {
		return false, &StoreError{Op: "CountOutboxRows", Err: err}
	}
	c.pending, c.p = w.pending, w.p
	return true, nil
}

// planFull plans from full pending counts, capped so the store reads no
// more of a route than a plan can use: first at c = min(full, 2·m + 1)
// for m the last sweep's largest grant (firstCountCap), or at the cap of
// full counts already read if deeper; and if a route was granted all c
// rows it was counted at (a deeper count might grant it more), again at
// full. Either way the claims are those uncapped counts would give.
func (s *sweeper[R]) planFull(ctx context.Context, c *counts) (Plan, error) {
	limit := s.b.hints.firstCountCap(s.full)
	for {
		if c.p.Namespaces == 0 && c.p.CapPerRoute >= limit {
			limit = c.p.CapPerRoute // read already (with the claimed counts, or ahead)
		} else {
			pending, err := s.countPending(ctx, limit)
			if err != nil {
				return Plan{}, &StoreError{Op: "CountPendingOutboxRows", Err: err}
			}
			c.pending, c.p = pending, CountParams{CapPerRoute: limit}
		}
		plan, err := s.b.plan(Snapshot{Claimed: c.claimed, Pending: c.pending, Budget: s.budget}, s.st)
		if err != nil {
			return Plan{}, err
		}
		plan.countCap = limit
		if limit >= s.full || maxLimit(plan.Claims) < limit {
			return plan, nil
		}
		limit = s.full
	}
}

// count is the Counter's CountOutboxRows(p), corrected for the claims in
// flight: read deeper and wider by their grants, then corrected and
// trimmed back to p.
func (s *sweeper[R]) count(ctx context.Context, p CountParams) (counts, error) {
	ask := p
	if len(s.inflight) > 0 {
		ask.CapPerRoute = addSat(p.CapPerRoute, s.deeper)
		if p.Namespaces > 0 {
			ask.Namespaces = addSat(p.Namespaces, s.wider)
		}
	}
	claimed, pending, err := s.counter.CountOutboxRows(ctx, s.st.f, ask)
	if err != nil {
		return counts{}, err
	}
	c := counts{claimed: claimed, pending: pending, p: p, claimedToo: p.Claimed}
	if len(s.inflight) > 0 {
		if p.Claimed {
			c.claimed = addGrants(claimed, s.inflight)
		}
		c.pending = subtractGrants(pending, s.inflight, p.CapPerRoute)
		if p.Namespaces > 0 {
			c.pending = firstNamespaces(c.pending, p.After, p.Namespaces)
		}
	}
	return c, nil
}

// countPending is CountPendingOutboxRows at capPerRoute, corrected for the
// claims in flight.
func (s *sweeper[R]) countPending(ctx context.Context, capPerRoute int) ([]RouteCount, error) {
	pending, err := s.store.CountPendingOutboxRows(ctx, s.st.f, addSat(capPerRoute, s.deeper))
	if err != nil || len(s.inflight) == 0 {
		return pending, err
	}
	return subtractGrants(pending, s.inflight, capPerRoute), nil
}

// correctClaimed corrects claimed counts for the claims in flight.
func (s *sweeper[R]) correctClaimed(claimed map[string]int) map[string]int {
	if len(s.inflight) == 0 {
		return claimed
	}
	return addGrants(claimed, s.inflight)
}
