package backpressure

import (
	"math"
	"slices"
	"strings"
	"sync"
)

// sweepHints is what one sweep learns for the next: how deep and how wide
// to count. It never changes a plan, only the reads that lead to it (see
// sweeper.read); the rotation cursors, which do change plans, are the
// engine's (rotation).
type sweepHints struct {
	seenNamespaces int  // namespaces with pending rows at the last sweep (MaxInt: more than its window)
	lastMaxLimit   int  // the largest route limit of the last sweep
	prevMaxLimit   int  // the largest route limit of the sweep before it
	nextK          int  // for a Counter serving Claimed: the k the next sweep's window is sized for (see guessK)
	sweptOnce      bool // whether a sweep has succeeded
}

// firstCountCap returns the cap of a sweep's first full pending count, full
// for the first sweep, else, for m the largest route limit of the last
// sweep and m′ that of the sweep before it (0 for a sweep that claimed
// nothing, or none):
//
//	c = min(full, max(m, m′) + 1)   when m ≤ m′ (a steady or shrinking backlog)
//	c = min(full, 2·m + 1)          when m > m′ (a growing one)
//
// A plan from counts capped at c is the plan full counts give unless some
// route is granted c (then sweeper.planFull counts again at full): a route
// granted less than it was counted at had rows left over, which more rows
// behind the cap would not change. So c sets the cost, never the plan: each
// entry it counts past the grants is read for nothing, and a route granted
// c costs a second count. A steady backlog grants each route about what it
// granted the last two sweeps, so one entry to spare passes it (and a grant
// that alternates between two sizes); a growing one may grow again, so it
// gets room to double.
func (h *sweepHints) firstCountCap(full int) int {
	m, before := h.lastMaxLimit, h.prevMaxLimit
	if !h.sweptOnce || m > before && m >= full/2 {
		return full
	} else if m > before {
		return 2*m + 1
	}
	return min(full-1, before) + 1 // before ≥ m
}

// record keeps what a sweep whose claim succeeded tells the next one: how
// many namespaces its counts saw, the k of its window, its largest grant
// (and the last sweep's, now the one before).
func (h *sweepHints) record(out sweepResult) {
	h.seenNamespaces = out.seen
	h.nextK = out.nextK
	h.prevMaxLimit, h.lastMaxLimit = h.lastMaxLimit, maxLimit(out.plan.Claims)
	h.sweptOnce = true
}

// pendingCountCap returns the deepest bound Sweep passes to
// CountPendingOutboxRows (a sweep often counts shallower first: see
// sweeper.planFull):
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
// routes: sweeper.planWindow checks), so the plan is max-min fair at level 0: one row
// each to the first B active namespaces after the rotation cursor, all
// inside the window. It reports false when n would overflow.
func windowSize(claimed map[string]int, st settings, budget int) (int, bool) {
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
// with the claimed counts ([outbox.CountParams.Claimed]) is sized for, before the sweep knows its claimed counts: the
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

// addGrants returns claimed (not changed) plus grants per namespace:
// K′_n = K_n + Σ g_n.
func addGrants(claimed map[string]int, grants []ScopedClaim) map[string]int {
	out := make(map[string]int, len(claimed)+len(grants))
	for ns, n := range claimed {
		out[ns] = n
	}
	for _, g := range grants {
		out[g.Route.Namespace] = addSat(out[g.Route.Namespace], g.Limit)
	}
	return out
}

// subtractGrants returns pending (not changed) less grants per route and
// capped at c, routes left with none dropped, in pending's order:
// P′_r = min(max(0, P_r − Σ g_r), c).
func subtractGrants(pending []RouteCount, grants []ScopedClaim, c int) []RouteCount {
	granted := make(map[Route]int, len(grants))
	for _, g := range grants {
		granted[g.Route] = addSat(granted[g.Route], g.Limit)
	}
	out := make([]RouteCount, 0, len(pending))
	for _, rc := range pending {
		if rc.Count -= granted[rc.Route]; rc.Count > 0 {
			rc.Count = min(rc.Count, c)
			out = append(out, rc)
		}
	}
	return out
}

// grantSpread returns the largest sum of grants over one route, and the
// number of namespaces with a grant.
func grantSpread(grants []ScopedClaim) (deepest, namespaces int) {
	byRoute := make(map[Route]int, len(grants))
	ns := make(map[string]struct{}, len(grants))
	for _, g := range grants {
		byRoute[g.Route] = addSat(byRoute[g.Route], g.Limit)
		deepest = max(deepest, byRoute[g.Route])
		ns[g.Route.Namespace] = struct{}{}
	}
	return deepest, len(ns)
}

// flights is the set of claims in flight on a Backpressure: planned,
// claiming, not yet returned. Only overlapped sweeps leave one in flight
// while another plans; a sweep's own flight also seeds its read-ahead's
// corrections.
type flights struct {
	mu   sync.Mutex
	list []*flight
}

// flight is one claim in flight: its plan's grants.
type flight struct{ claims []ScopedClaim }

func (fs *flights) add(claims []ScopedClaim) *flight {
	f := &flight{claims: claims}
	fs.mu.Lock()
	fs.list = append(fs.list, f)
	fs.mu.Unlock()
	return f
}

func (fs *flights) remove(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if i := slices.Index(fs.list, f); i >= 0 {
		fs.list = slices.Delete(fs.list, i, i+1)
	}
}

// grants returns the grants of every claim in flight, in a slice of its
// own (nil if none).
func (fs *flights) grants() []ScopedClaim {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []ScopedClaim
	for _, f := range fs.list {
		out = append(out, f.claims...)
	}
	return out
}

// firstNamespaces trims a window's counts, sorted by namespace, to those of
// its first n namespaces in the cyclic order after after: the window
// [Counter] would have returned for n. It filters in place.
func firstNamespaces(pending []RouteCount, after string, n int) []RouteCount {
	above, _ := slices.BinarySearchFunc(pending, after, func(rc RouteCount, after string) int {
		if rc.Route.Namespace <= after {
			return -1
		}
		return 1
	})
	hi, left := namespacesEnd(pending, above, n)
	lo, _ := namespacesEnd(pending[:above], 0, left)
	return append(pending[:lo], pending[above:hi]...)
}

// namespacesEnd returns where the first n namespaces of routes (sorted by
// namespace) from i, the first route of a namespace, end; and how many of
// the n are left when routes ends first.
func namespacesEnd(routes []RouteCount, i, n int) (int, int) {
	for ; i < len(routes); i++ {
		if i == 0 || routes[i].Route.Namespace != routes[i-1].Route.Namespace {
			if n == 0 {
				return i, 0
			}
			n--
		}
	}
	return len(routes), n
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

// addSat is a + b for b ≥ 0, saturating at the largest int.
func addSat(a, b int) int {
	s, _ := addOver(a, b, false)
	return s
}
