package backpressure

import (
	"errors"
	"fmt"

	"github.com/outboxkit/backpressure/outbox"
)

// Sentinel errors. Match them with [errors.Is]; the typed errors below carry
// the details and match the sentinel of their kind.
var (
	// ErrInvalidShards reports an owned-shard set that cannot exist
	// (outbox.ErrInvalidShards).
	ErrInvalidShards = outbox.ErrInvalidShards
	// ErrInvalidConfig reports a setting that cannot hold: a Config that
	// New rejects, or a BackpressureGate that cannot exist
	// (outbox.ErrInvalidConfig).
	ErrInvalidConfig = outbox.ErrInvalidConfig
	// ErrNotSupported is what a store returns from an optional extension
	// (see [Counter]) for a request it does not serve; Sweep then does
	// without the extension. It never reaches Sweep's caller
	// (outbox.ErrNotSupported).
	ErrNotSupported = outbox.ErrNotSupported
	// ErrInvalidSnapshot reports a Snapshot that Plan rejects.
	ErrInvalidSnapshot = errors.New("backpressure: invalid snapshot")
	// ErrStore wraps every error a store returned during Sweep, and every
	// answer of a store that breaks its contract (a *StoreError wrapping a
	// *SnapshotError: see [StoreError]).
	ErrStore = errors.New("backpressure: store failed")
)

// ShardError describes an invalid owned-shard set: [outbox.ShardError].
type ShardError = outbox.ShardError

// ConfigError describes a setting that cannot hold: [outbox.ConfigError].
type ConfigError = outbox.ConfigError

// SnapshotError describes a malformed Snapshot. It matches
// [ErrInvalidSnapshot].
type SnapshotError struct {
	Namespace string
	TaskQueue string // the route's task queue; "" also for a namespace's claimed count or the budget
	Count     int
	Reason    string
}

// Error names the offending entry of the snapshot and why Plan rejects it.
func (e *SnapshotError) Error() string {
	if e.Namespace == "" && e.TaskQueue == "" {
		return fmt.Sprintf("backpressure: invalid snapshot: %s (%d)", e.Reason, e.Count)
	}
	if e.TaskQueue == "" {
		return fmt.Sprintf("backpressure: invalid snapshot: namespace %q (count %d): %s", e.Namespace, e.Count, e.Reason)
	}
	return fmt.Sprintf("backpressure: invalid snapshot: route %q/%q (count %d): %s", e.Namespace, e.TaskQueue, e.Count, e.Reason)
}

// Is reports whether target is [ErrInvalidSnapshot].
func (e *SnapshotError) Is(target error) bool { return target == ErrInvalidSnapshot }

// StoreError wraps an error returned by an OutboxStore during Sweep, naming
// the call that failed. It matches [ErrStore] and unwraps to the store's
// error, so errors.Is(err, context.Canceled) works through it.
//
// A store whose answer breaks its contract is its own kind of failure: a
// StoreError whose Err is a *[SnapshotError] saying what broke, so that
// errors.As(err, new(*SnapshotError)) finds it, and it matches both
// ErrStore and [ErrInvalidSnapshot] (a Snapshot passed to Plan matches
// only the latter; a store that failed, only the former). Sweep reports
// so counts that Plan would reject (Op the count call that returned them),
// a window claim's answer that breaks its rules (Op "ClaimOutboxWindow"),
// and ClaimOutboxRowsScoped's rows beyond the claims' limits, of a route
// not asked for or out of the claims' order (Op "ClaimOutboxRowsScoped";
// a route is checked only on rows with a Route method, as outbox.Row
// has). Rows a claim returned stay claimed until their leases expire,
// unless the sweep ran in a TxSweeper's transaction.
type StoreError struct {
	Op  string // the failed call: "CountClaimedOutboxRows", "CountPendingOutboxRows", "CountOutboxRows" ([Counter]), "ClaimOutboxRowsScoped" or "InSweepTx" ([TxSweeper])
	Err error
}

// Error names the store call that failed and the store's error.
func (e *StoreError) Error() string { return "backpressure: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrStore].
func (e *StoreError) Is(target error) bool { return target == ErrStore }
