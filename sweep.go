package backpressure

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
)

// Sweep runs one sweep of a dispatcher node against store: it reads how many
// rows each namespace has claimed and how many are pending per route on the
// node's shards, plans them as [Backpressure.Plan] does, and claims the
// plan's rows in one atomic ClaimOutboxRowsScoped. It returns the rows
// claimed and the plan.
//
// The claims are exactly those that Plan would make from uncapped counts.
// To read less, Sweep may count each route only as deep as a plan can use,
// or only the namespaces the rotation reaches next (not while
// [Config.Weights] weighs some namespace above 1), so a report's Pending,
// Demand and Held may be lower bounds: see [NamespaceReport.Capped] and
// [Plan.Windowed]. It uses the optional [Counter] and [TxSweeper] when the
// store offers them; a sweep costs two or three round trips in steady
// state, five at most. [SweepAhead] overlaps the count with the previous
// sweep's claim; Sweep and SweepN always count afresh, and forget counts a
// SweepAhead read ahead.
//
// A sweep runs with the configuration and shards b has when it starts:
// [Backpressure.SetConfig] and [Backpressure.SetOwnedShards] during a sweep
// take effect at the next.
//
// On error, b's rotation is unchanged and no row is claimed. The error is
// ctx's if ctx is done before the sweep starts (Sweep waits for a sweep in
// progress on b, as sweeps on one Backpressure run one at a time); one
// matching [ErrStore], wrapping a *[StoreError] that names the failed call
// and wraps the store's error (a TxSweeper may wrap it again), if the store
// failed; a *[SnapshotError] if the store's counts break its contract (a
// negative count, a route listed twice); or one matching [ErrInvalidConfig]
// if b was not built by [New] or store is nil.
func Sweep[R any](ctx context.Context, b *Backpressure, store OutboxStore[R]) ([]R, Plan, error) {
	return SweepN(ctx, b, store, math.MaxInt)
}

// SweepN is [Sweep] with a smaller budget for this sweep: it claims at most
// min(n, B) rows, for B the batch size the sweep starts with, as a dispatcher with n idle workers asks for
// no more rows than it can start (enforced credit). The plan's guarantees
// hold with that budget in place of the batch size, and the rotation
// carries over from sweep to sweep whatever the budgets, so cumulative
// grants still even out. With n ≤ 0 it returns (nil, Plan{}, nil) without
// calling the store. Errors are as for Sweep.
func SweepN[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweepN(ctx, b, store, n, false)
}

// sweepN is SweepN, and with readAhead SweepAhead.
func sweepN[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int, readAhead bool) ([]R, Plan, error) {
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
	defer func() { <-b.sem }()
	if err := ctx.Err(); err != nil {
		return nil, Plan{}, err
	}

	began := b.now()
	st := b.current()
	budget := min(n, st.cfg.batchSize)
	carried := b.ahead // used by this sweep or by none
	b.ahead = nil
	// Released whatever happens (take releases it too; dropping twice is
	// harmless): Sweep and SweepN forget it, and a store that is no
	// Counter never takes it.
	defer carried.drop()
	// Counts read ahead serve, and are read, only for a caller sweeping
	// back to back: this sweep began within the last sweep's duration of
	// its end (the sweep whose read-ahead carried is, if any). Older
	// counts are stale; and a caller whose sweeps wait for busy workers,
	// or for a ticker, would waste every read.
	backToBack := noExpiry || (!b.lastEnd.IsZero() && began.Sub(b.lastEnd) <= b.lastDur)
	readAhead = readAhead && backToBack
	if !readAhead {
		carried = nil
	}
	var (
		rows []R
		out  sweepResult
		err  error
	)
	if txs, ok := store.(TxSweeper[R]); ok {
		err = txs.InSweepTx(ctx, func(tx OutboxStore[R]) error {
			var err error
			rows, out, err = sweepOn(ctx, b, st, budget, tx, nil, false)
			return err
		})
		// fn's errors are already typed; anything else is the store's own.
		if err != nil && !errors.As(err, new(*StoreError)) && !errors.As(err, new(*SnapshotError)) {
			err = &StoreError{Op: "InSweepTx", Err: err}
		}
	} else {
		rows, out, err = sweepOn(ctx, b, st, budget, store, carried, readAhead)
		if errors.Is(err, errShortAhead) {
			// Counts read ahead that do not fill the budget may understate
			// what is claimable now (a read that saw a claim has its grants
			// subtracted twice): count afresh rather than come back short
			// while rows wait.
			rows, out, err = sweepOn(ctx, b, st, budget, store, nil, readAhead)
		}
	}
	if err != nil {
		out.ahead.drop()
		return nil, Plan{}, err
	}
	b.advanceCursors(out.plan.Windowed)
	b.hints.record(out)
	b.lastEnd = b.now()
	b.lastDur = b.lastEnd.Sub(began)
	if a := out.ahead; a != nil {
		// Only a sweep that claimed every row it planned, its whole
		// budget, shows a backlog the next sweep can plan from.
		if len(rows) == budget {
			b.ahead = a
		} else {
			a.drop()
		}
	}
	return rows, out.plan, nil
}

// errShortAhead is what sweepOn returns, having claimed nothing, when
// counts read ahead give a plan short of the budget: sweepN then counts
// afresh.
var errShortAhead = errors.New("backpressure: counts read ahead fall short of the budget")

// sweepResult is what a sweep commits to b once its claim has succeeded:
// the plan, how many namespaces its counts saw, and, for a Counter that
// serves Claimed, the k the next window is sized for.
type sweepResult struct {
	plan  Plan
	seen  int
	nextK int
	ahead *ahead // the next sweep's counts, being read (SweepAhead)
}

// sweepOn runs Sweep's steps against store (the store itself, or its
// transaction view) without changing b's state. Usually three round trips:
//
//  1. CountClaimedOutboxRows: live claimed rows per namespace;
//  2. the pending counts, each route's count capped so the store reads no
//     more of a route than the plan can use:
//     - when the store implements Counter and the last sweep saw more
//     namespaces than a window holds, a window count (CountOutboxRows)
//     over the namespaces this sweep can serve (see windowSize), capped at
//     1: each of them gets at most one row;
//     - otherwise CountPendingOutboxRows capped at c = min(full, 2·m + 1),
//     where full is min(pendingCountCap, budget) (budget + 1 with weights:
//     see pendingCountCap) and m the largest route
//     limit of the last sweep (see firstCountCap);
//  3. plan; if a route was granted all c rows it was counted at, it may
//     have more rows a deeper count would grant it, so count again capped
//     at full and plan again (likewise after a window that turns out to
//     hold every namespace, or too few with demand). Either way the claims
//     are exactly those that uncapped counts would give;
//  4. one ClaimOutboxRowsScoped with the plan's claims (skipped when the
//     plan claims nothing).
//
// With a Counter that serves Claimed, steps 1 and 2 are one CountOutboxRows:
// two round trips in steady state. Its window is then sized before the
// claimed counts are known, for the namespaces the last sweep left without
// headroom (guessK), and trimmed to the window step 2 describes
// (firstNamespaces); if more namespaces than that have none, the window is
// counted again.
//
// What a Counter serves is learnt by asking: a request it answers with
// ErrNotSupported costs no I/O, so each sweep asks afresh (a window with
// Claimed, then full counts with Claimed, then a window alone) and falls
// back to the base calls, rather than remembering a store's answers on b,
// which may sweep more than one store.
//
// With carried (a SweepAhead's read-ahead), the first count is the carried
// counts when they serve (see ahead.take); with readAhead, the next sweep's
// counts are read while the claim runs (see startReadAhead).
func sweepOn[R any](ctx context.Context, b *Backpressure, st settings, budget int, store OutboxStore[R], carried *ahead, readAhead bool) ([]R, sweepResult, error) {
	shards := st.f
	// No route is granted more than the budget, so counting deeper than it
	// cannot change the plan (see pendingCountCap).
	full := st.fullCap(budget)
	counter, isCounter := any(store).(Counter)
	// With weights, a namespace may be granted several rows in a sweep
	// that serves fewer namespaces than the budget, so the window rule
	// (see windowSize) does not hold: count every namespace.
	canWindow := isCounter && st.cfg.weights == nil
	var (
		claimed map[string]int
		pending []RouteCount
		read    CountParams // the pending count read with claimed, if both
		both    bool        // whether claimed was read with a pending count
		reused  bool        // whether they are counts read ahead (SweepAhead)
		err     error
	)
	if isCounter {
		// The window is sized before the claimed counts are known, for
		// the k guessK expects; see below if it falls short.
		p := firstParams(&b.hints, b.after(), st, budget)
		if claimed, pending, read, reused = carried.take(ctx, st, store, p); reused {
			both = true
		} else {
			claimed, pending, err = counter.CountOutboxRows(ctx, shards, p)
			if p.Namespaces > 0 && errors.Is(err, ErrNotSupported) {
				p = CountParams{CapPerRoute: b.hints.firstCountCap(full), Claimed: true}
				claimed, pending, err = counter.CountOutboxRows(ctx, shards, p)
			}
			switch {
			case err == nil:
				read, both = p, true
			case !errors.Is(err, ErrNotSupported):
				return nil, sweepResult{}, &StoreError{Op: "CountOutboxRows", Err: err}
			}
		}
	}
	if !both {
		if claimed, err = store.CountClaimedOutboxRows(ctx, shards); err != nil {
			return nil, sweepResult{}, &StoreError{Op: "CountClaimedOutboxRows", Err: err}
		}
	}
	// A window helps only when there are more namespaces than it holds;
	// the last sweep's count says whether there were. Full counts already
	// read serve as well.
	n, useWindow := 0, false
	if canWindow && (!both || read.Namespaces > 0) {
		n, useWindow = b.windowSize(claimed, st, budget)
		useWindow = useWindow && b.hints.seenNamespaces >= n
	}
	var (
		plan     Plan
		windowed bool
	)
	if useWindow {
		// In a full window every grant is 0 or 1 (see windowSize), so
		// whether a route has a claimable row is all the plan needs.
		countWindow := func() error {
			_, pending, err = counter.CountOutboxRows(ctx, shards, CountParams{CapPerRoute: 1, After: b.after(), Namespaces: n})
			if errors.Is(err, ErrNotSupported) {
				// No windows: the full counts below.
				useWindow, pending = false, nil
			} else if err != nil {
				return &StoreError{Op: "CountOutboxRows", Err: err}
			}
			return nil
		}
		if both && read.Namespaces >= n {
			// A window of more namespaces than needed starts with the
			// window needed.
			pending = firstNamespaces(pending, read.After, n)
			// Counts read ahead lose the namespaces the last claim
			// emptied; if that leaves the window short, count it now.
			if reused && distinctNamespaces(pending) < n {
				if err := countWindow(); err != nil {
					return nil, sweepResult{}, err
				}
			}
		} else if err := countWindow(); err != nil {
			return nil, sweepResult{}, err
		}
		if windowed = useWindow && distinctNamespaces(pending) >= n; windowed {
			if plan, err = b.plan(Snapshot{Claimed: claimed, Pending: pending, Budget: budget}, st); err != nil {
				return nil, sweepResult{}, err
			}
			// k does not count a namespace whose every route is invalid
			// (it has no demand either): the window is exact only if
			// budget + 1 of its namespaces have demand.
			if windowed = withDemand(plan.Namespaces, budget+1); windowed {
				plan.Windowed, plan.countCap = true, 1
			}
		}
		// Otherwise the window held every namespace, or too few with
		// demand, counted too shallow for a plan that may grant more than
		// 1: count them all.
	}
	if !windowed {
		c := b.hints.firstCountCap(full)
		for {
			if both && read.Namespaces == 0 && read.CapPerRoute >= c {
				// Counted with claimed (read ahead perhaps deeper than c
				// needs): use it once.
				c, read.CapPerRoute = read.CapPerRoute, 0
			} else if pending, err = store.CountPendingOutboxRows(ctx, shards, c); err != nil {
				return nil, sweepResult{}, &StoreError{Op: "CountPendingOutboxRows", Err: err}
			}
			if plan, err = b.plan(Snapshot{Claimed: claimed, Pending: pending, Budget: budget}, st); err != nil {
				return nil, sweepResult{}, err
			}
			plan.countCap = c
			// Exact unless a route got all c rows it was counted at: it
			// may have more, and a deeper count could grant it more.
			if c == full || maxLimit(plan.Claims) < c {
				break
			}
			c = full
		}
	}
	if reused && sumLimits(plan.Claims) < budget {
		return nil, sweepResult{}, errShortAhead
	}
	markCapped(plan.Namespaces, pending, plan.countCap)
	out := sweepResult{plan: plan, seen: math.MaxInt} // a full window: at least the window, more beyond it
	if !windowed {
		out.seen = distinctNamespaces(pending)
	}
	if both && canWindow {
		out.nextK = guessK(plan, st)
	}
	if len(plan.Claims) == 0 {
		return nil, out, nil
	}
	if readAhead && isCounter && sumLimits(plan.Claims) == budget {
		// A full plan: the next sweep may come at once. It plans from the
		// counts this one did, if they serve once more (passOn), else from
		// counts read while this claim runs.
		if reused && carried.passOn(plan, budget) {
			out.ahead = carried
		} else {
			out.ahead = startReadAhead(ctx, b, counter, store, st, budget, out)
		}
	}
	rows, err := store.ClaimOutboxRowsScoped(ctx, shards, plan.Claims)
	if err != nil {
		out.ahead.drop()
		return nil, sweepResult{}, &StoreError{Op: "ClaimOutboxRowsScoped", Err: err}
	}
	return rows, out, nil
}

// sweepHints is what one sweep learns for the next: how deep and how wide
// to count. It never changes a plan, only the reads that lead to it (see
// sweepOn); the rotation cursors, which do change plans, are Backpressure's.
type sweepHints struct {
	seenNamespaces int  // namespaces with pending rows at the last sweep (MaxInt: more than its window)
	lastMaxLimit   int  // the largest route limit of the last sweep
	nextK          int  // for a Counter serving Claimed: the k the next sweep's window is sized for (see guessK)
	sweptOnce      bool // whether a sweep has succeeded
}

// firstCountCap returns the cap of a sweep's first full pending count,
// c = min(full, 2·m + 1) for m the largest route limit of the last sweep (0
// if it claimed nothing), and full for the first sweep. A plan from counts
// capped at c is the plan full counts give unless some route is granted c
// (see sweepOn), so c only has to pass the grants a sweep is likely to
// make: the last sweep's, with room to double.
func (h *sweepHints) firstCountCap(full int) int {
	if !h.sweptOnce || h.lastMaxLimit >= full/2 {
		return full
	}
	return 2*h.lastMaxLimit + 1
}

// record keeps what a sweep whose claim succeeded tells the next one: how
// many namespaces its counts saw, the k of its window, its largest grant.
func (h *sweepHints) record(out sweepResult) {
	h.seenNamespaces = out.seen
	h.nextK = out.nextK
	h.lastMaxLimit = maxLimit(out.plan.Claims)
	h.sweptOnce = true
}

// pendingCountCap returns the deepest bound Sweep passes to
// CountPendingOutboxRows (a sweep often counts shallower first: see sweepOn):
//
//	cap = max(1, min(B′, max_q Ceiling(q)))
//
// over the default quota and every override (a ceiling of Unlimited counts
// as B′; under [ApportionShares], Ceiling(q) stands for a bound on the
// ceilings of every namespace of quota q), where B′ = B, or B + 1 when Config.Weights weighs some namespace
// above 1. A plan never grants a route more than its namespace's headroom,
// which is at most its ceiling, nor more than B; so a route counted as
// min(P_r, cap) rather than P_r yields exactly the same claims and rotation,
// while the store reads fewer index entries per route. With weights, the
// rotation also depends on whether a namespace's demand was met: granted the
// whole budget B, a namespace of weight w may stop its turns mid-round,
// which moves the cursor, while one whose demand was exactly B leaves it
// where it was; a count of B + 1 tells the two apart. The reports describe
// the counts as the store returned them (see NamespaceReport.Capped): Pending,
// Demand and Held are lower bounds for a namespace whose backlog passes the
// cap, so one whose demand the batch met shows Held 0 even if more rows wait
// behind the cap.
func (b *Backpressure) pendingCountCap() int {
	return b.current().deepCap
}

// windowSize returns the namespaces a windowed pending count must cover for
// the plan to be exact: n = B + k + 1 for B the sweep's budget, where k
// counts the namespaces known to have no headroom (claimed ≥ ceiling, or a
// ceiling of 0). A ceiling of 0 comes from a quota of 0 in Quotas
// (DefaultQuota is ≥ 1 or Unlimited), or from owning no shards, when no row
// is claimable and k does not matter. Among any n namespaces with claimable
// rows at least B + 1 are then active (unless some have only invalid
// routes: sweepOn checks), so the plan is max-min fair at level 0: one row
// each to the first B active namespaces after the rotation cursor, all
// inside the window. It reports false when n would overflow.
func (b *Backpressure) windowSize(claimed map[string]int, st settings, budget int) (int, bool) {
	k := st.zeroCeilings
	for ns, c := range claimed {
		if atCeiling(st.cfg.ceiling(st.f, ns), c) {
			k++
		}
	}
	return windowFor(budget, k)
}

// atCeiling reports whether n claimed rows reach a ceiling c > 0: never
// for [Unlimited] (negative), and a ceiling of 0 is a paused namespace,
// which zeroCeilings counts already.
func atCeiling(c, n int) bool { return c > 0 && n >= c }

// windowFor returns budget + k + 1, and false when it would overflow.
func windowFor(budget, k int) (int, bool) {
	if budget > math.MaxInt-k-1 {
		return 0, false
	}
	return budget + k + 1, true
}

// guessK returns, after a sweep planned p, the k the next window counted
// with the claimed counts ([CountParams.Claimed]) is sized for, before the sweep knows its claimed counts: the
// paused namespaces (zeroCeilings) plus those with a ceiling c > 0 whose
// claimed rows and grant together reach it, Σ [0 < c ≤ Claimed + Granted].
// Claimed rows grow only by this node's claims, so that bounds the next
// sweep's k unless some other claimer took rows on the node's shards (or
// the shards changed); the next sweep then counts its window again, one
// more round trip.
func guessK(p Plan, st settings) int {
	k := st.zeroCeilings
	for _, r := range p.Namespaces {
		if atCeiling(r.Ceiling, r.Claimed+r.Granted) {
			k++
		}
	}
	return k
}

// after returns where the next window starts: the rotation cursor, or ""
// before the first remainder unit. A window is counted only when no
// namespace is weighted, and then a cursor left inside a round by weights
// set before (see roundPos) starts the next round at the first namespace.
func (b *Backpressure) after() string {
	if b.nsCursorSet && b.nsCursorAt.num == 0 {
		return b.nsCursor
	}
	return ""
}

// afterAdvance returns what after will return once the last plan's cursor
// moves are installed (advanceCursors): where the next sweep's window
// starts, for a read-ahead.
func (b *Backpressure) afterAdvance() string {
	if sc := &b.scratch; sc.nsCursorMove {
		if sc.nsCursorAt.num == 0 {
			return sc.nsCursor
		}
		return ""
	}
	return b.after()
}

// firstNamespaces trims a window's counts, sorted by namespace, to those of
// its first n namespaces in the cyclic order after after: the window
// [Counter] would have returned for n. It filters in place.
func firstNamespaces(pending []RouteCount, after string, n int) []RouteCount {
	above, total := 0, 0
	for i, rc := range pending {
		if i == 0 || rc.Route.Namespace != pending[i-1].Route.Namespace {
			total++
			if rc.Route.Namespace > after {
				above++
			}
		}
	}
	if total <= n {
		return pending
	}
	keepAbove := min(n, above)
	keepBelow := n - keepAbove
	out := pending[:0]
	prev, seenAbove, seenBelow, keep := "", 0, 0, false
	for i, rc := range pending {
		if ns := rc.Route.Namespace; i == 0 || ns != prev {
			prev = ns
			if ns > after {
				seenAbove++
				keep = seenAbove <= keepAbove
			} else {
				seenBelow++
				keep = seenBelow <= keepBelow
			}
		}
		if keep {
			out = append(out, rc)
		}
	}
	return out
}

// withDemand reports whether at least n of reports have demand.
func withDemand(reports []NamespaceReport, n int) bool {
	for _, r := range reports {
		if r.Demand > 0 {
			if n--; n <= 0 {
				return true
			}
		}
	}
	return false
}

// distinctNamespaces counts the namespaces of routes ordered by namespace
// (as a window must be; for a full count, which may be unordered, it is only
// an estimate, used to choose between the two counts).
func distinctNamespaces(routes []RouteCount) int {
	n := 0
	for i := range routes {
		if i == 0 || routes[i].Route.Namespace != routes[i-1].Route.Namespace {
			n++
		}
	}
	return n
}

// markCapped sets Capped on the reports (sorted by namespace) of the
// namespaces with a route counted up to c: in one merge when pending is
// sorted by namespace, as stores return it, else by binary search.
func markCapped(reports []NamespaceReport, pending []RouteCount, c int) {
	byNamespace := func(a, b RouteCount) int { return strings.Compare(a.Route.Namespace, b.Route.Namespace) }
	if slices.IsSortedFunc(pending, byNamespace) {
		j := 0
		for _, rc := range pending {
			if rc.Count < c {
				continue
			}
			for j < len(reports) && reports[j].Namespace < rc.Route.Namespace {
				j++
			}
			if j < len(reports) && reports[j].Namespace == rc.Route.Namespace {
				reports[j].Capped = true
			}
		}
		return
	}
	for _, rc := range pending {
		if rc.Count < c {
			continue
		}
		i, ok := slices.BinarySearchFunc(reports, rc.Route.Namespace, func(r NamespaceReport, ns string) int {
			return strings.Compare(r.Namespace, ns)
		})
		if ok {
			reports[i].Capped = true
		}
	}
}

// sumLimits returns the sum of claims' limits, saturating.
func sumLimits(claims []ScopedClaim) int {
	n := 0
	for _, c := range claims {
		n = addSat(n, c.Limit)
	}
	return n
}

// maxLimit returns the largest Limit of claims, 0 if there are none.
func maxLimit(claims []ScopedClaim) int {
	m := 0
	for _, c := range claims {
		m = max(m, c.Limit)
	}
	return m
}
