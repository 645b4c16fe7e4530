// Package backpressure plans fair, per-tenant, headroom-capped claims from a
// transactional outbox.
//
// A dispatcher node calls [Sweep] once per sweep. Sweep reads how many rows
// each namespace (tenant) has claimed and how many are pending per route on
// the node's shards, plans the sweep with [Backpressure.Plan], and makes one
// atomic scoped claim. The plan gives every active namespace an equal slice
// of the batch before any namespace can take more, splits a namespace's grant
// equally over its routes, and never lets a namespace exceed its per-node
// ceiling ⌈quota × owned/shardCount⌉ of concurrently claimed rows. Rows it
// does not claim stay Pending, untouched, for a later sweep: backpressure
// chooses only the limit and scope of the store's claim, so the store's
// exactly-once guarantee is never weakened.
//
// [BackpressureGate] checks, separately, whether a channel's advisory
// backpressure actually protects its consumer.
package backpressure

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Config is the configuration of a [Backpressure]. [New] validates it.
type Config struct {
	// BatchSize is the sweep's claim budget B: the most rows one sweep may
	// claim, across all namespaces. It is a hard bound and must be ≥ 1.
	BatchSize int

	// DefaultQuota is the cluster-wide ceiling on concurrently claimed rows
	// of every namespace not listed in Quotas. Use [Unlimited] for no
	// ceiling. It must be ≥ 1 or Unlimited: the zero value is rejected so
	// that forgetting to set it does not silently pause every tenant.
	DefaultQuota int

	// Quotas overrides DefaultQuota per namespace. A value of 0 pauses the
	// namespace: all of its rows are held, reason [HeldPaused]. Values must
	// be ≥ 0 or Unlimited. A nil map means no overrides. New copies the map.
	Quotas map[string]int
}

// Backpressure plans the claims of one dispatcher node. It holds the node's
// owned-shard fraction, the quotas, and the rotation cursors that carry the
// remainder units of integer shares from sweep to sweep, so that over
// several sweeps every unsatisfied namespace gets the same number of rows.
//
// A Backpressure is safe for concurrent use, and serialises sweeps: [Sweep]
// and [Backpressure.Plan] run one at a time, because two concurrent sweeps on
// one node would both see the same headroom and could together exceed the
// ceiling. Use one Backpressure per node. The zero value is not usable:
// call [New]; Sweep and Plan on a zero Backpressure return an error matching
// [ErrInvalidConfig].
type Backpressure struct {
	batchSize    int
	defaultQuota int
	quotas       map[string]int

	mu     sync.Mutex // guards shards
	shards shardState

	// sem serialises sweeps and guards everything below. A channel rather
	// than a mutex so that Sweep can give up waiting when its ctx is done.
	sem chan struct{}

	seenNamespaces int               // namespaces with pending rows at the last sweep (MaxInt: more than its window)
	lastMaxLimit   int               // the largest route limit of the last sweep
	nextK          int               // for a SweepCounter: the k the next sweep's window is sized for (see guessK)
	sweptOnce      bool              // whether a sweep has committed
	nsCursor       string            // last namespace that got a remainder unit
	nsCursorSet    bool              // whether nsCursor is meaningful
	routeCursor    map[string]string // namespace → last task queue that got a remainder unit
	scratch        scratch
}

// shardState is a fraction with what Sweep derives from it and the quotas:
// the pending-count cap (PendingCountCap) and the number of quotas whose
// per-node ceiling is 0 (paused namespaces, for windowSize).
type shardState struct {
	f            OwnedShardFraction
	countCap     int
	zeroCeilings int
}

// errNotNew is what Sweep and Plan return for a Backpressure not built by New.
var errNotNew = fmt.Errorf("%w: Backpressure not built with New", ErrInvalidConfig)

// New returns a Backpressure for a node owning the shards of f.
//
// It returns an error matching [ErrInvalidConfig] (a *[ConfigError] naming
// the field) if BatchSize < 1, if DefaultQuota is 0 or negative other than
// [Unlimited], or if a Quotas value is negative other than Unlimited; and one
// matching [ErrInvalidShards] if f is the zero OwnedShardFraction.
func New(cfg Config, f OwnedShardFraction) (*Backpressure, error) {
	if f.ShardCount() < 1 {
		return nil, &ShardError{Shard: -1, ShardCount: f.ShardCount(), Reason: "fraction not built with NewOwnedShardFraction"}
	}
	if cfg.BatchSize < 1 {
		return nil, &ConfigError{Field: "BatchSize", Value: cfg.BatchSize, Reason: "must be at least 1"}
	}
	switch {
	case cfg.DefaultQuota == 0:
		return nil, &ConfigError{Field: "DefaultQuota", Value: 0, Reason: "must be at least 1, or Unlimited for no ceiling (0 would pause every namespace)"}
	case cfg.DefaultQuota < 0 && cfg.DefaultQuota != Unlimited:
		return nil, &ConfigError{Field: "DefaultQuota", Value: cfg.DefaultQuota, Reason: "must be at least 1, or Unlimited"}
	}
	for ns, q := range cfg.Quotas {
		if q < 0 && q != Unlimited {
			return nil, &ConfigError{Field: "Quotas[" + strconv.Quote(ns) + "]", Value: q, Reason: "must be at least 0 (paused), or Unlimited"}
		}
	}
	b := &Backpressure{
		batchSize:    cfg.BatchSize,
		defaultQuota: cfg.DefaultQuota,
		quotas:       maps.Clone(cfg.Quotas),
		sem:          make(chan struct{}, 1),
		routeCursor:  make(map[string]string),
	}
	b.shards = b.shardStateFor(f)
	return b, nil
}

// BatchSize returns the sweep's claim budget B: no sweep claims more rows.
func (b *Backpressure) BatchSize() int { return b.batchSize }

// Quota returns the cluster-wide quota of namespace: its override in
// Config.Quotas, else Config.DefaultQuota. It may be [Unlimited], or 0 for a
// paused namespace.
func (b *Backpressure) Quota(namespace string) int {
	if q, ok := b.quotas[namespace]; ok {
		return q
	}
	return b.defaultQuota
}

// Ceiling returns this node's ceiling on concurrently claimed rows of
// namespace: OwnedShards().Ceiling(Quota(namespace)) = ⌈q × owned/shardCount⌉,
// or [Unlimited].
func (b *Backpressure) Ceiling(namespace string) int {
	return b.OwnedShards().Ceiling(b.Quota(namespace))
}

// OwnedShards returns the node's current owned-shard fraction.
func (b *Backpressure) OwnedShards() OwnedShardFraction {
	return b.currentShards().f
}

// shardStateFor derives, once per fraction, what every sweep needs of the
// quotas: both depend only on the quotas, fixed at New, and on f.
func (b *Backpressure) shardStateFor(f OwnedShardFraction) shardState {
	st := shardState{f: f}
	ceil := func(q int) int {
		if c := f.Ceiling(q); c != Unlimited {
			return c
		}
		return b.batchSize
	}
	m := ceil(b.defaultQuota)
	for _, q := range b.quotas {
		m = max(m, ceil(q))
		if f.Ceiling(q) == 0 {
			st.zeroCeilings++
		}
	}
	st.countCap = max(1, min(b.batchSize, m))
	return st
}

func (b *Backpressure) currentShards() shardState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shards
}

// SetOwnedShards installs a new owned-shard fraction, for when the
// membership system moves shards to or from this node. A sweep in progress
// finishes with the fraction it started with; the next sweep uses f. It
// returns an error matching [ErrInvalidShards], and changes nothing, if f is
// the zero OwnedShardFraction.
func (b *Backpressure) SetOwnedShards(f OwnedShardFraction) error {
	if f.ShardCount() < 1 {
		return &ShardError{Shard: -1, ShardCount: f.ShardCount(), Reason: "fraction not built with NewOwnedShardFraction"}
	}
	st := b.shardStateFor(f)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shards = st
	return nil
}

// PendingCountCap returns the deepest bound Sweep passes to
// CountPendingOutboxRows (a sweep often counts shallower first: see Sweep):
//
//	cap = max(1, min(B, max_q Ceiling(q)))
//
// over the default quota and every override (a ceiling of Unlimited counts
// as B). A plan never grants a route more than its namespace's headroom,
// which is at most its ceiling, nor more than B; so a route counted as
// min(P_r, cap) rather than P_r yields exactly the same claims and rotation,
// while the store reads fewer index entries per route. The reports describe
// the counts as the store returned them (see [Plan.CountCap]): Pending,
// Demand and Held are lower bounds for a namespace whose backlog passes the
// cap, so one whose demand the batch met shows Held 0 even if more rows wait
// behind the cap.
func (b *Backpressure) PendingCountCap() int {
	return b.currentShards().countCap
}

// windowSize returns the namespaces a windowed pending count must cover for
// the plan to be exact: n = B + k + 1, where k counts the namespaces known
// to have no headroom (claimed ≥ ceiling, or a ceiling of 0). A ceiling of 0
// comes from a quota of 0 in Quotas (DefaultQuota is ≥ 1 or Unlimited), or
// from owning no shards, when no row is claimable and k does not matter. Among any n
// namespaces with claimable rows at least B + 1 are then active, so the
// plan is max-min fair at level 0: one row each to the first B active
// namespaces after the rotation cursor, all inside the window. It reports
// false when n would overflow.
func (b *Backpressure) windowSize(claimed map[string]int, st shardState, budget int) (int, bool) {
	k := st.zeroCeilings
	for ns, c := range claimed {
		if atCeiling(st.f.Ceiling(b.Quota(ns)), c) {
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

// guessK returns, after a sweep planned p, the k a [SweepCounter]'s next
// window is sized for, before the sweep knows its claimed counts: the
// paused namespaces (zeroCeilings) plus those with a ceiling c > 0 whose
// claimed rows and grant together reach it, Σ [0 < c ≤ Claimed + Granted].
// Claimed rows grow only by this node's claims, so that bounds the next
// sweep's k unless some other claimer took rows on the node's shards (or
// the shards changed); the next sweep then counts its window again, one
// more round trip.
func guessK(p Plan, st shardState) int {
	k := st.zeroCeilings
	for _, r := range p.Namespaces {
		if atCeiling(r.Ceiling, r.Claimed+r.Granted) {
			k++
		}
	}
	return k
}

// firstNamespaces trims a window's counts, sorted by namespace, to those of
// its first n namespaces in the cyclic order after after: the window
// [PendingWindowCounter] would have returned for n. It filters in place.
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

// Sweep runs one sweep of a dispatcher node against store, in four steps,
// usually in three round trips:
//
//  1. CountClaimedOutboxRows: live claimed rows per namespace;
//  2. the pending counts, each route's count capped so the store reads no
//     more of a route than the plan can use:
//     - when the store implements [PendingWindowCounter] and the last
//     sweep saw more namespaces than a window holds,
//     CountPendingOutboxRowsWindow over the namespaces this sweep can serve
//     (see its doc), capped at 1: each of them gets at most one row;
//     - otherwise CountPendingOutboxRows capped at c = min(full, 2·m + 1),
//     where full is b.PendingCountCap() and m the largest route limit of
//     the last sweep;
//  3. b.Plan; if a route was granted all c rows it was counted at, it may
//     have more rows a deeper count would grant it, so Sweep counts again
//     capped at full and plans again (likewise after a window that turns
//     out to hold every namespace). Either way the claims are exactly
//     those that uncapped counts would give;
//  4. one ClaimOutboxRowsScoped with the plan's claims (skipped when the
//     plan claims nothing). b's rotation advances only if it succeeds.
//
// A sweep thus makes three round trips in steady state and five at most.
// When the store implements [SweepCounter], steps 1 and 2 are one
// CountSweep: two round trips in steady state. Its window is then sized
// before the claimed counts are known, for the namespaces the last sweep
// left without headroom, and trimmed to the window step 2 describes; if
// more namespaces than that have none, the window is counted again. When
// the store implements [TxSweeper], the steps run as one transaction, on
// the view InSweepTx passes, and b's rotation advances only if that
// transaction commits. The plan's reports count what the store counted:
// see [Plan.CountCap].
//
// It returns the rows claimed and the plan. On error it returns an error
// matching [ErrStore], in which errors.As finds the *[StoreError] naming the
// failed call and wrapping the store's error (so errors.Is(err,
// context.Canceled) works; a TxSweeper that wraps its fn's error returns
// its own error around the *StoreError); a *[SnapshotError] (matching
// [ErrInvalidSnapshot]) if the store's counts break its contract (a
// negative count, a route listed twice); or ctx's error if ctx is done
// before the sweep starts. b's state is then unchanged, and because the
// store's claim is atomic no row is half-claimed.
//
// Sweeps on one Backpressure run one at a time; Sweep waits for a sweep in
// progress, or returns ctx's error if ctx is done first.
func Sweep[R any](ctx context.Context, b *Backpressure, store OutboxStore[R]) ([]R, Plan, error) {
	if b == nil || b.sem == nil {
		return nil, Plan{}, errNotNew
	}
	return SweepN(ctx, b, store, b.batchSize)
}

// SweepN is [Sweep] with a smaller budget for this sweep: it claims at most
// min(n, b.BatchSize()) rows, as a dispatcher with n idle workers asks for
// no more rows than it can start (enforced credit). The plan's guarantees
// hold with that budget in place of the batch size, and the rotation
// carries over from sweep to sweep whatever the budgets, so cumulative
// grants still even out. With n ≤ 0 it returns (nil, Plan{}, nil) without
// calling the store. Errors are as for Sweep.
func SweepN[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	if b == nil || b.sem == nil {
		return nil, Plan{}, errNotNew
	}
	if n <= 0 {
		return nil, Plan{}, nil
	}
	budget := min(n, b.batchSize)
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, Plan{}, ctx.Err()
	}
	defer func() { <-b.sem }()
	if err := ctx.Err(); err != nil {
		return nil, Plan{}, err
	}

	st := b.currentShards()
	var (
		rows []R
		out  sweepResult
		err  error
	)
	if txs, ok := store.(TxSweeper[R]); ok {
		err = txs.InSweepTx(ctx, func(tx OutboxStore[R]) error {
			var err error
			rows, out, err = sweepOn(ctx, b, st, budget, tx)
			return err
		})
		// fn's errors are already typed; anything else is the store's own.
		if err != nil && !errors.As(err, new(*StoreError)) && !errors.As(err, new(*SnapshotError)) {
			err = &StoreError{Op: "InSweepTx", Err: err}
		}
	} else {
		rows, out, err = sweepOn(ctx, b, st, budget, store)
	}
	if err != nil {
		return nil, Plan{}, err
	}
	b.committed(out)
	return rows, out.plan, nil
}

// sweepResult is what a sweep commits to b once its claim has succeeded:
// the plan, how many namespaces its counts saw, and, for a SweepCounter,
// the k the next window is sized for.
type sweepResult struct {
	plan  Plan
	seen  int
	nextK int
}

// sweepOn runs Sweep's steps against store (the store itself, or its
// transaction view) without committing b's state.
func sweepOn[R any](ctx context.Context, b *Backpressure, st shardState, budget int, store OutboxStore[R]) ([]R, sweepResult, error) {
	shards := st.f
	// No route is granted more than the budget, so counting deeper than it
	// cannot change the plan (see PendingCountCap).
	full := max(1, min(st.countCap, budget))
	wc, canWindow := any(store).(PendingWindowCounter)
	sc, canCombine := any(store).(SweepCounter)
	var (
		claimed map[string]int
		pending []RouteCount
		read    *PendingWindow // the pending count read with claimed, if any
		err     error
	)
	if canCombine {
		// The window is sized before the claimed counts are known, for
		// the k guessK expects; see below if it falls short.
		w := PendingWindow{CapPerRoute: b.countCap(full)}
		if n, ok := windowFor(budget, b.nextK); canWindow && ok && b.seenNamespaces >= n {
			w = PendingWindow{CapPerRoute: 1, After: b.after(), Namespaces: n}
		}
		if claimed, pending, err = sc.CountSweep(ctx, shards, w); err != nil {
			return nil, sweepResult{}, &StoreError{Op: "CountSweep", Err: err}
		}
		read = &w
	} else if claimed, err = store.CountClaimedOutboxRows(ctx, shards); err != nil {
		return nil, sweepResult{}, &StoreError{Op: "CountClaimedOutboxRows", Err: err}
	}
	// A window helps only when there are more namespaces than it holds;
	// the last sweep's count says whether there were. Full counts already
	// read serve as well.
	n, useWindow := 0, false
	if canWindow && (read == nil || read.Namespaces > 0) {
		n, useWindow = b.windowSize(claimed, st, budget)
		useWindow = useWindow && b.seenNamespaces >= n
	}
	var (
		plan     Plan
		windowed bool
	)
	if useWindow {
		if read != nil && read.Namespaces >= n {
			// A window of more namespaces than needed starts with the
			// window needed.
			pending = firstNamespaces(pending, read.After, n)
		} else {
			// In a full window every grant is 0 or 1 (see windowSize), so
			// whether a route has a claimable row is all the plan needs.
			pending, err = wc.CountPendingOutboxRowsWindow(ctx, shards, PendingWindow{CapPerRoute: 1, After: b.after(), Namespaces: n})
			if err != nil {
				return nil, sweepResult{}, &StoreError{Op: "CountPendingOutboxRowsWindow", Err: err}
			}
		}
		if windowed = distinctNamespaces(pending) >= n; windowed {
			if plan, err = b.plan(Snapshot{Claimed: claimed, Pending: pending, Budget: budget}, shards); err != nil {
				return nil, sweepResult{}, err
			}
			plan.Windowed, plan.CountCap = true, 1
		}
		// Otherwise the window held every namespace, counted too shallow
		// for a plan that may grant more than 1: count them again.
	}
	if !windowed {
		c := b.countCap(full)
		for {
			if read != nil && read.Namespaces == 0 && read.CapPerRoute == c {
				read = nil // counted with claimed: use it once
			} else if pending, err = store.CountPendingOutboxRows(ctx, shards, c); err != nil {
				return nil, sweepResult{}, &StoreError{Op: "CountPendingOutboxRows", Err: err}
			}
			if plan, err = b.plan(Snapshot{Claimed: claimed, Pending: pending, Budget: budget}, shards); err != nil {
				return nil, sweepResult{}, err
			}
			plan.CountCap = c
			// Exact unless a route got all c rows it was counted at: it
			// may have more, and a deeper count could grant it more.
			if c == full || maxLimit(plan.Claims) < c {
				break
			}
			c = full
		}
	}
	markCapped(plan.Namespaces, pending, plan.CountCap)
	out := sweepResult{plan: plan, seen: math.MaxInt} // a full window: at least the window, more beyond it
	if !windowed {
		out.seen = distinctNamespaces(pending)
	}
	if canCombine && canWindow {
		out.nextK = guessK(plan, st)
	}
	if len(plan.Claims) == 0 {
		return nil, out, nil
	}
	rows, err := store.ClaimOutboxRowsScoped(ctx, shards, plan.Claims)
	if err != nil {
		return nil, sweepResult{}, &StoreError{Op: "ClaimOutboxRowsScoped", Err: err}
	}
	return rows, out, nil
}

// after returns where the next window starts: the rotation cursor, or ""
// before the first remainder unit.
func (b *Backpressure) after() string {
	if b.nsCursorSet {
		return b.nsCursor
	}
	return ""
}

// countCap returns the cap of a sweep's first full pending count, c =
// min(full, 2·m + 1) for m the largest route limit of the last sweep (0 if
// it claimed nothing), and full, PendingCountCap, for the first sweep. A
// plan from counts capped at c is the plan full counts give unless some
// route is granted c (see Sweep), so c only has to pass the grants a sweep
// is likely to make: the last sweep's, with room to double.
func (b *Backpressure) countCap(full int) int {
	if !b.sweptOnce || b.lastMaxLimit >= full/2 {
		return full
	}
	return 2*b.lastMaxLimit + 1
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

// maxLimit returns the largest Limit of claims, 0 if there are none.
func maxLimit(claims []ScopedClaim) int {
	m := 0
	for _, c := range claims {
		m = max(m, c.Limit)
	}
	return m
}

// committed commits a sweep's plan: its cursor moves (see commit), how
// many namespaces it saw and its largest grant, for the next sweep's counts.
func (b *Backpressure) committed(out sweepResult) {
	p := out.plan
	b.commit(p.Windowed)
	b.seenNamespaces = out.seen
	b.nextK = out.nextK
	b.lastMaxLimit = maxLimit(p.Claims)
	b.sweptOnce = true
}

// Plan plans one sweep from a snapshot of the node's outbox and advances
// the rotation cursors. It performs no I/O. It returns an error matching
// [ErrInvalidSnapshot] (a *[SnapshotError]) for a malformed snapshot, and
// then leaves b unchanged. See [Plan] for what the plan guarantees.
//
// Cost: O((R + N)·log B) for R routes and N namespaces when the snapshot's
// routes are sorted by namespace and task queue (as the stores return
// them), plus O(R·log R) to sort them otherwise; in steady state two
// allocations, the plan's two slices (scratch buffers grow to the largest
// snapshot seen and are reused).
func (b *Backpressure) Plan(s Snapshot) (Plan, error) {
	if b == nil || b.sem == nil {
		return Plan{}, errNotNew
	}
	b.sem <- struct{}{}
	defer func() { <-b.sem }()
	p, err := b.plan(s, b.OwnedShards())
	if err != nil {
		return Plan{}, err
	}
	b.commit(false)
	return p, nil
}
