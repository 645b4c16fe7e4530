package backpressure

import (
	"context"
	"reflect"
	"time"
)

// SweepAhead is [SweepN] for a caller that sweeps again at once whenever a
// sweep comes back full, as a dispatcher draining a backlog does. It hides
// the counts' round trip behind the claim's: while a sweep's claim runs, it
// reads the next sweep's counts on another connection, and the next sweep
// plans from them instead of counting again, provided that
//
//   - the store implements [Counter] (serving Claimed) and not [TxSweeper],
//     and is the same store (an == comparison, when its value is
//     comparable);
//   - this sweep's plan filled its budget and its claim returned every row
//     planned (Σ limits = budget = rows claimed): a backlog, which a sweep
//     that comes back short does not show;
//   - the next sweep is also a SweepAhead on b, starts no later after this
//     one returned than this one took from its start, with the same
//     configuration and shards (no [Backpressure.SetConfig] or
//     [Backpressure.SetOwnedShards] in between), and asks for counts the
//     read-ahead covers (the same window start, no more namespaces, no
//     deeper a cap);
//
// and otherwise the next sweep counts as SweepN does, at the cost of one
// more count on the database. Sweep and SweepN forget a read-ahead.
//
// Counts read ahead are read before the claim commits, so the next sweep
// corrects them by this sweep's grants g: for a namespace n and a route r,
//
//	K′_n = K_n + g_n ≥ claimed now,   P′_r = min(max(0, P_r − g_r), c) ≤ pending now,
//
// where c is the cap the next sweep counts at (the read-ahead counts at
// c + max_r g_r, so that a route counted as deep as c before the claim is
// still known to be after it). Both bounds hold whether or not the count's
// snapshot saw the claim, as long as no other claimer takes rows on the
// node's shards (which fenced ownership guarantees): rows only leave the
// claimed state between the two sweeps (settled, retried, expired), and
// only this node claims pending rows. So every ceiling holds exactly as with
// fresh counts, C_n ≥ K_n + g_n at every sweep; what changes is that rows
// enqueued while the previous claim ran, and leases released meanwhile,
// wait for the sweep after. The next sweep's plan and reports are those of
// the corrected counts; its claim is still atomic, fenced and of claimable
// rows only.
//
// The store must be safe for concurrent use: the read-ahead runs beside
// the claim, and beside whatever else the caller runs (a [dispatch] loop's
// completions). Errors are as for Sweep; a read-ahead that fails is
// forgotten, and the next sweep counts afresh.
func SweepAhead[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweepN(ctx, b, store, n, true)
}

// ahead is the next sweep's counts, read while a SweepAhead's claim runs.
// The fields above done are set before the read starts; those below it by
// the read, before done is closed; began, ended and full by the sweep that
// started it, once its claim returned.
type ahead struct {
	gen    uint64        // settings generation the counts are for
	store  any           // the store counted, if its value is comparable (canCompare)
	want   CountParams   // what the next sweep is expected to ask
	claims []ScopedClaim // the sweep's grants, to correct the counts by
	cancel context.CancelFunc
	done   chan struct{}

	claimed map[string]int
	pending []RouteCount
	err     error

	began, ended time.Time // the starting sweep's start, and its return
}

// noExpiry turns off a read-ahead's age limit, for tests that need a
// read-ahead used whatever the machine's pace.
var noExpiry = false

// startReadAhead starts reading, on counter, the counts the sweep after one
// that planned plan (with out, on st, with budget) will ask for, raised by
// the plan's largest grant. ctx is the sweep's.
func startReadAhead(ctx context.Context, b *Backpressure, counter Counter, store any, st settings, budget int, out sweepResult) *ahead {
	h := b.hints
	h.record(out)
	want := firstParams(&h, b.afterAdvance(), st, budget)
	ask := want
	if want.Namespaces == 0 {
		ask.CapPerRoute = addSat(want.CapPerRoute, maxLimit(out.plan.Claims))
	}
	a := &ahead{gen: st.gen, want: want, claims: out.plan.Claims, done: make(chan struct{})}
	if canCompare(store) {
		a.store = store
	}
	var rctx context.Context
	rctx, a.cancel = context.WithCancel(ctx)
	b.reads.Add(1)
	go func() {
		defer b.reads.Done()
		defer close(a.done)
		a.claimed, a.pending, a.err = counter.CountOutboxRows(rctx, st.f, ask)
	}()
	return a
}

// canCompare reports whether == on store cannot panic: a comparable type
// is not enough, as a struct's interface field may hold a slice, a map or
// a func.
func canCompare(store any) bool {
	return store != nil && reflect.ValueOf(store).Comparable()
}

// drop cancels a read-ahead that will not be used.
func (a *ahead) drop() {
	if a != nil {
		a.cancel()
	}
}

// take returns the corrected counts of a, if a is usable for a sweep
// starting at now on store with st that would ask p (see SweepAhead), and
// false otherwise. It waits for the read to finish, or for ctx. It always
// releases a.
func (a *ahead) take(ctx context.Context, now time.Time, st settings, store any, p CountParams) (map[string]int, []RouteCount, CountParams, bool) {
	if a == nil {
		return nil, nil, CountParams{}, false
	}
	defer a.cancel()
	if a.gen != st.gen || a.store == nil || !canCompare(store) || a.store != store || !a.want.covers(p) ||
		(!noExpiry && now.Sub(a.ended) > a.ended.Sub(a.began)) {
		return nil, nil, CountParams{}, false
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, nil, CountParams{}, false
	}
	if a.err != nil {
		return nil, nil, CountParams{}, false
	}
	claimed, pending := a.corrected()
	return claimed, pending, a.want, true
}

// covers reports whether counts read for c serve a sweep that would ask p:
// both with the claimed counts; full counts at least as deep, or a window
// from the same start over at least as many namespaces at the same cap.
func (c CountParams) covers(p CountParams) bool {
	if !c.Claimed || !p.Claimed {
		return false
	}
	if p.Namespaces == 0 {
		return c.Namespaces == 0 && c.CapPerRoute >= p.CapPerRoute
	}
	return c.Namespaces >= p.Namespaces && c.After == p.After && c.CapPerRoute == p.CapPerRoute
}

// corrected returns a's counts corrected by its sweep's grants (see
// SweepAhead): each namespace's claimed count plus its grant, each route's
// pending count less its grant, capped at want.CapPerRoute, routes left
// with none dropped. The read's results are a's own, so it corrects them in
// place.
func (a *ahead) corrected() (map[string]int, []RouteCount) {
	claimed := a.claimed
	if claimed == nil {
		claimed = make(map[string]int, len(a.claims))
	}
	granted := make(map[Route]int, len(a.claims))
	for _, c := range a.claims {
		claimed[c.Route.Namespace] = addSat(claimed[c.Route.Namespace], c.Limit)
		granted[c.Route] += c.Limit
	}
	pending := a.pending[:0]
	for _, rc := range a.pending {
		if rc.Count -= granted[rc.Route]; rc.Count > 0 {
			rc.Count = min(rc.Count, a.want.CapPerRoute)
			pending = append(pending, rc)
		}
	}
	return claimed, pending
}

// addSat is a + b for b ≥ 0, saturating at the largest int.
func addSat(a, b int) int {
	s, _ := addOver(a, b, false)
	return s
}

// firstParams returns the first count a sweep with budget asks of a
// Counter, with hints h and the window starting after after: a window of
// budget + k + 1 namespaces at cap 1 when the last sweep saw at least that
// many and no namespace is weighted (see windowSize), else full counts at
// h's first cap (see firstCountCap); the claimed counts with either.
func firstParams(h *sweepHints, after string, st settings, budget int) CountParams {
	full := st.fullCap(budget)
	if n, ok := windowFor(budget, h.nextK); st.cfg.weights == nil && ok && h.seenNamespaces >= n {
		return CountParams{CapPerRoute: 1, After: after, Namespaces: n, Claimed: true}
	}
	return CountParams{CapPerRoute: h.firstCountCap(full), Claimed: true}
}
