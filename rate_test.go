package backpressure

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/internal/limits"
	"pgregory.net/rapid"
)

var epoch = time.Unix(1_700_000_000, 0)

// A step of the rate tests advances the clock by a multiple of 1/8 s, and
// rates are multiples of 1/8 per second over power-of-two shard counts, so
// every token count is a dyadic fraction that float64 holds exactly: the
// planner and the reference agree to the bit, and the bound needs no epsilon.
func genTick(t *rapid.T) time.Duration {
	return time.Duration(rapid.IntRange(0, 24).Draw(t, "ticks")) * (time.Second / 8)
}

func genRate(t *rapid.T, label string) Rate {
	if rapid.IntRange(0, 4).Draw(t, label+"None") == 0 {
		return Rate{}
	}
	return Rate{PerSecond: float64(rapid.IntRange(1, 160).Draw(t, label+"Eighths")) / 8, Burst: rapid.IntRange(1, 20).Draw(t, label+"Burst")}
}

func genPow2Fraction(t *rapid.T, label string) OwnedShardFraction {
	n := rapid.SampledFrom([]int{1, 2, 4, 8, 16}).Draw(t, label+"ShardCount")
	var owned []int
	for i := 0; i < n; i++ {
		if rapid.IntRange(0, 3).Draw(t, label+"Owns") > 0 {
			owned = append(owned, i)
		}
	}
	f, err := NewOwnedShardFraction(owned, n)
	if err != nil {
		t.Fatalf("NewOwnedShardFraction: %v", err)
	}
	return f
}

func withRates(t *rapid.T, cfg Config, names []string) Config {
	cfg.DefaultRate = genRate(t, "defaultRate")
	cfg.Rates = nil
	for _, ns := range names {
		if rapid.Bool().Draw(t, "hasRate") {
			if cfg.Rates == nil {
				cfg.Rates = map[string]Rate{}
			}
			cfg.Rates[ns] = genRate(t, "rate")
		}
	}
	return cfg
}

func namesOf(s Snapshot) []string {
	var names []string
	for _, rc := range s.Pending {
		names = append(names, rc.Route.Namespace)
	}
	for ns := range s.Claimed {
		names = append(names, ns)
	}
	names = slices.DeleteFunc(names, func(ns string) bool { return Route{Namespace: ns}.Validate() != nil })
	slices.Sort(names)
	return slices.Compact(names)
}

// TestPlanRatesReference: with rates, every plan equals the naive
// reference's (whose demand is min(headroom, tokens, pending), tokens from
// its literal buckets), and every report's tokens equal the reference
// buckets', over sweeps whose claims fill any part of their grants, with
// SetConfig and SetOwnedShards between them. So the guaranteed slice, the
// max-min fill and the rotation apply to the rate-limited demand, and a
// grant the claim did not fill spends no token.
func TestPlanRatesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		names := namesOf(w.snap)
		w.frac = genPow2Fraction(t, "frac")
		now := epoch
		w.cfg.Clock = func() time.Time { return now } // kept by every SetConfig below
		w.cfg = withRates(t, w.cfg, names)
		b, err := New(w.cfg, w.frac)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		ref := newRefPlanner(w.cfg, w.frac)
		rb := newRefBuckets(w.cfg, w.frac, names, now)
		for step := 0; step < 12; step++ {
			now = now.Add(genTick(t))
			switch rapid.IntRange(0, 5).Draw(t, "action") {
			case 0:
				cfg := withRates(t, w.cfg, names)
				if err := b.SetConfig(cfg); err != nil {
					t.Fatalf("step %d: SetConfig: %v", step, err)
				}
				rb.change(cfg, rb.f, now)
				ref.cfg, w.cfg = cfg, cfg
				continue
			case 1:
				f := genPow2Fraction(t, "newFrac")
				if err := b.SetOwnedShards(f); err != nil {
					t.Fatalf("step %d: SetOwnedShards: %v", step, err)
				}
				rb.change(rb.cfg, f, now)
				ref.fraction, w.frac = f, f
				continue
			}
			p, err := b.PlanAt(w.snap, now)
			if err != nil {
				t.Fatalf("step %d: PlanAt: %v", step, err)
			}
			ref.tokens = rb.whole(now)
			want := ref.plan(w.snap)
			if !slices.Equal(p.Claims, want) {
				t.Fatalf("step %d at %v: PlanAt claims\n%v\nreference (tokens %v)\n%v", step, now.Sub(epoch), p.Claims, ref.tokens, want)
			}
			for _, r := range p.Namespaces {
				if !slices.Contains(names, r.Namespace) {
					continue // a namespace no row can have: never planned
				}
				tk, refLimited := ref.tokens[r.Namespace]
				if refLimited != limited(r.Rate) || r.Tokens != tk {
					t.Fatalf("step %d: %s: Rate %v Tokens %d, reference limited %v tokens %d", step, r.Namespace, r.Rate, r.Tokens, refLimited, tk)
				}
				if r.Reason == HeldRate && (r.Tokens != r.Granted || r.Granted >= r.Headroom && r.Headroom != Unlimited) {
					t.Fatalf("step %d: %s held for rate with tokens %d granted %d headroom %d", step, r.Namespace, r.Tokens, r.Granted, r.Headroom)
				}
				if refLimited && r.Granted > r.Tokens {
					t.Fatalf("step %d: %s granted %d > tokens %d", step, r.Namespace, r.Granted, r.Tokens)
				}
			}
			// The claim fills any part of each grant, a little later.
			started := map[string]int{}
			for _, c := range p.Claims {
				started[c.Route.Namespace] += rapid.IntRange(0, c.Limit).Draw(t, "filled")
			}
			now = now.Add(time.Duration(rapid.IntRange(0, 2).Draw(t, "claimTicks")) * (time.Second / 8))
			if err := b.SpendTokensAt(started, now); err != nil {
				t.Fatalf("step %d: SpendTokensAt: %v", step, err)
			}
			rb.spend(started, now)
		}
	})
}

// clusterNode is one node of the model cluster of TestRateClusterBound.
type clusterNode struct {
	b     *Backpressure
	owned []int
}

// TestRateClusterBound: nodes owning disjoint shard sets, each with its own
// buckets and no shared counter, start at most PerSecond·T + Burst + (k − 1)
// rows of a namespace over any window of length T, k the nodes owning shards
// at the window's start, whatever the hand-offs of shards between nodes
// (one node releases a shard before another takes it, as a fenced membership
// does), restarts of nodes (a new Backpressure), and claims that fill part
// of their grants.
func TestRateClusterBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const shardCount = 8
		rate := Rate{PerSecond: float64(rapid.IntRange(1, 80).Draw(t, "eighths")) / 8, Burst: rapid.IntRange(1, 12).Draw(t, "burst")}
		cfg := Config{BatchSize: rapid.IntRange(1, 40).Draw(t, "batch"), DefaultQuota: Unlimited, Rates: map[string]Rate{"a": rate}, DefaultRate: rate}
		nNodes := rapid.IntRange(1, 4).Draw(t, "nodes")
		now := epoch
		clock := func() time.Time { return now }
		nodes := make([]*clusterNode, nNodes)
		newNode := func(owned []int) *Backpressure {
			f, err := NewOwnedShardFraction(owned, shardCount)
			if err != nil {
				t.Fatalf("fraction: %v", err)
			}
			b, err := newAt(cfg, f, clock)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return b
		}
		for i := range nodes {
			nodes[i] = &clusterNode{}
		}
		for s := 0; s < shardCount; s++ {
			if o := rapid.IntRange(-1, nNodes-1).Draw(t, "owner"); o >= 0 {
				nodes[o].owned = append(nodes[o].owned, s)
			}
		}
		for _, n := range nodes {
			n.b = newNode(n.owned)
		}
		owning := func() int {
			k := 0
			for _, n := range nodes {
				if len(n.owned) > 0 {
					k++
				}
			}
			return k
		}
		// A big backlog on both namespaces (b runs at the default rate).
		snap := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 1 << 20}, {Route: Route{Namespace: "b", TaskQueue: ""}, Count: 1 << 20}}}
		type event struct {
			at      time.Time
			k       int // nodes owning shards just before it
			started map[string]int
		}
		var events []event
		for step := 0; step < 40; step++ {
			now = now.Add(genTick(t))
			ev := event{at: now, k: owning()}
			i := rapid.IntRange(0, nNodes-1).Draw(t, "node")
			n := nodes[i]
			switch rapid.IntRange(0, 5).Draw(t, "action") {
			case 0: // hand a shard from node i to node j: release, then take
				j := rapid.IntRange(0, nNodes-1).Draw(t, "to")
				if len(n.owned) == 0 || i == j {
					continue
				}
				s := rapid.SampledFrom(n.owned).Draw(t, "shard")
				n.owned = slices.DeleteFunc(n.owned, func(x int) bool { return x == s })
				f, _ := NewOwnedShardFraction(n.owned, shardCount)
				if err := n.b.SetOwnedShards(f); err != nil {
					t.Fatal(err)
				}
				if rapid.Bool().Draw(t, "later") {
					now = now.Add(genTick(t))
				}
				m := nodes[j]
				m.owned = append(m.owned, s)
				f, _ = NewOwnedShardFraction(m.owned, shardCount)
				if err := m.b.SetOwnedShards(f); err != nil {
					t.Fatal(err)
				}
				continue
			case 1: // the node is killed and restarts with its shards
				n.b = newNode(n.owned)
				continue
			}
			snap.Budget = rapid.IntRange(0, cfg.BatchSize).Draw(t, "budget")
			p, err := n.b.PlanAt(snap, now)
			if err != nil {
				t.Fatal(err)
			}
			ev.started = map[string]int{}
			for _, c := range p.Claims {
				filled := c.Limit // mostly greedy, to press on the bound
				if rapid.IntRange(0, 3).Draw(t, "short") == 0 {
					filled = rapid.IntRange(0, c.Limit).Draw(t, "filled")
				}
				ev.started[c.Route.Namespace] += filled
			}
			if err := n.b.SpendTokensAt(ev.started, now); err != nil {
				t.Fatal(err)
			}
			events = append(events, ev)
		}
		for _, ns := range []string{"a", "b"} {
			for i := range events {
				sum := 0
				for j := i; j < len(events); j++ {
					sum += events[j].started[ns]
					T := events[j].at.Sub(events[i].at).Seconds()
					bound := rate.PerSecond*T + float64(rate.Burst+events[i].k-1)
					if float64(sum) > bound {
						t.Fatalf("namespace %s: %d rows started in [%v, %v] (T = %vs), bound r·T + b + k − 1 = %v (k = %d)",
							ns, sum, events[i].at.Sub(epoch), events[j].at.Sub(epoch), T, bound, events[i].k)
					}
				}
			}
		}
	})
}

// TestRateSteps pins a bucket's arithmetic on one node owning half the
// shards of a namespace limited to 4 rows/s with a burst of 5: the node runs
// at 2 rows/s with a burst of ⌈5/2⌉ = 3, starts empty, and a claim that
// fills less than its grant spends only what it claimed.
func TestRateSteps(t *testing.T) {
	f, _ := NewOwnedShardFraction([]int{0, 1}, 4)
	now := epoch
	b, err := newAt(Config{BatchSize: 10, DefaultQuota: 6, Rates: map[string]Rate{"a": {PerSecond: 4, Burst: 5}}}, f, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	snap := Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 100}, {Route: Route{Namespace: "free", TaskQueue: "q"}, Count: 100}}}
	for i, s := range []struct {
		at      time.Duration
		claimed int // rows of "a" already claimed (headroom 3 − claimed)
		started int // rows of "a" the claim returns
		tokens  int
		granted int
		reason  HoldReason
	}{
		{0, 0, 0, 0, 0, HeldRate},                       // starts empty
		{250 * time.Millisecond, 0, 0, 0, 0, HeldRate},  // 0.5 tokens
		{500 * time.Millisecond, 0, 1, 1, 1, HeldRate},  // 1 token, spent
		{time.Second, 0, 0, 1, 1, HeldRate},             // 1 token: the claim found none
		{2 * time.Second, 0, 0, 3, 3, HeldAtCeiling},    // capped at the burst 3; headroom 3
		{2 * time.Second, 1, 1, 3, 2, HeldAtCeiling},    // headroom 2 binds, 1 spent
		{2250 * time.Millisecond, 0, 3, 2, 2, HeldRate}, // 2.5 tokens; a stale count claims 3: debt
		{2750 * time.Millisecond, 0, 0, 0, 0, HeldRate}, // −0.5 + 1 = 0.5
		{3 * time.Second, 0, 0, 1, 1, HeldRate},
	} {
		now = epoch.Add(s.at)
		snap.Claimed = map[string]int{"a": s.claimed}
		p, err := b.PlanAt(snap, now)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := p.Namespace("a")
		if r.Tokens != s.tokens || r.Granted != s.granted || r.Reason != s.reason {
			t.Fatalf("step %d at %v: report %+v, want tokens %d granted %d reason %v", i, s.at, r, s.tokens, s.granted, s.reason)
		}
		if fr, _ := p.Namespace("free"); limited(fr.Rate) || fr.Tokens != 0 || fr.Granted != 3 {
			t.Fatalf("step %d: unlimited namespace %+v", i, fr)
		}
		if err := b.SpendTokensAt(map[string]int{"a": s.started}, now); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRateConfigErrors: every rate outside its limits is rejected by New and
// SetConfig with a *ConfigError naming the field, and SetConfig then
// changes nothing.
func TestRateConfigErrors(t *testing.T) {
	f, _ := AllShards(4)
	good := Config{BatchSize: 5, DefaultQuota: 5, DefaultRate: Rate{PerSecond: 1, Burst: 1}}
	b, err := New(good, f)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r     Rate
		field string
	}{
		{Rate{PerSecond: math.NaN(), Burst: 1}, "PerSecond"},
		{Rate{PerSecond: math.Inf(1), Burst: 1}, "PerSecond"},
		{Rate{PerSecond: -1, Burst: 1}, "PerSecond"},
		{Rate{PerSecond: 2e9, Burst: 1}, "PerSecond"},
		{Rate{PerSecond: 1, Burst: 0}, "Burst"},
		{Rate{PerSecond: 1, Burst: -1}, "Burst"},
		{Rate{PerSecond: 1, Burst: limits.Burst + 1}, "Burst"},
		{Rate{PerSecond: 0, Burst: 3}, "Burst"},
	} {
		for _, cfg := range []Config{
			{BatchSize: 5, DefaultQuota: 5, DefaultRate: c.r},
			{BatchSize: 5, DefaultQuota: 5, Rates: map[string]Rate{"acme": c.r}},
		} {
			want := "DefaultRate." + c.field
			if cfg.Rates != nil {
				want = `Rates["acme"].` + c.field
			}
			_, err := New(cfg, f)
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Field != want {
				t.Fatalf("New(%+v) = %v, want a *ConfigError for %s", c.r, err, want)
			}
			if err := b.SetConfig(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("SetConfig(%+v) = %v", c.r, err)
			}
			if got := b.Rate("acme"); got != good.DefaultRate {
				t.Fatalf("after a rejected SetConfig, Rate = %v", got)
			}
		}
	}
	if _, err := New(Config{BatchSize: 5, DefaultQuota: 5, Rates: map[string]Rate{"": {PerSecond: 1, Burst: 1}}}, f); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("empty namespace key: %v", err)
	}
	if err := b.SpendTokensAt(map[string]int{"acme": -1}, epoch); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("negative spend: %v", err)
	}
	if _, err := New(Config{BatchSize: 5, DefaultQuota: 5, DefaultRate: Rate{PerSecond: math.NaN(), Burst: 1}}, f); fmt.Sprint(err) != "backpressure: invalid config: DefaultRate.PerSecond = NaN: must be finite" {
		got := fmt.Sprint(err)
		t.Fatalf("message %q", got)
	}
}

// shortStore claims at most half of each claim's limit (rounded up), as a
// store whose rows other claimers took would, and returns rows that say
// their route, as outbox.Row does.
type shortStore struct {
	pending map[Route]int
}

type routedRow struct{ r Route }

func (x routedRow) Route() Route { return x.r }

func (s *shortStore) CountClaimedOutboxRows(context.Context, OwnedShardFraction) (map[string]int, error) {
	return nil, nil
}

func (s *shortStore) CountPendingOutboxRows(_ context.Context, _ OwnedShardFraction, c int) ([]RouteCount, error) {
	var out []RouteCount
	for r, n := range s.pending {
		if n > 0 {
			out = append(out, RouteCount{Route: r, Count: min(n, c)})
		}
	}
	slices.SortFunc(out, cmpRoute)
	return out, nil
}

func (s *shortStore) ClaimOutboxRowsScoped(_ context.Context, _ OwnedShardFraction, cs []ScopedClaim) ([]routedRow, error) {
	var rows []routedRow
	for _, c := range cs {
		n := min((c.Limit+1)/2, s.pending[c.Route])
		s.pending[c.Route] -= n
		for range n {
			rows = append(rows, routedRow{c.Route})
		}
	}
	return rows, nil
}

// TestSweepSpendsClaimedRows: Sweep spends one token per row its claim
// returned, not per row granted.
func TestSweepSpendsClaimedRows(t *testing.T) {
	f, _ := AllShards(4)
	now := epoch
	b, err := newAt(Config{BatchSize: 100, DefaultQuota: Unlimited, DefaultRate: Rate{PerSecond: 10, Burst: 10}}, f, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	store := &shortStore{pending: map[Route]int{{Namespace: "a", TaskQueue: "q"}: 1000, {Namespace: "b", TaskQueue: "q"}: 1000}}
	now = now.Add(time.Second) // full buckets: 10 tokens each
	rows, p, err := Sweep(context.Background(), b, store)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Granted(); got != 20 || len(rows) != 10 {
		t.Fatalf("granted %d, claimed %d; want 20 and 10", got, len(rows))
	}
	p, err = b.PlanAt(Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 100}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 100}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Namespaces {
		if r.Tokens != 5 || r.Reason != HeldRate {
			t.Fatalf("after a claim that filled half: %+v, want 5 tokens left, held for rate", r)
		}
	}
}

// TestRateLogValue: a plan's log line counts the namespaces held for rate,
// as it counts those held at their ceiling, and a rate-limited namespace's
// report logs its rate, burst and tokens.
func TestRateLogValue(t *testing.T) {
	f, _ := AllShards(2)
	b, err := newAt(Config{BatchSize: 10, DefaultQuota: 5, Rates: map[string]Rate{"a": {PerSecond: 2, Burst: 3}}}, f, func() time.Time { return epoch })
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.PlanAt(Snapshot{Pending: []RouteCount{{Route: Route{Namespace: "a", TaskQueue: "q"}, Count: 9}, {Route: Route{Namespace: "b", TaskQueue: "q"}, Count: 9}}}, epoch.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	line := p.LogValue().String()
	if !strings.Contains(line, "held_rate=1") || !strings.Contains(line, "held_at_ceiling=1") {
		t.Fatalf("plan log %s", line)
	}
	r, _ := p.Namespace("a")
	if got := r.LogValue().String(); !strings.Contains(got, "rate=2 burst=3 tokens=2") || !strings.Contains(got, "reason=rate") {
		t.Fatalf("report log %s", got)
	}
}
