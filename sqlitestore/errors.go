package sqlitestore

import (
	"errors"
	"fmt"

	check "github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// ErrReadOnly reports a write (Enqueue, a claim, a completion, a purge …)
// on a store opened with Options.ReadOnly. The call changed nothing.
var ErrReadOnly = errors.New("sqlitestore: store is read-only")

// ErrSweepTxDone is returned by the view InSweepTx passes to its fn when it
// is used after fn returned.
var ErrSweepTxDone = errors.New("sqlitestore: sweep transaction view used after its fn returned")

// argError builds the *outbox.ArgumentError of op for arg.
func argError(op, arg, reason string) error {
	return call(op).Arg(arg, reason)
}

// call names op of this package in the errors internal/validate returns.
func call(op string) check.Call { return check.Call{Pkg: "sqlitestore", Op: op} }

// fail wraps err, an error of the store method op, for its caller: nil
// stays nil; the outbox package's typed errors and ctx's errors pass as
// they are; an error that came from a store closed under the call becomes
// outbox.ErrClosed; anything else (the database's) is prefixed with the
// package and the method.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if s != nil && s.closed.Load() && !errors.Is(err, outbox.ErrClosed) {
		return fmt.Errorf("sqlitestore: %s: %w (%v)", op, outbox.ErrClosed, err)
	}
	var (
		lost  *outbox.LeaseLostError
		arg   *outbox.ArgumentError
		msg   *outbox.MessageError
		shard *outbox.ShardCountError
		ver   *outbox.SchemaVersionError
	)
	switch {
	case errors.As(err, &lost), errors.As(err, &arg), errors.As(err, &msg), errors.As(err, &shard), errors.As(err, &ver),
		errors.Is(err, outbox.ErrClosed), errors.Is(err, outbox.ErrNotFound), errors.Is(err, ErrReadOnly),
		errors.Is(err, ErrSweepTxDone):
		return err
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}
