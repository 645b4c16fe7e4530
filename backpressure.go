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
// [BackpressureGate.Mode] and [Mode]. Errors: a sentinel per kind of
// bad input or failure, matched with [errors.Is], and a typed error per
// kind carrying the details, matched with [errors.As] (the gate's verdict
// is the typed error alone); a call that rejects its input leaves its
// receiver unchanged. [MaxShardCount] and the weight bound (2^20) bound inputs a caller
// may size; a route's limits are package outbox's, beside the message's.
// Mechanism is in docs/planner.md and docs/gate.md. Time is read only
// through [Config].Clock.
package backpressure

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

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
	mu    sync.Mutex // guards set, rates and adapt
	set   settings
	rates rateState // token buckets (rate.go)
	// adapt is the adaptive ceilings and holds (adaptive.go); adaptOn is
	// len(adapt) > 0, read by plans without b.mu.
	adapt   map[string]adaptState
	adaptOn atomic.Bool

	e engine // the sweep engine (engine.go): rotation, hints, reads ahead, claims in flight
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
// is a namespace no row can have (one [outbox.Route.Validate] rejects: "", a NUL
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
	b := &Backpressure{set: newSettings(c, f)}
	b.e = newEngine(b)
	b.rates.dflt.at = b.now() // every bucket starts empty now
	return b, nil
}

// newAt is New with cfg.Clock set to clock (for tests).
func newAt(cfg Config, f OwnedShardFraction, clock func() time.Time) (*Backpressure, error) {
	cfg.Clock = clock
	return New(cfg, f)
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
	if b == nil || b.e.sem == nil {
		return errNotNew
	}
	return b.SetConfigAt(cfg, b.now())
}

// SetConfigAt is [Backpressure.SetConfig] at time t: the rate buckets (see
// [Rate]) refill under the old configuration up to t and under cfg after
// it; a bucket keeps its tokens, up to cfg's burst.
func (b *Backpressure) SetConfigAt(cfg Config, t time.Time) error {
	if b == nil || b.e.sem == nil {
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

// SetOwnedShards installs a new owned-shard fraction, for when the
// membership system moves shards to or from this node. A sweep in progress
// finishes with the fraction it started with; the next sweep uses f. It
// returns an error matching [ErrInvalidShards], and changes nothing, if f is
// the zero OwnedShardFraction. On a nil Backpressure, or one not built with
// [New], it returns an error matching [ErrInvalidConfig], as SetConfig does.
func (b *Backpressure) SetOwnedShards(f OwnedShardFraction) error {
	if b == nil || b.e.sem == nil {
		return errNotNew
	}
	return b.SetOwnedShardsAt(f, b.now())
}

// SetOwnedShardsAt is [Backpressure.SetOwnedShards] at time t: the rate
// buckets (see [Rate]) refill at the old fraction's rate up to t and at f's
// after it, so that a node handing shards to another never lets the two
// refill for the same shards at once.
func (b *Backpressure) SetOwnedShardsAt(f OwnedShardFraction, t time.Time) error {
	if b == nil || b.e.sem == nil {
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
	if b == nil || b.e.sem == nil {
		return Plan{}, errNotNew
	}
	return b.PlanAt(s, b.now())
}

// PlanAt is [Backpressure.Plan] at time t: rate-limited namespaces (see
// [Rate]) plan with the tokens their buckets hold at t. It spends no token:
// the rows a claim returns do, through [Backpressure.SpendTokensAt].
func (b *Backpressure) PlanAt(s Snapshot, t time.Time) (Plan, error) {
	if b == nil || b.e.sem == nil {
		return Plan{}, errNotNew
	}
	return b.e.planAt(s, t)
}
