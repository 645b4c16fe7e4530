// Package backpressure plans fair, per-tenant, headroom-capped claims from a
// transactional outbox.
//
// Most callers need three calls: build a [Backpressure] once per node with
// [New], from a [Config] (the batch size B and the quotas) and the node's
// [OwnedShardFraction]; then call [Sweep] (or [SweepN], with a smaller
// budget, when fewer workers are free, or [SweepAhead], which reads the next
// sweep's counts while this sweep's claim runs) against a store that
// implements [OutboxStore], and run the rows it returns. Each sweep claims
// at most B rows in one atomic claim; rows it does not claim stay Pending,
// untouched, for a later sweep, so the store's guarantee, each row settled
// exactly once (and run at least once), is never weakened.
//
// A sweep gives every namespace (tenant) with demand an equal share of the
// batch, or a share in proportion to its weight, before any namespace can
// take more, splits a namespace's grant equally over its routes (task
// queues), rotates the remainder from sweep to sweep, and never lets a
// namespace exceed its per-node ceiling ⌈quota × owned/shardCount⌉ of
// concurrently claimed rows. A namespace may also have a cluster-wide
// [Rate] with a burst: a node runs its share, r × owned/shardCount per
// second, in a token bucket, and a namespace's demand is then
// min(headroom, tokens, pending). Quotas, weights, rates and the batch size
// change at run time with [Backpressure.SetConfig], which keeps the
// rotation.
// [Backpressure.Plan] is the same planner without I/O, and the returned [Plan] reports, per
// namespace, what was granted and what was held and why.
//
// [BackpressureGate] checks, separately, whether a channel's advisory
// backpressure actually protects its consumer (seed 003's design card);
// package [github.com/outboxkit/backpressure/handoff] holds the instruments
// that check the gate's premises.
//
// What is exported, and why. The planner: [Backpressure], [Config], [New],
// [Snapshot], [Plan] and its [NamespaceReport] with a [HoldReason], and
// [Rate] for rate limits. The
// sweep: [Sweep], [SweepN], [SweepAhead] and the store contract they call,
// [OutboxStore] with its optional extensions [Counter] and [TxSweeper] and
// the values they exchange ([Route], [RouteCount], [ScopedClaim],
// [CountParams]). Ceilings: [OwnedShardFraction], [ShardFor], [Unlimited],
// [Apportionment]. The gate: [BackpressureGate], [AdvisoryOverflowError],
// [DispatchBackpressureMode] and [Mode]. Errors: a sentinel per kind of
// bad input or failure, matched with [errors.Is], and a typed error per
// kind carrying the details, matched with [errors.As] (the gate's verdict
// is the typed error alone); a call that rejects its input leaves its
// receiver unchanged. [MaxShardCount] and the weight bound (2^20) bound inputs a caller
// may size; a route's limits are package outbox's, beside the message's.
// Mechanism is in docs/planner.md and docs/gate.md. Time is read only
// through [Config].Clock.
package backpressure

import (
	"github.com/outboxkit/backpressure/internal/limits"

	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
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

// Backpressure plans the claims of one dispatcher node. It holds the node's
// owned-shard fraction, its configuration, and the rotation cursors that
// carry the remainder units of integer shares from sweep to sweep, so that
// over several sweeps every unsatisfied namespace gets rows in proportion
// to its weight.
//
// A Backpressure is safe for concurrent use, and serialises plans: [Sweep]
// and [Backpressure.Plan] plan one at a time, because two concurrent plans
// on one node would both see the same headroom and could together exceed
// the ceiling ([SweepAhead] lets a claim run beside the next plan, which
// counts its grants as claimed). Use one Backpressure per node, for its lifetime: change its
// configuration with [Backpressure.SetConfig] and its shards with
// [Backpressure.SetOwnedShards], which keep the rotation. The zero value is
// not usable: call [New]. Sweep, Plan, SetConfig and SetOwnedShards on a
// nil or zero Backpressure return an error matching [ErrInvalidConfig] and
// change nothing; on a zero Backpressure the accessors answer for an empty
// configuration (BatchSize 0, Quota 0, Weight 1, the zero OwnedShards).
type Backpressure struct {
	mu  sync.Mutex // guards set
	set settings

	// sem serialises sweeps and guards everything below. A channel rather
	// than a mutex so that Sweep can give up waiting when its ctx is done.
	sem chan struct{}

	nsCursor    string            // last namespace that got a remainder unit
	nsCursorSet bool              // whether nsCursor is meaningful
	nsCursorAt  roundPos          // where in the round nsCursor got it
	routeCursor map[string]string // namespace → last task queue that got a remainder unit
	hints       sweepHints        // how the next sweep counts (sweep.go)
	ahead       *ahead            // the next sweep's counts, read ahead (ahead.go)
	reads       sync.WaitGroup    // read-aheads still running, used or not (for tests)
	lastEnd     time.Time         // when the last successful sweep returned
	lastDur     time.Duration     // and how long it took
	flights     flights           // claims in flight (sweep.go); its own lock
	planSeq     uint64            // plans installed by overlapped sweeps (sweep.go)
	scratch     scratch
	rates       rateState // token buckets (rate.go); guarded by mu
}

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
		if c := f.ceilingBound(q, c.apportion); c != Unlimited {
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

// errNotNew is what Sweep and Plan return for a Backpressure not built by New.
var errNotNew = fmt.Errorf("%w: Backpressure not built with New", ErrInvalidConfig)

// errNilStore is what Sweep returns for a nil OutboxStore.
var errNilStore = fmt.Errorf("%w: nil OutboxStore", ErrInvalidConfig)

// New returns a Backpressure for a node owning the shards of f.
//
// It returns an error matching [ErrInvalidConfig] (a *[ConfigError] naming
// the field) if BatchSize < 1, if DefaultQuota is 0 or negative other than
// [Unlimited], if a Quotas value is negative other than Unlimited, if a
// Weights value is outside 1 to 2^20, if DefaultRate or a Rates value
// breaks the limits of [Rate] (NaN, infinite, negative or above
// 1e9 PerSecond; Burst outside 1 to 2^30 with a rate, or
// not 0 without one), or if a Quotas, Weights or Rates key
// is a namespace no row can have (one [Route.Validate] rejects: "", a NUL
// byte, invalid UTF-8, over 255 bytes); and one matching
// [ErrInvalidShards] if f is the zero OwnedShardFraction.
func New(cfg Config, f OwnedShardFraction) (*Backpressure, error) {
	if f.ShardCount() < 1 {
		return nil, &ShardError{Shard: -1, ShardCount: f.ShardCount(), Reason: "fraction not built with NewOwnedShardFraction"}
	}
	c, err := newConfig(cfg)
	if err != nil {
		return nil, err
	}
	b := &Backpressure{
		set:         newSettings(c, f),
		sem:         make(chan struct{}, 1),
		routeCursor: make(map[string]string),
	}
	b.rates.dflt.at = b.rateNow() // every bucket starts empty now
	return b, nil
}

// newAt is New with cfg.Clock set to clock (for tests).
func newAt(cfg Config, f OwnedShardFraction, clock func() time.Time) (*Backpressure, error) {
	cfg.Clock = clock
	return New(cfg, f)
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
		if err := checkKey(field, ns, q); err != nil {
			return nil, err
		}
		if q < 0 && q != Unlimited {
			return nil, &ConfigError{Field: field, Value: q, Reason: "must be at least 0 (paused), or Unlimited"}
		}
	}
	if !validApportionment(cfg.Apportionment) {
		return nil, &ConfigError{Field: "Apportionment", Value: int(cfg.Apportionment), Reason: "must be ApportionCeil or ApportionShares"}
	}
	c := &config{batchSize: cfg.BatchSize, defaultQuota: cfg.DefaultQuota, quotas: maps.Clone(cfg.Quotas), apportion: cfg.Apportionment, clock: cfg.Clock}
	if err := checkRate("DefaultRate", cfg.DefaultRate); err != nil {
		return nil, err
	}
	c.defaultRate = cfg.DefaultRate
	for ns, r := range cfg.Rates {
		field := "Rates[" + strconv.Quote(ns) + "]"
		if err := checkKey(field, ns, r.Burst); err != nil {
			return nil, err
		}
		if err := checkRate(field, r); err != nil {
			return nil, err
		}
	}
	if len(cfg.Rates) > 0 {
		c.rates = maps.Clone(cfg.Rates)
	}
	for ns, w := range cfg.Weights {
		field := "Weights[" + strconv.Quote(ns) + "]"
		if err := checkKey(field, ns, w); err != nil {
			return nil, err
		}
		if w < 1 || w > maxWeight {
			return nil, &ConfigError{Field: field, Value: w, Reason: "must be between 1 and " + strconv.Itoa(maxWeight)}
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

// checkKey rejects a Quotas or Weights key that no row can have.
func checkKey(field, namespace string, value int) error {
	if err := (Route{Namespace: namespace}).Validate(); err != nil {
		var re *RouteError
		errors.As(err, &re)
		return &ConfigError{Field: field, Value: value, Reason: "no row can have this namespace: it " + re.Reason}
	}
	return nil
}

// SetConfig replaces b's configuration with cfg, keeping the rotation
// cursors, so fairness carries over the change. A sweep in progress
// finishes with the configuration it started with; the next sweep uses
// cfg. It validates cfg as [New] does and, if cfg is invalid, returns the
// same *[ConfigError] and changes nothing.
//
// Claimed rows are never revoked: a namespace whose new ceiling is below its
// claimed rows has no headroom, max(0, C − K) = 0, and its rows are held
// until enough claimed rows settle. A quota of 0 pauses a namespace and
// setting it back resumes it where the rotation stands. A
// [BackpressureGate] built from the old batch size (by
// handoff.WorkerQueueGateSweeps) must be built again.
func (b *Backpressure) SetConfig(cfg Config) error {
	if b == nil || b.sem == nil {
		return errNotNew
	}
	return b.SetConfigAt(cfg, b.rateNow())
}

// SetConfigAt is [Backpressure.SetConfig] at time t: the rate buckets (see
// [Rate]) refill under the old configuration up to t and under cfg after
// it; a bucket keeps its tokens, up to cfg's burst.
func (b *Backpressure) SetConfigAt(cfg Config, t time.Time) error {
	if b == nil || b.sem == nil {
		return errNotNew
	}
	c, err := newConfig(cfg)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleRates(b.set, t)
	gen := b.set.gen + 1
	b.set = newSettings(c, b.set.f)
	b.set.gen = gen
	return nil
}

// Config returns a copy of b's current configuration, with maps of its own
// (nil when empty; Weights lists only weights above 1) and the Clock it was
// given (nil for time.Now). Change it and pass
// it to [Backpressure.SetConfig]; concurrent changes made this way race, the
// last SetConfig wins.
func (b *Backpressure) Config() Config {
	c := b.current().cfg
	return Config{BatchSize: c.batchSize, DefaultQuota: c.defaultQuota, Quotas: maps.Clone(c.quotas), Weights: maps.Clone(c.weights), Apportionment: c.apportion, Clock: c.clock,
		DefaultRate: c.defaultRate, Rates: maps.Clone(c.rates)}
}

// now reads the clock of b's current settings (Config.Clock, else
// time.Now). It is the one entry point for every decision b makes by time.
func (b *Backpressure) now() time.Time {
	if clock := b.current().cfg.clock; clock != nil {
		return clock()
	}
	return time.Now()
}

// BatchSize returns the sweep's claim budget B: no sweep claims more rows.
func (b *Backpressure) BatchSize() int { return b.current().cfg.batchSize }

// Quota returns the cluster-wide quota of namespace: its override in
// Config.Quotas, else Config.DefaultQuota. It may be [Unlimited], or 0 for a
// paused namespace.
func (b *Backpressure) Quota(namespace string) int {
	return b.current().cfg.quota(namespace)
}

// Rate returns the cluster-wide rate limit of namespace: its override in
// Config.Rates, else Config.DefaultRate; the zero Rate means none.
func (b *Backpressure) Rate(namespace string) Rate {
	return b.current().cfg.rate(namespace)
}

// Weight returns the weight of namespace: Config.Weights[namespace], or 1.
func (b *Backpressure) Weight(namespace string) int {
	return b.current().cfg.weight(namespace)
}

// Ceiling returns this node's ceiling on concurrently claimed rows of
// namespace: OwnedShards().CeilingFor(namespace, Quota(namespace),
// Config.Apportionment), by default ⌈q × owned/shardCount⌉, or [Unlimited].
func (b *Backpressure) Ceiling(namespace string) int {
	st := b.current()
	return st.cfg.ceiling(st.f, namespace)
}

// OwnedShards returns the node's current owned-shard fraction.
func (b *Backpressure) OwnedShards() OwnedShardFraction {
	return b.current().f
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

// SetOwnedShards installs a new owned-shard fraction, for when the
// membership system moves shards to or from this node. A sweep in progress
// finishes with the fraction it started with; the next sweep uses f. It
// returns an error matching [ErrInvalidShards], and changes nothing, if f is
// the zero OwnedShardFraction. On a nil Backpressure, or one not built with
// [New], it returns an error matching [ErrInvalidConfig], as SetConfig does.
func (b *Backpressure) SetOwnedShards(f OwnedShardFraction) error {
	if b == nil || b.sem == nil {
		return errNotNew
	}
	return b.SetOwnedShardsAt(f, b.rateNow())
}

// SetOwnedShardsAt is [Backpressure.SetOwnedShards] at time t: the rate
// buckets (see [Rate]) refill at the old fraction's rate up to t and at f's
// after it, so that a node handing shards to another never lets the two
// refill for the same shards at once.
func (b *Backpressure) SetOwnedShardsAt(f OwnedShardFraction, t time.Time) error {
	if b == nil || b.sem == nil {
		return errNotNew
	}
	if f.ShardCount() < 1 {
		return &ShardError{Shard: -1, ShardCount: f.ShardCount(), Reason: "fraction not built with NewOwnedShardFraction"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleRates(b.set, t)
	gen := b.set.gen + 1
	b.set = newSettings(b.set.cfg, f)
	b.set.gen = gen
	return nil
}

// Plan plans one sweep from a snapshot of the node's outbox and advances
// the rotation cursors. It performs no I/O. It returns an error matching
// [ErrInvalidSnapshot] (a *[SnapshotError]) for a malformed snapshot, and
// then leaves b unchanged. See [Plan] for what the plan guarantees.
//
// Cost: O((R + N)·log B) for R routes and N namespaces when the snapshot's
// routes are sorted by namespace and task queue (as the stores return
// them), plus O(R·log R) to sort them otherwise, and with weights
// O(N·log W + N·log N) at most for W the largest weight; in steady state two
// allocations, the plan's two slices (scratch buffers grow to the largest
// snapshot seen and are reused).
func (b *Backpressure) Plan(s Snapshot) (Plan, error) {
	if b == nil || b.sem == nil {
		return Plan{}, errNotNew
	}
	return b.PlanAt(s, b.rateNow())
}

// PlanAt is [Backpressure.Plan] at time t: rate-limited namespaces (see
// [Rate]) plan with the tokens their buckets hold at t. It spends no token:
// the rows a claim returns do, through [Backpressure.SpendTokensAt].
func (b *Backpressure) PlanAt(s Snapshot, t time.Time) (Plan, error) {
	if b == nil || b.sem == nil {
		return Plan{}, errNotNew
	}
	b.sem <- struct{}{}
	defer func() { <-b.sem }()
	b.rates.planAt = t
	defer func() { b.rates.planAt = time.Time{} }()
	p, err := b.plan(s, b.current())
	if err != nil {
		return Plan{}, err
	}
	b.advanceCursors(false)
	return p, nil
}
