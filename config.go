package backpressure

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/outboxkit/backpressure/internal/limits"
	"github.com/outboxkit/backpressure/outbox"
)

// Config is the configuration of a [Backpressure]. [New] and
// [Backpressure.SetConfig] validate and copy it; a Config they reject
// changes nothing. The zero Config is invalid (BatchSize and DefaultQuota
// must be set); every other field's zero value is a usable default.
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
	// be ≥ 0 or Unlimited. A nil map means no overrides. The map is copied.
	Quotas map[string]int

	// Weights gives namespaces a larger share of each sweep's budget than
	// others: a namespace of weight w is granted w rows for every row of a
	// namespace of weight 1, until its demand or ceiling caps it (see
	// [Plan] for the exact rule). A namespace not listed has weight 1, so
	// a nil map plans every namespace alike. Values must be 1 to
	// 2^20. The map is copied. Routes inside a namespace are not
	// weighted.
	Weights map[string]int

	// Apportionment is the rule that turns a namespace's quota into this
	// node's ceiling from its owned shards alone; every node of a cluster
	// must use the same one. The zero value, [ApportionCeil], is
	// ⌈q × owned/shardCount⌉; [ApportionShares] is tighter cluster-wide
	// (exactly q when q ≥ shardCount). Other values are rejected.
	Apportionment Apportionment

	// Clock is the time source of every decision the Backpressure makes by
	// time: whether sweeps run back to back (SweepAhead reads ahead only
	// then), and the token buckets of rate limits. nil means [time.Now].
	// It is called with no lock held that a caller could need, possibly
	// from several goroutines, and its readings should not go backwards. A
	// test injects a clock it moves by hand; SetConfig replaces it.
	Clock func() time.Time

	// DefaultRate is the rate limit of every namespace not listed in Rates
	// (see [Rate]); the zero Rate means no rate limit.
	DefaultRate Rate

	// Rates overrides DefaultRate per namespace; a zero Rate lifts the
	// limit for that namespace. Each value is validated as a [Rate]. A nil
	// map means no overrides. The map is copied.
	Rates map[string]Rate
}

// maxWeight is the largest weight Config.Weights accepts, 2^20: the bound
// that keeps the planner's exact arithmetic within int64 (docs/planner.md).
const maxWeight = limits.Weight

// config is a validated Config, never changed once built: a sweep keeps the
// one it started with while SetConfig installs another.
type config struct {
	batchSize    int
	defaultQuota int
	quotas       map[string]int
	weights      map[string]int // only weights above 1
	apportion    Apportionment
	clock        func() time.Time // nil: time.Now
	defaultRate  Rate
	rates        map[string]Rate
}

// ceiling returns namespace's ceiling on a node owning f's shards.
func (c *config) ceiling(f OwnedShardFraction, namespace string) int {
	return f.CeilingFor(namespace, c.quota(namespace), c.apportion)
}

func (c *config) quota(namespace string) int {
	if q, ok := c.quotas[namespace]; ok {
		return q
	}
	return c.defaultQuota
}

func (c *config) weight(namespace string) int {
	if w, ok := c.weights[namespace]; ok {
		return w
	}
	return 1
}

// settings is what a sweep runs with: the config, the fraction, and what
// Sweep derives from both, once per change rather than once per sweep: the
// deepest pending count a plan can use (see pendingCountCap) and the number
// of quotas whose per-node ceiling is 0 (paused namespaces, for windowSize).
type settings struct {
	cfg          *config
	f            OwnedShardFraction
	deepCap      int
	zeroCeilings int
	paused       []string // the namespaces of zeroCeilings, sorted (for a window claim's skip)
	gen          uint64   // counts every SetConfig and SetOwnedShards: counts read ahead are for one gen
}

func newSettings(c *config, f OwnedShardFraction) settings {
	st := settings{cfg: c, f: f}
	deepest := c.deeperThan(c.batchSize)
	ceil := func(q int) int {
		if c := f.CeilingBound(q, c.apportion); c != Unlimited {
			return c
		}
		return deepest
	}
	m := ceil(c.defaultQuota)
	for ns, q := range c.quotas {
		m = max(m, ceil(q))
		if f.Ceiling(q) == 0 {
			st.zeroCeilings++
		}
		if c.ceiling(f, ns) == 0 {
			st.paused = append(st.paused, ns)
		}
	}
	slices.Sort(st.paused)
	st.deepCap = max(1, min(deepest, m))
	return st
}

// deeperThan returns how deep a budget of n rows needs pending counts to
// go: n, or n + 1 when some namespace is weighted (see pendingCountCap).
func (c *config) deeperThan(n int) int {
	if c.weights != nil && n < math.MaxInt {
		return n + 1
	}
	return n
}

// fullCap returns the deepest pending count a sweep of budget rows needs:
// pendingCountCap, or less for a smaller budget.
func (st settings) fullCap(budget int) int {
	return max(1, min(st.deepCap, st.cfg.deeperThan(budget)))
}

// newConfig validates cfg and copies it.
func newConfig(cfg Config) (*config, error) {
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
		field := "Quotas[" + strconv.Quote(ns) + "]"
		if err := outbox.CheckNamespace(field, ns, q); err != nil {
			return nil, err
		}
		if err := outbox.CheckQuota(field, q); err != nil {
			return nil, err
		}
	}
	if !cfg.Apportionment.Valid() {
		return nil, &ConfigError{Field: "Apportionment", Value: int(cfg.Apportionment), Reason: "must be ApportionCeil or ApportionShares"}
	}
	c := &config{batchSize: cfg.BatchSize, defaultQuota: cfg.DefaultQuota, quotas: maps.Clone(cfg.Quotas), apportion: cfg.Apportionment, clock: cfg.Clock}
	if err := outbox.CheckRate("DefaultRate", cfg.DefaultRate); err != nil {
		return nil, err
	}
	c.defaultRate = cfg.DefaultRate
	for ns, r := range cfg.Rates {
		field := "Rates[" + strconv.Quote(ns) + "]"
		if err := outbox.CheckNamespace(field, ns, r.Burst); err != nil {
			return nil, err
		}
		if err := outbox.CheckRate(field, r); err != nil {
			return nil, err
		}
	}
	if len(cfg.Rates) > 0 {
		c.rates = maps.Clone(cfg.Rates)
	}
	for ns, w := range cfg.Weights {
		field := "Weights[" + strconv.Quote(ns) + "]"
		if err := outbox.CheckNamespace(field, ns, w); err != nil {
			return nil, err
		}
		if err := outbox.CheckWeight(field, w); err != nil {
			return nil, err
		}
		if w > 1 {
			if c.weights == nil {
				c.weights = make(map[string]int)
			}
			c.weights[ns] = w
		}
	}
	return c, nil
}

// now reads the clock of b's current settings (Config.Clock, else
// time.Now). It is the one entry point for every decision b makes by time.
func (b *Backpressure) now() time.Time {
	if clock := b.current().cfg.clock; clock != nil {
		return clock()
	}
	return time.Now()
}

// current returns the settings the next sweep runs with. A zero
// Backpressure has none: it gets a zero config, whose accessors return 0.
func (b *Backpressure) current() settings {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.set.cfg == nil {
		return settings{cfg: &config{}}
	}
	return b.set
}
