package backpressure

import (
	"math"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Rate limits how fast a namespace's rows are started, cluster-wide, as a
// token bucket per node: [outbox.Rate] states the rule and its bound.
type Rate = outbox.Rate

// limited reports whether r limits anything.
func limited(r Rate) bool { return r.PerSecond > 0 }

// rate returns namespace's rate.
func (c *config) rate(namespace string) Rate {
	if r, ok := c.rates[namespace]; ok {
		return r
	}
	return c.defaultRate
}

// hasRates reports whether some namespace may be rate limited.
func (c *config) hasRates() bool { return limited(c.defaultRate) || len(c.rates) > 0 }

// bucket is one namespace's token bucket on this node, as of time at.
// tokens may fall below 0 when a sweep planned with a rate that a change
// lowered before its claim returned: the debt is repaid before the next row.
type bucket struct {
	tokens float64
	at     time.Time
}

// nodeRate returns the node's share of r: its refill per second and its
// burst.
func nodeRate(r Rate, f OwnedShardFraction) (perSecond float64, burst int) {
	return r.PerSecond * float64(f.OwnedCount()) / float64(f.ShardCount()), f.Ceiling(r.Burst)
}

// refill returns k's tokens at t under rate r on f. A clock that goes back
// adds nothing.
func (k bucket) refill(r Rate, f OwnedShardFraction, t time.Time) float64 {
	perSecond, burst := nodeRate(r, f)
	tokens := k.tokens
	if dt := t.Sub(k.at); dt > 0 {
		tokens += perSecond * dt.Seconds()
	}
	return min(tokens, float64(burst))
}

// rateState is what a Backpressure keeps for rates. It is guarded by
// Backpressure.mu, like the settings the buckets run under, so that a change
// of settings settles every bucket at the change under the settings before
// it (see settleRates).
//
// A namespace with no entry in buckets has the bucket dflt (as of the last
// settle) refilled at its own rate: every bucket starts empty at New, and
// until a namespace spends a token, its bucket differs from another's only
// by its rate.
type rateState struct {
	buckets map[string]bucket
	dflt    bucket
}

// bucketFor returns namespace's bucket. The caller holds b.mu.
func (b *Backpressure) bucketFor(namespace string) bucket {
	if k, ok := b.rates.buckets[namespace]; ok {
		return k
	}
	return b.rates.dflt
}

// settleRates brings every bucket to t under the settings old, before new
// settings replace them: a bucket refills at the rate and burst in force
// when it refilled, and holds at most the burst in force before the change
// (a burst that shrank and then grew again at one instant adds no token). The caller holds b.mu. Cost: O(buckets + len(Rates)).
func (b *Backpressure) settleRates(old settings, t time.Time) {
	if old.cfg == nil || !old.cfg.hasRates() && len(b.rates.buckets) == 0 {
		b.rates.dflt = bucket{at: laterOf(t, b.rates.dflt.at)} // nothing limited: nothing accrued
		return
	}
	for ns, k := range b.rates.buckets {
		r := old.cfg.rate(ns)
		switch {
		case !limited(r):
			b.rates.buckets[ns] = bucket{at: laterOf(t, k.at)} // no limit: empty if it gets one again
		default: // refilled to t and held to the burst in force before the change
			b.rates.buckets[ns] = bucket{tokens: k.refill(r, old.f, t), at: laterOf(t, k.at)}
		}
	}
	for ns, r := range old.cfg.rates {
		if _, ok := b.rates.buckets[ns]; !ok {
			if b.rates.buckets == nil {
				b.rates.buckets = make(map[string]bucket)
			}
			k := bucket{at: laterOf(t, b.rates.dflt.at)}
			if limited(r) {
				d := b.rates.dflt
				k = bucket{tokens: d.refill(r, old.f, t), at: laterOf(t, d.at)}
			}
			b.rates.buckets[ns] = k
		}
	}
	switch d := b.rates.dflt; {
	case !limited(old.cfg.defaultRate):
		b.rates.dflt = bucket{at: laterOf(t, d.at)} // a namespace given a rate starts empty
	default:
		b.rates.dflt = bucket{tokens: d.refill(old.cfg.defaultRate, old.f, t), at: laterOf(t, d.at)}
	}
}

// tokensAt fills the rate, tokens and Tokens of every namespace of ns under
// st at t: the whole tokens its bucket holds, or Unlimited without a rate.
// The caller holds b.sem.
func (b *Backpressure) tokensAt(ns []nsWork, st settings, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range ns {
		w := &ns[i]
		r := st.cfg.rate(w.Namespace)
		if !limited(r) {
			w.tokens = Unlimited
			continue
		}
		w.Rate = r
		w.tokens = int(max(0, math.Floor(b.bucketFor(w.Namespace).refill(r, st.f, t))))
		w.Tokens = w.tokens
	}
}

// SpendTokens is SpendTokensAt with the Backpressure's clock.
func (b *Backpressure) SpendTokens(started map[string]int) error {
	if b == nil || b.e.sem == nil {
		return errNotNew
	}
	return b.SpendTokensAt(started, b.now())
}

// SpendTokensAt records that started[ns] rows of each namespace ns were
// claimed at t, spending one token of the namespace's bucket each (see
// [Rate]). [Sweep], [SweepN] and [SweepAhead] call it themselves with the
// rows their claim returned; a caller of [Backpressure.Plan] who claims the
// plan's rows itself calls it with the rows the claim returned (not the
// grants: a grant the claim did not fill spends nothing). Namespaces with no
// rate limit are ignored. It returns an error matching [ErrInvalidSnapshot],
// and spends nothing, if a count is negative. Cost: O(len(started)).
func (b *Backpressure) SpendTokensAt(started map[string]int, t time.Time) error {
	if b == nil || b.e.sem == nil {
		return errNotNew
	}
	for ns, n := range started {
		if n < 0 {
			return &SnapshotError{Namespace: ns, Count: n, Reason: "negative started count"}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spendLocked(started, t)
	return nil
}

// NextTokenAt returns when namespace's bucket on this node holds a whole
// token, as seen at t on the Backpressure's clock (Config.Clock): t itself
// when it holds one at t, else the instant its refill reaches one, if
// nothing is spent meanwhile. A caller that waits for rate tokens (a
// dispatcher whose last sweep held the namespace by its rate, see
// [HeldRate]) sweeps again then, so that a backlogged namespace starts
// rows at its rate rather than at one burst per poll; waking then spends
// nothing, so the bound of [Rate] holds as ever. ok is false when the
// namespace has no rate limit or the node owns no shard (its bucket never
// refills), or b was not built with [New]. It spends nothing. Cost: O(1).
func (b *Backpressure) NextTokenAt(namespace string, t time.Time) (due time.Time, ok bool) {
	if b == nil || b.e.sem == nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.set
	if st.cfg == nil {
		return time.Time{}, false
	}
	r := st.cfg.rate(namespace)
	perSecond, _ := nodeRate(r, st.f)
	if !limited(r) || perSecond <= 0 {
		return time.Time{}, false
	}
	k := b.bucketFor(namespace)
	at := laterOf(t, k.at)
	missing := 1 - k.refill(r, st.f, at)
	if missing <= 0 {
		return at, true
	}
	// Rounded up to the next nanosecond, and one more: at due the refill
	// holds a whole token despite the float's rounding.
	wait := math.Ceil(missing/perSecond*1e9) + 1
	if wait >= float64(math.MaxInt64) {
		return time.Time{}, false
	}
	return at.Add(time.Duration(wait)), true
}

// spendLocked spends started's tokens at t under the current settings. The
// caller holds b.mu.
func (b *Backpressure) spendLocked(started map[string]int, t time.Time) {
	st := b.set
	if st.cfg == nil || !st.cfg.hasRates() {
		return
	}
	for ns, n := range started {
		r := st.cfg.rate(ns)
		if n == 0 || !limited(r) {
			continue
		}
		k := b.bucketFor(ns)
		at := laterOf(t, k.at)
		if b.rates.buckets == nil {
			b.rates.buckets = make(map[string]bucket)
		}
		tokens := k.refill(r, st.f, at) - float64(n)
		if n < 0 { // tokens given back (releaseTokens): never above the burst
			_, burst := nodeRate(r, st.f)
			tokens = min(tokens, float64(burst))
		}
		b.rates.buckets[ns] = bucket{tokens: tokens, at: at}
	}
	b.pruneBuckets(st, t)
}

// pruneBuckets forgets buckets that are full and run at the default rate,
// when there are many: such a bucket is the same as dflt refilled, so
// forgetting it changes nothing, and memory follows the namespaces that
// spend tokens recently rather than every namespace ever seen. The caller
// holds b.mu.
func (b *Backpressure) pruneBuckets(st settings, t time.Time) {
	if len(b.rates.buckets) <= 2*len(st.cfg.rates)+1024 || !limited(st.cfg.defaultRate) {
		return
	}
	r := st.cfg.defaultRate
	_, burst := nodeRate(r, st.f)
	if b.rates.dflt.refill(r, st.f, t) < float64(burst) {
		return
	}
	for ns, k := range b.rates.buckets {
		if _, ok := st.cfg.rates[ns]; !ok && k.refill(r, st.f, t) >= float64(burst) {
			delete(b.rates.buckets, ns)
		}
	}
}

// routed is a row that says its route, as outbox.Row does: a sweep counts
// the rows its claim returned per namespace through it, to spend tokens.
type routed interface{ Route() Route }

// reserveTokens takes, when a sweep's plan is made, a token for every row
// the plan grants a rate-limited namespace, so that a plan made while this
// claim is in flight (overlapped claims) sees them spent; releaseTokens
// gives back, when the claim returns, the tokens of granted rows it did not
// claim (every one when it failed). Net, a sweep spends a token per row it
// claimed, never for a grant the claim did not fill, and at no instant do
// the tokens a node has handed out exceed what its bucket held. It returns
// the tokens taken per namespace, nil when none. The caller must not hold
// b.mu.
func (b *Backpressure) reserveTokens(plan Plan) map[string]int {
	taken := b.rateGrants(plan)
	if taken != nil {
		b.spend(taken)
	}
	return taken
}

// releaseTokens returns to their buckets the tokens reserveTokens took for
// rows the claim did not return. A bucket never rises above its burst. The
// caller must not hold b.mu.
func releaseTokens[R any](b *Backpressure, taken map[string]int, rows []R) {
	if len(taken) == 0 {
		return
	}
	claimed := claimedOf(taken, rows)
	back := make(map[string]int, len(taken))
	for ns, n := range taken {
		if r := n - min(n, claimed[ns]); r > 0 {
			back[ns] = -r
		}
	}
	if len(back) > 0 {
		b.spend(back)
	}
}

// rateGrants returns plan's grants per rate-limited namespace, nil when it
// grants none. The caller must not hold b.mu.
func (b *Backpressure) rateGrants(plan Plan) map[string]int {
	if len(plan.Claims) == 0 {
		return nil
	}
	cfg := b.current().cfg
	if !cfg.hasRates() {
		return nil
	}
	var grants map[string]int
	for _, c := range plan.Claims {
		if !limited(cfg.rate(c.Route.Namespace)) {
			continue
		}
		if grants == nil {
			grants = make(map[string]int)
		}
		grants[c.Route.Namespace] += c.Limit
	}
	return grants
}

// claimedOf returns how many of rows each namespace of grants claimed.
// Rows that say their route count for their namespace; for a row type that
// does not, a namespace is taken to have claimed min(its grant, rows
// claimed), as many as it may have started (never fewer, so the rate's
// bound holds).
func claimedOf[R any](grants map[string]int, rows []R) map[string]int {
	claimed := make(map[string]int, len(grants))
	if len(rows) == 0 {
		return claimed
	}
	if _, ok := any(rows[0]).(routed); ok {
		for i := range rows {
			if r, ok := any(rows[i]).(routed); ok {
				if _, limited := grants[r.Route().Namespace]; limited {
					claimed[r.Route().Namespace]++
				}
			}
		}
		return claimed
	}
	for ns, n := range grants {
		claimed[ns] = min(n, len(rows))
	}
	return claimed
}

// spend spends n[ns] tokens of each namespace's bucket now (n[ns] < 0
// gives tokens back). The caller must not hold b.mu.
func (b *Backpressure) spend(n map[string]int) {
	t := b.now()
	b.mu.Lock()
	b.spendLocked(n, t)
	b.mu.Unlock()
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
