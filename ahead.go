package backpressure

import (
	"context"
	"reflect"
	"slices"
)

// SweepAhead is [SweepN] for a caller that sweeps again at once whenever a
// sweep comes back full, as a dispatcher draining a backlog does. It takes
// the counts off the sweeps' path: while a sweep's claim runs, it reads the
// next sweep's counts on another connection, and the next sweep plans from
// them, corrected by the claims made since, instead of counting again. Full
// counts (no window) then serve up to four sweeps before they are read
// again; a window serves one. The next sweep plans from counts read ahead
// provided that
//
//   - the store implements [Counter] (serving Claimed) and not [TxSweeper],
//     and is the same store (an == comparison, when the store's value is
//     comparable);
//   - the previous sweep's plan filled its budget and its claim returned
//     every row planned (Σ limits = budget = rows claimed): a backlog, which
//     a sweep that comes back short does not show;
//   - it is also a SweepAhead on b, starts no later after the previous one
//     returned than the previous one took from its start, with the same
//     configuration and shards (no [Backpressure.SetConfig] or
//     [Backpressure.SetOwnedShards] in between), and asks for counts the
//     read-ahead covers (the same window start, no more namespaces, no
//     deeper a cap);
//   - for a full count serving a second sweep or more: every route counted
//     to its cap still has at least the cap after the grants since, and
//     every namespace with a finite ceiling kept a headroom of at least the
//     budget, so that the corrections cannot hold it;
//
// and otherwise the next sweep counts as SweepN does, at the cost of one
// more count on the database. So that reads are not wasted, a sweep reads
// ahead only when it too began within the last sweep's duration of that
// sweep's return (the caller sweeps back to back, as a dispatcher draining
// a backlog does, not as one whose workers are busy or as a ticker), and a
// sweep whose counts read ahead give a plan short of its budget discards
// them and counts afresh (they may understate what is claimable: see
// below), so that it never comes back short while rows wait. Sweep and
// SweepN forget a read-ahead.
//
// Counts read ahead are read before the claims they are corrected by
// commit, so a sweep corrects them by the grants g of every sweep since the
// read: for a namespace n and a route r,
//
//	K′_n = K_n + Σ g_n ≥ claimed now,   P′_r = min(max(0, P_r − Σ g_r), c) ≤ pending now,
//
// where c is the cap the sweep counts at. Full counts are read ahead at
// c + 4·max_r g_r, so that a route counted as deep as c before the claims
// is still known to be after them; a window is read at its cap of 1, and a
// namespace a claim may have emptied leaves it (if that leaves the window
// short, the sweep counts the window again). Both bounds hold whether or
// not the read saw a claim, as long as no other claimer takes rows on the
// node's shards (which fenced ownership guarantees): rows only leave the
// claimed state meanwhile (settled, retried, expired), and only this node
// claims pending rows. So every ceiling holds exactly as with fresh counts,
// C_n ≥ K_n + g_n at every sweep. (With a membership of one's own that lets
// two nodes claim on one shard at once, a ceiling can be passed for as long
// as the overlap, fresh counts or not; counts read ahead lengthen that to a
// few sweeps.) What changes is that rows enqueued since
// the read, and leases released since, wait for the next read (a few
// sweeps' time: each sweep must follow the last within the last's
// duration). A sweep's plan and reports are those of the corrected counts;
// its claim is still atomic, fenced and of claimable rows only.
//
// The store must be safe for concurrent use: the read-ahead runs beside
// the claim, and beside whatever else the caller runs (a dispatcher's
// completions). The read-ahead runs under ctx, so ctx should outlive the
// call, as a dispatcher's run context does: a ctx cancelled when SweepAhead
// returns cancels the read, and the next sweep counts afresh. Errors are as for Sweep; a read-ahead that fails is
// forgotten, and the next sweep counts afresh.
func SweepAhead[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweepN(ctx, b, store, n, true)
}

// ahead is the next sweep's counts, read while a SweepAhead's claim runs.
// The fields above done are set before the read starts; those below it by
// the read, before done is closed (and never changed after); claims and
// hops by the sweeps that plan from it. Only the last successful sweep's
// read-ahead is kept, so its age is that sweep's (Backpressure.lastEnd).
type ahead struct {
	gen    uint64      // settings generation the counts are for
	store  any         // the store counted, if comparable (== cannot panic)
	want   CountParams // what the next sweep is expected to ask
	ask    int         // the cap the read asked for: deeper than want's for full counts
	cancel context.CancelFunc
	done   chan struct{}

	claimed map[string]int
	pending []RouteCount
	err     error

	claims []ScopedClaim // the grants of every sweep since the read, to correct the counts by
	hops   int           // sweeps that have planned from the counts
}

// aheadHops is the most sweeps one full count read ahead serves: the first
// after the read, and while every condition of passOn holds, the next ones.
// The read counts deep enough for all of them (see startReadAhead).
const aheadHops = 4

// noExpiry turns off the back-to-back test that decides whether a sweep
// reads ahead and may use counts read ahead (see sweepN), for tests that need a read-ahead
// started and used whatever the machine's pace.
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
		// Deep enough that a route counted to c before this claim is still
		// counted to c after the grants of aheadHops sweeps like this one.
		ask.CapPerRoute = addSat(want.CapPerRoute, aheadHops*maxLimit(out.plan.Claims))
	}
	// The grants are copied: the plan's Claims are the caller's, who may
	// change them before the next sweep corrects the counts by them.
	a := &ahead{gen: st.gen, want: want, ask: ask.CapPerRoute, claims: slices.Clone(out.plan.Claims), done: make(chan struct{})}
	// Comparable by its value, not its type: a struct type with an
	// interface field is comparable, yet == panics on it when the field
	// holds a slice or a map.
	if store != nil && reflect.ValueOf(store).Comparable() {
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

// drop cancels a read-ahead that will not be used.
func (a *ahead) drop() {
	if a != nil {
		a.cancel()
	}
}

// take returns the corrected counts of a, if a is usable for a sweep on
// store with st that would ask p (see SweepAhead; sweepN has already
// dropped a read-ahead too old to use), and false otherwise. It waits for
// the read to finish, or for ctx. It always releases a.
func (a *ahead) take(ctx context.Context, st settings, store any, p CountParams) (map[string]int, []RouteCount, CountParams, bool) {
	if a == nil {
		return nil, nil, CountParams{}, false
	}
	defer a.cancel()
	if a.gen != st.gen || a.store == nil || a.store != store || !a.want.covers(p) {
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
	a.hops++
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

// corrected returns a's counts corrected by the grants of the sweeps since
// the read (see SweepAhead): each namespace's claimed count plus its
// grants, each route's pending count less its grants, capped at
// want.CapPerRoute, routes left with none dropped. The read's results stay
// as read, for the next sweep that may plan from them (see passOn).
func (a *ahead) corrected() (map[string]int, []RouteCount) {
	claimed := make(map[string]int, len(a.claimed)+len(a.claims))
	for ns, n := range a.claimed {
		claimed[ns] = n
	}
	granted := a.granted()
	for _, c := range a.claims {
		claimed[c.Route.Namespace] = addSat(claimed[c.Route.Namespace], c.Limit)
	}
	pending := make([]RouteCount, 0, len(a.pending))
	for _, rc := range a.pending {
		if rc.Count -= granted[rc.Route]; rc.Count > 0 {
			rc.Count = min(rc.Count, a.want.CapPerRoute)
			pending = append(pending, rc)
		}
	}
	return claimed, pending
}

// granted sums a's grants per route.
func (a *ahead) granted() map[Route]int {
	g := make(map[Route]int, len(a.claims))
	for _, c := range a.claims {
		g[c.Route] = addSat(g[c.Route], c.Limit)
	}
	return g
}

// passOn reports whether full counts a sweep planned plan from (with its
// budget) may serve the next sweep too, corrected by plan's grants as well,
// and if so records them in a. It holds while
//
//   - a has served fewer than aheadHops sweeps (plan's among them);
//   - every route the read counted to its cap (at least ask) still has at
//     least want.CapPerRoute rows after every grant since, so the corrected
//     counts are those of counts capped at c; and
//   - every namespace with a finite ceiling keeps a headroom of at least the
//     budget after plan's grants, C_n − (K′_n + g_n) ≥ budget, so that the
//     corrections, which only add to K, cannot hold a namespace the next
//     sweep would otherwise serve.
//
// A window never serves twice: the next window starts where this one's
// grants ended.
func (a *ahead) passOn(plan Plan, budget int) bool {
	if a.want.Namespaces != 0 || a.hops >= aheadHops {
		return false
	}
	for _, r := range plan.Namespaces {
		if r.Ceiling >= 0 && r.Ceiling-r.Claimed-r.Granted < budget {
			return false
		}
	}
	granted := a.granted()
	for _, c := range plan.Claims {
		granted[c.Route] = addSat(granted[c.Route], c.Limit)
	}
	for _, rc := range a.pending {
		if rc.Count >= a.ask && rc.Count-granted[rc.Route] < a.want.CapPerRoute {
			return false
		}
	}
	a.claims = append(a.claims, plan.Claims...)
	return true
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
