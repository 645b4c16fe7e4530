package backpressure

import (
	"context"
	"reflect"
	"sync/atomic"
)

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

	claims []ScopedClaim // the grants in flight at the read and of every sweep since, to correct the counts by
	hops   int           // sweeps that have planned from the counts
	short  atomic.Bool   // a claim of the sweep that read ahead came back short: no backlog shown
}

// aheadHops is the most sweeps one full count read ahead serves: the first
// after the read, and while every condition of passOn holds, the next ones.
// The read counts deep enough for all of them (see startReadAhead).
const aheadHops = 4

// noExpiry turns off the back-to-back test that decides whether a sweep
// reads ahead and may use counts read ahead (see sweepAhead), for tests that need a read-ahead
// started and used whatever the machine's pace.
var noExpiry = false

// startReadAhead starts reading, on s's counter, the counts the sweep
// after s (which planned out) will ask for. The read is corrected by the
// grants in flight when it starts (out's own among them) and by those of
// every sweep that plans from it, so it counts deeper by them, and by the
// grants of aheadHops − 1 more sweeps like this one. ctx is the sweep's.
func startReadAhead[R any](ctx context.Context, s *sweeper[R], out sweepResult) *ahead {
	e := s.e
	h := e.hints
	h.record(out)
	want := firstParams(&h, e.rot.after(out.moves), s.st, s.budget)
	// The grants are copied: the plan's Claims are the caller's, who may
	// change them before the next sweep corrects the counts by them.
	a := &ahead{gen: s.st.gen, want: want, claims: e.flights.grants(), done: make(chan struct{})}
	ask := want
	if want.Namespaces == 0 {
		// Deep enough that a route counted to c before the claims in flight
		// is still counted to c after them and aheadHops − 1 more sweeps.
		deepest, _ := grantSpread(a.claims)
		ask.CapPerRoute = addSat(addSat(want.CapPerRoute, deepest), (aheadHops-1)*maxLimit(out.plan.Claims))
	}
	a.ask = ask.CapPerRoute
	// Comparable by its value, not its type: a struct type with an
	// interface field is comparable, yet == panics on it when the field
	// holds a slice or a map.
	if store := any(s.store); store != nil && reflect.ValueOf(store).Comparable() {
		a.store = store
	}
	var rctx context.Context
	rctx, a.cancel = context.WithCancel(ctx)
	e.reads.Add(1)
	counter := s.counter
	go func() {
		defer e.reads.Done()
		defer close(a.done)
		a.claimed, a.pending, a.err = counter.CountOutboxRows(rctx, s.st.f, ask)
	}()
	return a
}

// takeAhead returns the counts carried from a read-ahead, corrected, if
// they serve the sweep s (take) would ask its Counter for (firstParams).
// It always releases carried.
func takeAhead[R any](ctx context.Context, s *sweeper[R], carried *ahead) (counts, bool) {
	if s.counter == nil {
		return counts{}, false
	}
	p := firstParams(&s.e.hints, s.e.rot.after(moves{}), s.st, s.budget)
	claimed, pending, want, ok := carried.take(ctx, s.st, s.store, p)
	if !ok {
		return counts{}, false
	}
	return counts{claimed: claimed, pending: pending, p: want, claimedToo: true, ahead: true}, true
}

// nextAhead returns the next sweep's counts after a full plan out (one
// that used the whole budget: the next sweep may come at once): the counts
// out was planned from, if they serve once more (passOn), else counts read
// while this claim runs (startReadAhead). Otherwise, or when s is not back
// to back with the last sweep or its store is no Counter, nil.
func nextAhead[R any](ctx context.Context, s *sweeper[R], carried *ahead, out sweepResult) *ahead {
	if !s.readAhead || s.counter == nil || sumLimits(out.plan.Claims) != s.budget {
		return nil
	}
	if out.reused && carried.passOn(out.plan, s.budget) {
		return carried
	}
	return startReadAhead(ctx, s, out)
}

// markShort makes a unusable: the claim of the sweep that read it came
// back short.
func (a *ahead) markShort() {
	if a != nil {
		a.short.Store(true)
	}
}

// drop cancels a read-ahead that will not be used.
func (a *ahead) drop() {
	if a != nil {
		a.cancel()
	}
}

// take returns the corrected counts of a, if a is usable for a sweep on
// store with st that would ask p (see SweepAhead; sweepAhead has already
// dropped a read-ahead too old to use), and false otherwise. It waits for
// the read to finish, or for ctx. It always releases a.
func (a *ahead) take(ctx context.Context, st settings, store any, p CountParams) (map[string]int, []RouteCount, CountParams, bool) {
	if a == nil {
		return nil, nil, CountParams{}, false
	}
	defer a.cancel()
	if a.gen != st.gen || a.store == nil || a.store != store || !covers(a.want, p) || a.short.Load() {
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
func covers(c, p CountParams) bool {
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
	return addGrants(a.claimed, a.claims), subtractGrants(a.pending, a.claims, a.want.CapPerRoute)
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
