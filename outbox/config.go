package outbox

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/outboxkit/backpressure/internal/limits"
)

// The planner's settings and shard sets are checked here, where every store
// can check them too; package backpressure aliases these names.

// Sentinel errors of a setting or a shard set that cannot hold, and of an
// optional store extension. Match them with [errors.Is].
var (
	// ErrInvalidShards reports an owned-shard set that cannot exist.
	ErrInvalidShards = errors.New("backpressure: invalid owned shards")
	// ErrInvalidConfig reports a setting that cannot hold: a Config that
	// New rejects, or a BackpressureGate that cannot exist.
	ErrInvalidConfig = errors.New("backpressure: invalid config")
	// ErrNotSupported is what a store returns from an optional extension
	// (see [Counter]) for a request it does not serve; Sweep then does
	// without the extension. It never reaches Sweep's caller.
	ErrNotSupported = errors.New("backpressure: not supported by the store")
)

// ShardError describes an invalid owned-shard set. It matches
// [ErrInvalidShards].
type ShardError struct {
	Shard      int // the offending shard id, or -1 when the shard count itself is wrong
	ShardCount int
	Reason     string
}

// Error names the shard (or the shard count) and why the set cannot exist.
func (e *ShardError) Error() string {
	if e.Shard < 0 {
		return fmt.Sprintf("backpressure: invalid owned shards: %s (shard count %d)", e.Reason, e.ShardCount)
	}
	return fmt.Sprintf("backpressure: invalid owned shards: %s: shard %d of %d", e.Reason, e.Shard, e.ShardCount)
}

// Is reports whether target is [ErrInvalidShards].
func (e *ShardError) Is(target error) bool { return target == ErrInvalidShards }

// ConfigError describes a setting that cannot hold: a [backpressure.Config] field that
// New or SetConfig rejects, or a [backpressure.BackpressureGate] field that Validate
// rejects. It matches [ErrInvalidConfig].
type ConfigError struct {
	Field  string // e.g. "BatchSize", `Quotas["acme"]`, "BackpressureGate.HighWatermark"
	Value  int
	Reason string
	// Float is the value of a float field (Rate.PerSecond), whose Value is 0.
	Float float64
	float bool
}

// Error names the field, its value and why it cannot hold.
func (e *ConfigError) Error() string {
	if e.float {
		return fmt.Sprintf("backpressure: invalid config: %s = %v: %s", e.Field, e.Float, e.Reason)
	}
	return fmt.Sprintf("backpressure: invalid config: %s = %d: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Rate limits how fast a namespace's rows are started (claimed), cluster-wide,
// as a token bucket: PerSecond tokens are added each second up to Burst, and
// claiming a row spends one. The zero Rate means no rate limit. A node owning
// o of the n shards runs a bucket of its own with
//
//	rate  r_node = PerSecond × o/n
//	burst b_node = ⌈Burst × o/n⌉   (exact in integers; 0 when o = 0)
//
// so the node bursts b_node ≥ 1 rows when it owns any shard, and the
// per-node bursts of nodes owning disjoint shards sum to at most
// Burst + k − 1 for k nodes owning shards. The buckets share no counter, and
// over any window of length T the rows started cluster-wide are
//
//	started(T) ≤ PerSecond·T + Burst + (k − 1)
//
// for k the nodes that owned shards during the window, as long as no two nodes
// own one shard at once (the same condition ceilings need), whatever the
// hand-offs of shards between the nodes in the window; a node's bucket starts
// empty when [backpressure.New] builds it, so a restarted node adds no burst either. The
// bound is exact up to floating-point rounding of the refill (relative error
// below 1e-12).
//
// Rates are independent of quotas and weights: a namespace's demand is
// min(headroom, tokens, pending), so waiting for tokens never holds a
// concurrency slot, and the guaranteed slice and max-min fill share the
// budget over the rate-limited demands.
type Rate struct {
	// PerSecond is the cluster-wide rate, rows started per second: 0 (with
	// Burst 0) for no limit, else finite, above 0 and at most 1e9.
	PerSecond float64
	// Burst is the most rows started at once after an idle spell,
	// cluster-wide: 1 to 2^30 when PerSecond > 0, 0 when it is 0 (the
	// bound keeps a bucket's tokens exact in a float64).
	Burst int
}

// CheckRate returns nil when r is a valid [Rate], else a *[ConfigError]
// naming field+".PerSecond" or field+".Burst": the rule Config.Rates,
// Config.DefaultRate and [NamespaceSettings].Rate share.
func CheckRate(field string, r Rate) error {
	switch {
	case math.IsNaN(r.PerSecond) || math.IsInf(r.PerSecond, 0):
		return &ConfigError{Field: field + ".PerSecond", Float: r.PerSecond, float: true, Reason: "must be finite"}
	case r.PerSecond < 0 || r.PerSecond > limits.RatePerSecond:
		return &ConfigError{Field: field + ".PerSecond", Float: r.PerSecond, float: true, Reason: "must be between 0 (no limit) and 1e9"}
	case r.Burst < 0 || r.Burst > limits.Burst:
		return &ConfigError{Field: field + ".Burst", Value: r.Burst, Reason: "must be between 0 and " + strconv.Itoa(limits.Burst)}
	case r.PerSecond > 0 && r.Burst == 0:
		return &ConfigError{Field: field + ".Burst", Value: 0, Reason: "must be at least 1 when PerSecond is set: a bucket that holds no whole token never starts a row"}
	case r.PerSecond == 0 && r.Burst > 0:
		return &ConfigError{Field: field + ".Burst", Value: r.Burst, Reason: "must be 0 when PerSecond is 0 (no limit)"}
	}
	return nil
}

// CheckNamespace returns nil when namespace is one a row can have, else a
// *[ConfigError] of field with value, saying why ([Route.Validate]).
func CheckNamespace(field, namespace string, value int) error {
	if err := (Route{Namespace: namespace}).Validate(); err != nil {
		var re *RouteError
		errors.As(err, &re)
		return &ConfigError{Field: field, Value: value, Reason: "no row can have this namespace: it " + re.Reason}
	}
	return nil
}

// CheckQuota returns nil when q is a valid per-namespace quota (≥ 0, 0
// pausing, or [Unlimited]), else a *[ConfigError] of field.
func CheckQuota(field string, q int) error {
	if q < 0 && q != Unlimited {
		return &ConfigError{Field: field, Value: q, Reason: "must be at least 0 (paused), or Unlimited"}
	}
	return nil
}

// CheckWeight returns nil when w is a valid weight (1 to 2^20, the bound
// that keeps the planner's exact fractions within int64), else a
// *[ConfigError] of field.
func CheckWeight(field string, w int) error {
	if w < 1 || w > limits.Weight {
		return &ConfigError{Field: field, Value: w, Reason: "must be between 1 and " + strconv.Itoa(limits.Weight)}
	}
	return nil
}
