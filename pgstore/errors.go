package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// opError wraps a database error with the method that failed, keeping it
// matchable (errors.Is(err, context.Canceled), errors.As(err, *pgconn.PgError)).
func opError(op string, err error) error {
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// closedError is what every method returns on a nil, zero or closed store.
func closedError(op string) error {
	return fmt.Errorf("pgstore: %s: %w", op, outbox.ErrClosed)
}

// argError is an [outbox.ArgumentError] of this package for op.
func argError(op, arg, format string, a ...any) error {
	return call(op).Argf(arg, format, a...)
}

// call names op of this package in the errors internal/validate returns.
func call(op string) validate.Call { return validate.Call{Pkg: "pgstore", Op: op} }

// Whether a call may run again on another connection after its connection
// was lost.
const (
	// anyLoss: the call may run again whatever the server did with it.
	// Reads, and claims: a claim the server committed before the
	// connection died leaves rows claimed under tokens nobody holds, which
	// come back when their lease expires, so claiming again claims other
	// rows and nothing twice.
	anyLoss = true
	// unsent: only if the statement never left this process. Writes whose
	// result tells the caller what happened (inserted counts, per-row
	// results): running them twice would misreport.
	unsent = false
)

// run runs fn, and once more if fn failed because its connection was lost
// and ctx is not done: before the second run it drops the pool's idle
// connections that are dead too, so after pg_terminate_backend (a restart,
// a failover) one call finds every dead connection at once rather than one
// call per connection. again says when the second run is allowed (anyLoss,
// unsent). fn must start from scratch each time.
func (s *Store) run(ctx context.Context, again bool, fn func() error) error {
	err := fn()
	if err == nil || ctx.Err() != nil || !lostConnection(err) {
		return err
	}
	s.dropDeadConnections(ctx)
	// The statement may have changed rows unseen.
	s.kept.Forget()
	if !again && !pgconn.SafeToRetry(err) { // unsent: only a statement that never left
		return err
	}
	return fn()
}

// runOnce is run(ctx, unsent, fn) for one autocommit statement (Complete's
// and ExtendLeases'), retried up to twice more when PostgreSQL chose it as
// a deadlock's victim (SQLSTATE 40P01). A victim's statement is rolled back
// whole, so nothing of it applied and running it again is what the caller
// asked for. Both statements lock their rows in dispatch-key order when
// PostgreSQL walks the sorted keys, but that is a plan choice (a generic
// hash-join plan visits rows in table order): two calls over the same rows
// with different plans can deadlock, and the retry turns that into a wait of
// deadlock_timeout (1 s by default).
func (s *Store) runOnce(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := s.run(ctx, unsent, fn)
		var pgErr *pgconn.PgError
		if attempt == 2 || ctx.Err() != nil || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
}

// dropDeadConnections pings every idle connection of the pool and closes
// those that do not answer; the pool drops a closed connection when it is
// released. It costs one round trip per idle connection, and runs only
// after a connection was found lost.
func (s *Store) dropDeadConnections(ctx context.Context) {
	for _, c := range s.pool.AcquireAllIdle(ctx) {
		if err := c.Ping(ctx); err != nil {
			_ = c.Conn().Close(ctx)
		}
		c.Release()
	}
}

// lostConnection reports whether err says the connection to the server is
// gone: the server terminated the session (SQLSTATE 57P01 admin shutdown,
// 57P02 crash shutdown, 57P03 cannot connect now, class 08 connection
// exception), or the socket failed or was closed.
func lostConnection(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P0") || strings.HasPrefix(pgErr.Code, "08")
	}
	var netErr net.Error
	return pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || (errors.As(err, &netErr) && !netErr.Timeout())
}
