package backpressure

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// engine is a Backpressure's sweep engine: the state sweeps share, and the
// steps of one sweep,
//
//	enter → read (sweeper.read) → plan (engine.plan) → claim → commit, or undo
//
// Sweep and SweepN run them holding the engine throughout (sweep);
// SweepAhead plans from counts read ahead and lets the engine go while its
// claim runs (sweepAhead). docs/engine.md draws both.
//
// sem guards everything but flights: one sweep or plan at a time. It is a
// channel rather than a mutex so that a sweep can give up waiting when its
// ctx is done. The settings and rate buckets are b's, under b.mu, which a
// sweep takes only to read them or spend tokens; the claims in flight have
// their own lock, as an overlapped claim returns without the engine.
type engine struct {
	b   *Backpressure
	sem chan struct{}

	rot     rotation       // the planner's cursors (planner.go)
	hints   sweepHints     // how the next sweep counts (counts.go)
	ahead   *ahead         // the next sweep's counts, read ahead (ahead.go)
	reads   sync.WaitGroup // read-aheads still running, used or not (for tests)
	lastEnd time.Time      // when the last successful sweep returned
	lastDur time.Duration  // and how long it took
	flights flights        // claims in flight (counts.go); its own lock
	planSeq uint64         // plans installed by overlapped sweeps
	scratch scratch        // the planner's buffers
}

func newEngine(b *Backpressure) engine {
	return engine{b: b, sem: make(chan struct{}, 1), rot: rotation{routeCursor: make(map[string]string)}}
}

// enter checks a sweep's arguments and takes b's engine for it. It returns
// a nil engine, and no error, for n ≤ 0: a sweep of nothing.
func enter[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) (*engine, error) {
	if b == nil || b.e.sem == nil {
		return nil, errNotNew
	}
	if store == nil {
		return nil, errNilStore
	}
	if n <= 0 {
		return nil, nil
	}
	e := &b.e
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		e.unlock()
		return nil, err
	}
	return e, nil
}

func (e *engine) unlock() { <-e.sem }

// plan is the planner on the engine's rotation, with the tokens b's rate
// buckets hold at t (zero t: now). It returns the plan and its cursor
// moves, to commit or drop, and changes nothing but the planner's scratch.
// The caller holds the engine.
func (e *engine) plan(s Snapshot, st settings, t time.Time) (Plan, moves, error) {
	budget, routes, err := e.scratch.prepare(s, st)
	if err != nil {
		return Plan{}, moves{}, err
	}
	if st.cfg.hasRates() {
		if t.IsZero() {
			t = e.b.now()
		}
		e.b.tokensAt(e.scratch.ns, st, t)
	}
	if e.b.adaptOn.Load() {
		if t.IsZero() {
			t = e.b.now()
		}
		e.b.adaptiveAt(e.scratch.ns, t)
	}
	p, m := e.scratch.decide(st, &e.rot, budget, routes)
	return p, m, nil
}

// planAt is [Backpressure.PlanAt]: a plan without I/O, committed at once.
func (e *engine) planAt(s Snapshot, t time.Time) (Plan, error) {
	e.sem <- struct{}{}
	defer e.unlock()
	p, m, err := e.plan(s, e.b.current(), t)
	if err != nil {
		return Plan{}, err
	}
	e.rot.advance(m, p.Namespaces, false)
	return p, nil
}

// sweep is Sweep and SweepN: read and plan, claim, and commit the plan
// once its claim succeeded, holding the engine throughout. It forgets
// counts a SweepAhead read ahead.
func sweep[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	e, err := enter(ctx, b, store, n)
	if e == nil {
		return nil, Plan{}, err
	}
	defer e.unlock()
	began := e.b.now()
	e.ahead.drop()
	e.ahead = nil
	s := newSweeper(e, store, n)
	if txs, ok := store.(TxSweeper[R]); ok {
		return sweepInTx(ctx, txs, s, began)
	}
	out, err := s.plan(ctx)
	if err != nil {
		return nil, Plan{}, err
	}
	return claim(ctx, s, out, began)
}

// sweepAhead is SweepAhead: a sweep back to back with the last plans from
// the counts that one read ahead if they serve (planAhead); a full plan
// reads the next sweep's counts beside its claim (nextAhead); and the plan
// is committed before its claim, which runs without the engine, so that the
// next sweep plans beside it (claimOverlapped).
func sweepAhead[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	e, err := enter(ctx, b, store, n)
	if e == nil {
		return nil, Plan{}, err
	}
	held := true
	defer func() {
		if held {
			e.unlock()
		}
	}()
	began := e.b.now()
	s := newSweeper(e, store, n)
	carried := e.ahead // used by this sweep or by none
	e.ahead = nil
	// Released whatever happens (take and drop are idempotent): a store
	// that is no Counter never takes it.
	defer carried.drop()
	if s.readAhead = e.backToBack(began); !s.readAhead {
		carried = nil
	}
	if txs, ok := store.(TxSweeper[R]); ok {
		return sweepInTx(ctx, txs, s, began)
	}
	out, err := s.planAhead(ctx, carried)
	if err != nil {
		return nil, Plan{}, err
	}
	if s.byWindow || len(out.plan.Claims) == 0 {
		return claim(ctx, s, out, began)
	}
	r := e.reserve(out.plan)
	out.ahead = nextAhead(ctx, s, carried, out)
	undo, seq := e.commitPlan(out)
	held = false
	e.unlock()
	return claimOverlapped(ctx, s, out, r, undo, seq, began)
}

// claim is the claim step of a sweep holding the engine: it claims out's
// rows (claimPlan) with their grants in flight and their tokens taken, and
// commits the plan if the claim succeeded.
func claim[R any](ctx context.Context, s *sweeper[R], out sweepResult, began time.Time) ([]R, Plan, error) {
	r := s.e.reserve(out.plan)
	rows, err := claimPlan(ctx, s, out.plan)
	settle(s.e, r, rows)
	if err != nil {
		return nil, Plan{}, err
	}
	s.e.commit(out, began)
	return rows, out.plan, nil
}

// reservation is a claim between its plan and its return: its grants in
// flight, and the rate tokens taken for them.
type reservation struct {
	f        *flight
	reserved map[string]int
}

// reserve puts p's grants in flight and takes their rate tokens, while the
// engine is held, so that plans made beside the claim see both (rate.go);
// settle ends the reservation. A plan without claims reserves nothing.
func (e *engine) reserve(p Plan) reservation {
	if len(p.Claims) == 0 {
		return reservation{}
	}
	return reservation{f: e.flights.add(p.Claims), reserved: e.b.reserveTokens(p)}
}

// settle ends r once its claim returned rows (nil if it failed): the
// grants leave the flights, and the tokens of grants the claim did not
// fill go back.
func settle[R any](e *engine, r reservation, rows []R) {
	e.flights.remove(r.f)
	releaseTokens(e.b, r.reserved, rows)
}

// claimPlan claims p's rows on s's store: those its window claim took
// (byWindow), none for a plan without claims, else what
// ClaimOutboxRowsScoped returns, checked against its contract.
func claimPlan[R any](ctx context.Context, s *sweeper[R], p Plan) ([]R, error) {
	if s.byWindow || len(p.Claims) == 0 {
		return s.won, nil // nil but after a window claim
	}
	rows, err := s.store.ClaimOutboxRowsScoped(ctx, s.st.f, p.Claims)
	if err == nil {
		err = checkClaimed(p.Claims, rows)
	}
	if err != nil {
		return nil, &StoreError{Op: "ClaimOutboxRowsScoped", Err: err}
	}
	return rows, nil
}

// sweepInTx runs a whole sweep, counts and claim, in one transaction of a
// TxSweeper, and commits it: nothing is in flight outside it, so the rows'
// tokens are spent once it succeeded (reserve and settle at once), and
// nothing is read ahead.
func sweepInTx[R any](ctx context.Context, txs TxSweeper[R], s *sweeper[R], began time.Time) ([]R, Plan, error) {
	var (
		rows []R
		out  sweepResult
	)
	err := txs.InSweepTx(ctx, func(tx OutboxStore[R]) (err error) {
		ts := s.on(tx)
		if out, err = ts.plan(ctx); err == nil {
			rows, err = claimPlan(ctx, ts, out.plan)
		}
		return err
	})
	if err != nil {
		// fn's errors are already typed; anything else is the store's own.
		if !errors.As(err, new(*StoreError)) {
			err = &StoreError{Op: "InSweepTx", Err: err}
		}
		return nil, Plan{}, err
	}
	settle(s.e, s.e.reserve(out.plan), rows)
	s.e.commit(out, began)
	return rows, out.plan, nil
}

// claimOverlapped claims out's rows after its plan was committed and the
// engine let go, so that the next sweep plans beside this claim (its
// counts corrected by r's grants, in flight until the claim returns).
// Afterwards it takes the engine only if it is free, to record the sweep's
// end and forget a read-ahead that a short claim made useless; on failure
// it waits for the engine and undoes the plan's rotation, unless a later
// plan (seq counts them) already built on it.
func claimOverlapped[R any](ctx context.Context, s *sweeper[R], out sweepResult, r reservation, undo rotationUndo, seq uint64, began time.Time) ([]R, Plan, error) {
	e := s.e
	rows, err := claimPlan(ctx, s, out.plan)
	settle(e, r, rows)
	if err != nil {
		out.ahead.drop()
		e.sem <- struct{}{}
		if e.planSeq == seq {
			e.rot.undo(undo)
		}
		if e.ahead == out.ahead {
			e.ahead = nil
		}
		e.unlock()
		return nil, Plan{}, err
	}
	full := len(rows) == s.budget
	select {
	case e.sem <- struct{}{}:
		e.ended(began)
		if !full && e.ahead == out.ahead {
			e.ahead = nil
			out.ahead.drop()
		}
		e.unlock()
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
func (e *engine) backToBack(began time.Time) bool {
	return noExpiry || (!e.lastEnd.IsZero() && began.Sub(e.lastEnd) <= e.lastDur)
}

// commit installs a sweep's plan once its claim succeeded (or it claimed
// nothing): the rotation, the hints, the sweep's end.
func (e *engine) commit(out sweepResult, began time.Time) {
	e.rot.advance(out.moves, out.plan.Namespaces, out.plan.Windowed)
	e.hints.record(out)
	e.ended(began)
}

// ended records when a sweep that began at began returned.
func (e *engine) ended(began time.Time) {
	e.lastEnd = e.b.now()
	e.lastDur = e.lastEnd.Sub(began)
}

// commitPlan installs an overlapped sweep's plan before its claim: the
// rotation (the next plan continues from it), the hints and its
// read-ahead. It returns what undoes the rotation should the claim fail,
// and the plan's number.
func (e *engine) commitPlan(out sweepResult) (rotationUndo, uint64) {
	u := e.rot.undoOf(out.moves)
	e.rot.advance(out.moves, out.plan.Namespaces, out.plan.Windowed)
	e.hints.record(out)
	e.ahead = out.ahead
	e.planSeq++
	return u, e.planSeq
}

// sweepResult is a sweep's plan and what it tells the engine and the next
// sweep: its cursor moves, how many namespaces its counts saw, and, for a
// Counter that serves Claimed, the k the next window is sized for.
type sweepResult struct {
	plan   Plan
	moves  moves
	seen   int
	nextK  int
	reused bool   // planned from counts read ahead
	ahead  *ahead // the next sweep's counts, being read (SweepAhead)
}

// sweeper is one sweep between taking the engine and claiming: what it
// reads (read), how it plans from that (planFrom, reading more where the
// first read cannot give the exact plan), and the grants in flight its
// fresh counts are corrected by. It never changes the engine's state
// except the planner's scratch (engine.plan).
type sweeper[R any] struct {
	e         *engine
	st        settings
	budget    int
	full      int // the deepest pending count the budget needs (pendingCountCap)
	store     OutboxStore[R]
	counter   Counter // store's, nil if it is none
	readAhead bool    // back to back with the last sweep: counts read ahead may serve (SweepAhead)

	// The grants of claims in flight on the engine when the sweep began
	// (overlapped sweeps'). A count may or may not see them, so every count
	// is read deeper and wider by them and corrected as counts read ahead
	// are (see docs/engine.md): K + g for claimed, min(max(0, P − g), c) for
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

func newSweeper[R any](e *engine, store OutboxStore[R], n int) *sweeper[R] {
	st := e.b.current()
	s := sweeper[R]{e: e, st: st, budget: min(n, st.cfg.batchSize)}
	s.full = st.fullCap(s.budget)
	if s.inflight = e.flights.grants(); len(s.inflight) > 0 {
		s.deeper, s.wider = grantSpread(s.inflight)
	}
	return s.on(store)
}

// on returns a copy of s that reads and claims on store (a TxSweeper's
// transaction, for one), with store's extensions.
func (s sweeper[R]) on(store OutboxStore[R]) *sweeper[R] {
	s.store = store
	s.counter, _ = any(store).(Counter)
	s.wc = s.windowClaimer()
	return &s
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

// plan reads and plans (see read and planCounts).
func (s *sweeper[R]) plan(ctx context.Context) (sweepResult, error) {
	c, err := s.read(ctx)
	if err != nil {
		return sweepResult{}, err
	}
	return s.planCounts(ctx, c)
}

// planAhead plans from the counts carried from a read-ahead if they serve
// (takeAhead) and give a plan that fills the budget, else as plan does:
// counts read ahead that fall short may understate what is claimable now,
// so it counts afresh rather than come back short while rows wait.
func (s *sweeper[R]) planAhead(ctx context.Context, carried *ahead) (sweepResult, error) {
	if c, ok := takeAhead(ctx, s, carried); ok {
		out, err := s.planCounts(ctx, c)
		if err != nil || sumLimits(out.plan.Claims) >= s.budget {
			return out, err
		}
	}
	return s.plan(ctx)
}

// planCounts plans from the counts c (planFrom, which may read more) and
// marks the reports of routes counted to their cap.
func (s *sweeper[R]) planCounts(ctx context.Context, c counts) (sweepResult, error) {
	plan, m, err := s.planFrom(ctx, &c)
	if err != nil {
		return sweepResult{}, err
	}
	markCapped(plan.Namespaces, c.pending, plan.countCap)
	out := sweepResult{plan: plan, moves: m, seen: math.MaxInt, reused: c.ahead} // a full window: at least the window, more beyond it
	if !plan.Windowed {
		out.seen = distinctNamespaces(c.pending)
	}
	if c.claimedToo && s.st.cfg.weights == nil {
		out.nextK = guessK(plan, s.st)
	}
	return out, nil
}

// read makes a sweep's first read. With a Counter: one CountOutboxRows
// with the claimed counts and the window or full counts the hints expect
// (firstParams), else full counts with the claimed counts. What a Counter
// serves is learnt by asking (ErrNotSupported costs no I/O), each sweep
// afresh, as b may sweep more than one store. Otherwise, or if the Counter
// serves neither: CountClaimedOutboxRows alone, the pending counts to
// follow in planFrom. (SweepAhead may read nothing: takeAhead.)
func (s *sweeper[R]) read(ctx context.Context) (counts, error) {
	if s.counter != nil {
		p := firstParams(&s.e.hints, s.e.rot.after(moves{}), s.st, s.budget)
		if p.Namespaces > 0 && s.wc != nil {
			// The window is claimed by the store (claimWindow), which
			// needs only the claimed counts.
			return s.countClaimed(ctx)
		}
		c, err := s.count(ctx, p)
		if p.Namespaces > 0 && errors.Is(err, ErrNotSupported) {
			c, err = s.count(ctx, CountParams{CapPerRoute: s.e.hints.firstCountCap(s.full), Claimed: true})
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
// flight (K + g).
func (s *sweeper[R]) countClaimed(ctx context.Context) (counts, error) {
	claimed, err := s.store.CountClaimedOutboxRows(ctx, s.st.f)
	if err != nil {
		return counts{}, &StoreError{Op: "CountClaimedOutboxRows", Err: err}
	}
	if len(s.inflight) > 0 {
		claimed = addGrants(claimed, s.inflight)
	}
	return counts{claimed: claimed}, nil
}

// planFrom plans from c, reading more where c cannot give the plan
// uncapped counts would: when the window rule applies, from the store's
// window claim if it has one and no window was counted yet (claimWindow,
// which claims too), else from a counted window (planWindow); otherwise,
// or if the window falls short, from full counts (planFull).
func (s *sweeper[R]) planFrom(ctx context.Context, c *counts) (Plan, moves, error) {
	if n, ok := s.window(c); ok {
		if s.wc != nil && c.p.Namespaces == 0 && !c.ahead {
			plan, m, ok, err := s.claimWindow(ctx, c)
			if err != nil || ok {
				return plan, m, err
			}
			if s.wc != nil {
				// Fewer namespaces with demand than the budget needs:
				// a counted window would fall short too.
				return s.planFull(ctx, c)
			}
		}
		if s.counter != nil {
			if plan, m, ok, err := s.planWindow(ctx, c, n); err != nil || ok {
				return plan, m, err
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
	n, ok := windowSize(c.claimed, s.st, s.budget)
	return n, ok && s.e.hints.seenNamespaces >= n
}

// planWindow plans from a window of n namespaces counted at cap 1: in a
// full window every grant is 0 or 1, so whether a route has a claimable
// row is all the plan needs. It reports false (and planFull takes over)
// when the store counts no windows, or the window holds fewer than n
// namespaces, or fewer than budget + 1 of them with demand (some have only
// invalid routes): a plan that may grant more than 1 needs deeper counts.
func (s *sweeper[R]) planWindow(ctx context.Context, c *counts, n int) (Plan, moves, bool, error) {
	// A window of more namespaces than needed starts with the window
	// needed. Counts read ahead lose the namespaces the last claim
	// emptied; if that leaves the window short, count it now.
	if c.p.Namespaces >= n {
		c.pending = firstNamespaces(c.pending, c.p.After, n)
	}
	if c.p.Namespaces < n || (c.ahead && distinctNamespaces(c.pending) < n) {
		if ok, err := s.countWindow(ctx, c, n); !ok || err != nil {
			return Plan{}, moves{}, false, err
		}
	}
	if distinctNamespaces(c.pending) < n {
		return Plan{}, moves{}, false, nil
	}
	plan, m, err := s.e.plan(Snapshot{Claimed: c.claimed, Pending: c.pending, Budget: s.budget}, s.st, time.Time{})
	if err != nil {
		return Plan{}, moves{}, false, c.broken(err)
	}
	// k does not count a namespace whose every route is invalid (it has
	// no demand either): the window is exact only if budget + 1 of its
	// namespaces have demand.
	if !withDemand(plan.Namespaces, s.budget+1) {
		return Plan{}, moves{}, false, nil
	}
	plan.Windowed, plan.countCap = true, 1
	return plan, m, true, nil
}

// countWindow counts the window of n namespaces after the cursor into c;
// false if the store counts no windows (c's pending counts are then gone).
func (s *sweeper[R]) countWindow(ctx context.Context, c *counts, n int) (bool, error) {
	w, err := s.count(ctx, CountParams{CapPerRoute: 1, After: s.e.rot.after(moves{}), Namespaces: n})
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
// more of a route than a plan can use: first at firstCountCap's c (m + 1
// for m the largest grant of the last two sweeps, or 2·m + 1 while grants
// grow), from full counts already read if at least as deep (capped at c);
// and if a route was granted all c
// rows it was counted at (a deeper count might grant it more), again at
// full. Either way the claims are those uncapped counts would give. Counts
// read already (with the claimed counts, or ahead) serve if at least as
// deep; deeper ones, at the cap an earlier sweep foresaw, are capped at
// this sweep's, so that it plans and reports as a fresh count would.
func (s *sweeper[R]) planFull(ctx context.Context, c *counts) (Plan, moves, error) {
	limit := s.e.hints.firstCountCap(s.full)
	for {
		if c.p.Namespaces == 0 && c.p.CapPerRoute >= limit {
			if c.p.CapPerRoute > limit {
				c.pending, c.p.CapPerRoute = subtractGrants(c.pending, nil, limit), limit
			}
		} else {
			pending, err := s.countPending(ctx, limit)
			if err != nil {
				return Plan{}, moves{}, &StoreError{Op: "CountPendingOutboxRows", Err: err}
			}
			c.pending, c.p = pending, CountParams{CapPerRoute: limit}
		}
		plan, m, err := s.e.plan(Snapshot{Claimed: c.claimed, Pending: c.pending, Budget: s.budget}, s.st, time.Time{})
		if err != nil {
			return Plan{}, moves{}, c.broken(err)
		}
		plan.countCap = limit
		if limit >= s.full || maxLimit(plan.Claims) < limit {
			return plan, m, nil
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
