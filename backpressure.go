// Package backpressure plans fair, per-tenant, headroom-capped claims from a
// transactional outbox.
//
// Most callers need three calls: build a [Backpressure] once per node with
// [New], from a [Config] (the batch size B and the quotas) and the node's
// [OwnedShardFraction]; then call [Sweep] (or [SweepN], with a smaller
// budget, when fewer workers are free) against a store that implements
// [OutboxStore], and run the rows it returns. Each sweep claims at most B
// rows in one atomic claim; rows it does not claim stay Pending, untouched,
// for a later sweep, so the store's exactly-once guarantee is never
// weakened.
//
// A sweep gives every namespace (tenant) with demand an equal share of the
// batch before any namespace can take more, splits a namespace's grant
// equally over its routes (task queues), rotates the remainder from sweep
// to sweep, and never lets a namespace exceed its per-node ceiling
// ⌈quota × owned/shardCount⌉ of concurrently claimed rows. [Backpressure.Plan]
// is the same planner without I/O, and the returned [Plan] reports, per
// namespace, what was granted and what was held and why.
//
// [BackpressureGate] checks, separately, whether a channel's advisory
// backpressure actually protects its consumer.
package backpressure

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
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

	// Apportionment is the rule that turns a namespace's quota into this
	// node's ceiling from its owned shards alone; every node of a cluster
	// must use the same one. The zero value, [ApportionCeil], is
	// ⌈q × owned/shardCount⌉; [ApportionShares] is tighter cluster-wide
	// (exactly q when q ≥ shardCount). Other values are rejected.
	Apportionment Apportionment
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
	apportion    Apportionment

	mu     sync.Mutex // guards shards
	shards shardState

	// sem serialises sweeps and guards everything below. A channel rather
	// than a mutex so that Sweep can give up waiting when its ctx is done.
	sem chan struct{}

	nsCursor    string            // last namespace that got a remainder unit
	nsCursorSet bool              // whether nsCursor is meaningful
	routeCursor map[string]string // namespace → last task queue that got a remainder unit
	hints       sweepHints        // how the next sweep counts (sweep.go)
	scratch     scratch
}

// shardState is a fraction with what Sweep derives from it and the quotas:
// the deepest pending count a plan can use (see pendingCountCap) and the
// number of quotas whose per-node ceiling is 0 (paused namespaces, for
// windowSize).
type shardState struct {
	f            OwnedShardFraction
	deepCap      int
	zeroCeilings int
}

// errNotNew is what Sweep and Plan return for a Backpressure not built by New.
var errNotNew = fmt.Errorf("%w: Backpressure not built with New", ErrInvalidConfig)

// errNilStore is what Sweep returns for a nil OutboxStore.
var errNilStore = fmt.Errorf("%w: nil OutboxStore", ErrInvalidConfig)

// New returns a Backpressure for a node owning the shards of f.
//
// It returns an error matching [ErrInvalidConfig] (a *[ConfigError] naming
// the field) if BatchSize < 1, if DefaultQuota is 0 or negative other than
// [Unlimited], if a Quotas value is negative other than Unlimited, or if a
// Quotas key is a namespace no row can have (one [ValidateRoute] rejects:
// "", a NUL byte, invalid UTF-8, over [MaxNamespaceBytes]); and one matching
// [ErrInvalidShards] if f is the zero OwnedShardFraction.
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
	if !validApportionment(cfg.Apportionment) {
		return nil, &ConfigError{Field: "Apportionment", Value: int(cfg.Apportionment), Reason: "must be ApportionCeil or ApportionShares"}
	}
	for ns, q := range cfg.Quotas {
		field := "Quotas[" + strconv.Quote(ns) + "]"
		if err := ValidateRoute(Route{Namespace: ns}); err != nil {
			var re *RouteError
			errors.As(err, &re)
			return nil, &ConfigError{Field: field, Value: q, Reason: "no row can have this namespace: it " + re.Reason}
		}
		if q < 0 && q != Unlimited {
			return nil, &ConfigError{Field: field, Value: q, Reason: "must be at least 0 (paused), or Unlimited"}
		}
	}
	b := &Backpressure{
		batchSize:    cfg.BatchSize,
		defaultQuota: cfg.DefaultQuota,
		quotas:       maps.Clone(cfg.Quotas),
		apportion:    cfg.Apportionment,
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
// namespace: OwnedShards().CeilingFor(namespace, Quota(namespace),
// Config.Apportionment), by default ⌈q × owned/shardCount⌉, or [Unlimited].
func (b *Backpressure) Ceiling(namespace string) int {
	return b.OwnedShards().CeilingFor(namespace, b.Quota(namespace), b.apportion)
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
		if c := f.ceilingBound(q, b.apportion); c != Unlimited {
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
	st.deepCap = max(1, min(b.batchSize, m))
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
	b.advanceCursors(false)
	return p, nil
}
