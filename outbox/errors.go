package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors every store returns. Match them with [errors.Is]; the
// typed errors below carry the details and match the sentinel of their kind.
var (
	// ErrLeaseLost reports a completion or extension whose lease is not the
	// row's current live claim: the row was completed already, or its
	// lease expired (and it may have been claimed again), or it was purged.
	// The row is unchanged.
	ErrLeaseLost = errors.New("outbox: lease lost")

	// ErrNotFound reports a dispatch key with no row.
	ErrNotFound = errors.New("outbox: row not found")

	// ErrClosed reports a call on a store that was closed, or a zero store
	// never opened. Every method of every store returns it in that case.
	ErrClosed = errors.New("outbox: store closed")

	// ErrInvalidMessage reports a message that breaks a limit of
	// [Message.Validate]. It also matches [ErrInvalidArgument]. Nothing
	// of the batch was written.
	ErrInvalidMessage = errors.New("outbox: invalid message")

	// ErrInvalidArgument reports any other argument or option a store
	// rejects. The call changed nothing.
	ErrInvalidArgument = errors.New("outbox: invalid argument")

	// ErrShardCountMismatch reports a shard fraction or a store option
	// whose shard count differs from the one the store's rows are placed
	// with.
	ErrShardCountMismatch = errors.New("outbox: shard count mismatch")

	// ErrSchemaTooNew reports a database migrated by a newer version of a
	// store than the running one.
	ErrSchemaTooNew = errors.New("outbox: schema too new")

	// ErrBadSettings reports shared settings that cannot be applied: a
	// settings row a store cannot read (not a JSON object of the
	// settings' fields) or whose values do not validate. A
	// [*SettingsFault] carries the detail.
	ErrBadSettings = errors.New("outbox: bad shared settings")

	// ErrTooManySettings reports more namespaces with shared settings
	// than [MaxSettings]: a PutSettings for a new namespace beyond the
	// cap (an [*ArgumentError] that also matches it), or a ListSettings
	// that found more rows than it returns (only writes by other means
	// than PutSettings can leave them).
	ErrTooManySettings = errors.New("outbox: more namespaces with shared settings than MaxSettings")
)

// SettingsFault is one namespace's shared settings that cannot be
// applied: its row cannot be read or does not validate. As an error it
// matches [ErrBadSettings]. A [NodeReport] lists the faults its node
// found in BadSettings.
type SettingsFault struct {
	Namespace string
	Version   int64  // the row's version
	Reason    string // why it cannot be applied
	// Held is set in a node report when the node had no last good
	// settings of Namespace and so holds its rows (as paused); when it is
	// false the node keeps applying its last good settings.
	Held bool `json:",omitempty"`
}

// Error names the namespace, the row's version and the fault.
func (f *SettingsFault) Error() string {
	return fmt.Sprintf("outbox: bad shared settings of namespace %q (version %d): %s", f.Namespace, f.Version, f.Reason)
}

// Is reports whether target is [ErrBadSettings].
func (f *SettingsFault) Is(target error) bool { return target == ErrBadSettings }

// LeaseLostError is the detail of [ErrLeaseLost].
type LeaseLostError struct {
	Op          string // the store method, e.g. "Complete"
	DispatchKey string
	Token       int64 // the token offered
}

// Error names the call, the row and the token offered.
func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("outbox: %s: lease lost: row %q, token %d", e.Op, e.DispatchKey, e.Token)
}

// Is reports whether target is [ErrLeaseLost].
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// MessageError is the detail of [ErrInvalidMessage].
type MessageError struct {
	Pkg         string // the package that refused the message, e.g. "pgstore"; "" reads "outbox"
	Op          string // the call, e.g. "Enqueue"; "" for [ValidateMessages] and [Message.Validate]
	Index       int    // the message's index in the batch; -1 for a lone message
	DispatchKey string // the message's key, possibly invalid itself
	Field       string // "DispatchKey", "Namespace", "TaskQueue", "Payload", "Priority", "MaxAttempts", "RunAt"
	Reason      string // what is wrong with the field, e.g. "is empty"
	Err         error  // the route rule's *RouteError, when it decided; NewMessage's JSON encoder's error
}

// Error reads "pkg: Op: msgs[i].Field: Reason", e.g.
// "pgstore: Enqueue: msgs[0].Namespace: is empty".
func (e *MessageError) Error() string {
	at := e.Field
	if e.Index >= 0 {
		at = fmt.Sprintf("msgs[%d].%s", e.Index, e.Field)
	}
	return prefix(e.Pkg, e.Op) + at + ": " + e.Reason
}

// Is reports whether target is [ErrInvalidMessage] or [ErrInvalidArgument].
func (e *MessageError) Is(target error) bool {
	return target == ErrInvalidMessage || target == ErrInvalidArgument
}

// Unwrap returns Err.
func (e *MessageError) Unwrap() error { return e.Err }

// ArgumentError is the detail of [ErrInvalidArgument].
type ArgumentError struct {
	Pkg    string // the package that refused the argument, e.g. "sqlitestore"; "" reads "outbox"
	Op     string // the store method or constructor, e.g. "Open", "Complete"
	Arg    string // the argument, e.g. "Options.Lease", "completions[3].Outcome"
	Reason string // what is wrong with it, e.g. "is negative"
	// Err is the detail or sentinel the refusal also matches, or nil:
	// a [*ConfigError] for settings that do not validate,
	// [ErrTooManySettings] for a namespace beyond [MaxSettings].
	Err error
}

// Error reads "pkg: Op: Arg: Reason", e.g.
// "pgstore: Open: Options.Schema: is not a lower-case identifier …".
func (e *ArgumentError) Error() string {
	return prefix(e.Pkg, e.Op) + e.Arg + ": " + e.Reason
}

// Is reports whether target is [ErrInvalidArgument].
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// Unwrap returns Err.
func (e *ArgumentError) Unwrap() error { return e.Err }

// prefix returns "pkg: op: ", with "outbox" for an empty pkg and no op
// part for an empty op.
func prefix(pkg, op string) string {
	if pkg == "" {
		pkg = "outbox"
	}
	if op == "" {
		return pkg + ": "
	}
	return pkg + ": " + op + ": "
}

// ShardCountError is the detail of [ErrShardCountMismatch].
type ShardCountError struct {
	Store int // the shard count the store's rows are placed with
	Given int // the shard count offered
}

// Error names both shard counts.
func (e *ShardCountError) Error() string {
	return fmt.Sprintf("outbox: shard count mismatch: store places rows over %d shards, given %d", e.Store, e.Given)
}

// Is reports whether target is [ErrShardCountMismatch].
func (e *ShardCountError) Is(target error) bool { return target == ErrShardCountMismatch }

// SchemaVersionError is the detail of [ErrSchemaTooNew].
type SchemaVersionError struct {
	Database int // the version found in the database
	Package  int // the newest version the running store knows
}

// Error names the database's schema version and the newest the store knows.
func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("outbox: schema too new: database is at version %d, this store knows up to %d", e.Database, e.Package)
}

// Is reports whether target is [ErrSchemaTooNew].
func (e *SchemaVersionError) Is(target error) bool { return target == ErrSchemaTooNew }
