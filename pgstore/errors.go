package pgstore

import (
	"errors"
	"fmt"

	"github.com/outboxkit/backpressure"
)

// Sentinel errors. Match them with [errors.Is]; the typed errors below carry
// the details and match the sentinel of their kind.
var (
	// ErrLeaseLost reports a Settle or Retry whose token is not the row's
	// current live claim: the row was settled, retried, or its lease
	// expired (and it may have been claimed again). Nothing was changed.
	ErrLeaseLost = errors.New("pgstore: lease lost")
	// ErrNotFound reports a dispatch key that is not in the outbox.
	ErrNotFound = errors.New("pgstore: dispatch key not found")
	// ErrShardCountMismatch reports an owned-shard fraction whose shard
	// count is not the one the store places rows with, or an
	// Options.ShardCount other than the one the schema records. It also
	// matches [backpressure.ErrInvalidShards].
	ErrShardCountMismatch = errors.New("pgstore: shard count mismatch")
	// ErrInvalidOptions reports Options that New rejects.
	ErrInvalidOptions = errors.New("pgstore: invalid options")
	// ErrInvalidArgument reports an argument a call rejects before touching the
	// database: an empty dispatch key, a negative limit or delay, and so on.
	ErrInvalidArgument = errors.New("pgstore: invalid argument")
	// ErrSchemaTooNew reports a schema migrated by a newer version of this
	// package than the running one; the store refuses to use it.
	ErrSchemaTooNew = errors.New("pgstore: schema version is newer than this package")
	// ErrClosed reports a call on a Store after Close.
	ErrClosed = errors.New("pgstore: store is closed")
)

// LeaseLostError is the typed form of [ErrLeaseLost]: the key and the token
// that no longer hold the row.
type LeaseLostError struct {
	Op          string // "Settle" or "Retry"
	DispatchKey string
	Token       int64
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("pgstore: %s: lease lost: dispatch key %q, token %d is not the live claim", e.Op, e.DispatchKey, e.Token)
}

// Is reports whether target is [ErrLeaseLost].
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// ShardCountError is the typed form of [ErrShardCountMismatch]: an
// owned-shard fraction over another shard count than the store's, or, from
// [New] (Op "New"), an Options.ShardCount other than the one the schema
// records.
type ShardCountError struct {
	Op       string // the method that was called
	Store    int    // the store's shard count: the one recorded in the schema
	Fraction int    // the fraction's ShardCount(), or Options.ShardCount for New
}

func (e *ShardCountError) Error() string {
	if e.Op == "New" {
		return fmt.Sprintf("pgstore: New: shard count mismatch: the schema records %d shards, Options.ShardCount is %d", e.Store, e.Fraction)
	}
	return fmt.Sprintf("pgstore: %s: shard count mismatch: store places rows over %d shards, fraction is over %d", e.Op, e.Store, e.Fraction)
}

// Is reports whether target is [ErrShardCountMismatch] or
// [backpressure.ErrInvalidShards].
func (e *ShardCountError) Is(target error) bool {
	return target == ErrShardCountMismatch || target == backpressure.ErrInvalidShards
}

// OptionsError is the typed form of [ErrInvalidOptions]: the field and why.
type OptionsError struct {
	Field  string // e.g. "Schema", "ShardCount", "Lease"
	Reason string
}

func (e *OptionsError) Error() string {
	return fmt.Sprintf("pgstore: invalid options: %s: %s", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionsError) Is(target error) bool { return target == ErrInvalidOptions }

// ArgumentError is the typed form of [ErrInvalidArgument]: the call, the
// argument and why.
type ArgumentError struct {
	Op     string // the method that was called
	Arg    string // e.g. `msgs[3].DispatchKey`, "limit", "delay"
	Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("pgstore: %s: invalid %s: %s", e.Op, e.Arg, e.Reason)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// SchemaVersionError is the typed form of [ErrSchemaTooNew].
type SchemaVersionError struct {
	Schema string
	Found  int // the version recorded in the database
	Known  int // the newest version this package knows
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("pgstore: schema %q is at version %d, this package knows up to %d", e.Schema, e.Found, e.Known)
}

// Is reports whether target is [ErrSchemaTooNew].
func (e *SchemaVersionError) Is(target error) bool { return target == ErrSchemaTooNew }

// opError wraps a database error with the method that failed, keeping it
// matchable (errors.Is(err, context.Canceled), errors.As(err, *pgconn.PgError)).
func opError(op string, err error) error {
	return fmt.Errorf("pgstore: %s: %w", op, err)
}
