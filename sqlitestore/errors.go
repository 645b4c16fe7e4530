package sqlitestore

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with [errors.Is]; the typed errors below carry
// the details and match the sentinel of their kind.
var (
	// ErrLeaseLost reports a Settle or Retry whose token is not the row's
	// current live claim: the row was settled, retried, or its lease
	// expired (and it may have been claimed again). The call changed nothing.
	ErrLeaseLost = errors.New("sqlitestore: lease lost")
	// ErrNotFound reports a dispatch key with no row.
	ErrNotFound = errors.New("sqlitestore: row not found")
	// ErrShardCountMismatch reports a shard fraction or an Options.ShardCount
	// whose shard count differs from the one the store's rows are placed with.
	ErrShardCountMismatch = errors.New("sqlitestore: shard count mismatch")
	// ErrInvalidArgument reports a bad argument: an invalid option, message
	// (empty key or namespace; text that is not valid UTF-8 or holds a NUL
	// byte), claim limit, claim route (such text, or a route named twice) or
	// count cap. The call changed nothing.
	ErrInvalidArgument = errors.New("sqlitestore: invalid argument")
	// ErrSchemaTooNew reports a database migrated by a newer version of this
	// package than the running one.
	ErrSchemaTooNew = errors.New("sqlitestore: schema too new")
)

// LeaseLostError is the detail of [ErrLeaseLost]: which row, which token was
// offered, and what the row holds now.
type LeaseLostError struct {
	DispatchKey  string
	Token        int64 // the token offered
	CurrentToken int64 // the token of the row's current (or last) claim
	State        State // the row's state now
	Expired      bool  // the offered token is current but its lease has expired
}

func (e *LeaseLostError) Error() string {
	why := fmt.Sprintf("row is %s with token %d", e.State, e.CurrentToken)
	if e.Expired {
		why = "lease expired"
	}
	return fmt.Sprintf("sqlitestore: lease lost: row %q, token %d: %s", e.DispatchKey, e.Token, why)
}

// Is reports whether target is [ErrLeaseLost].
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// ShardCountError is the detail of [ErrShardCountMismatch].
type ShardCountError struct {
	Store int // the shard count the store's rows are placed with
	Given int // the shard count of the fraction or option offered
}

func (e *ShardCountError) Error() string {
	return fmt.Sprintf("sqlitestore: shard count mismatch: store places rows over %d shards, given %d", e.Store, e.Given)
}

// Is reports whether target is [ErrShardCountMismatch].
func (e *ShardCountError) Is(target error) bool { return target == ErrShardCountMismatch }

// ArgumentError is the detail of [ErrInvalidArgument].
type ArgumentError struct {
	Name   string // e.g. "Options.Lease", "msgs[3].DispatchKey", "claims[0].Limit"
	Value  any
	Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("sqlitestore: invalid argument: %s = %v: %s", e.Name, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// SchemaVersionError is the detail of [ErrSchemaTooNew].
type SchemaVersionError struct {
	Database int // the schema version found in the database
	Known    int // the newest schema version this package knows
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("sqlitestore: schema too new: database is at version %d, this package knows up to %d", e.Database, e.Known)
}

// Is reports whether target is [ErrSchemaTooNew].
func (e *SchemaVersionError) Is(target error) bool { return target == ErrSchemaTooNew }
