package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// The steps every call shares: the store's state checks, its statements
// (prepared or not), its transactions, and the stored form of time.

// ready returns outbox.ErrClosed for a nil, zero or closed store.
func (s *Store) ready() error {
	if s == nil || s.writer == nil || s.closed.Load() {
		return outbox.ErrClosed
	}
	return nil
}

// writable is ready, and ErrReadOnly for a read-only store.
func (s *Store) writable() error {
	if err := s.ready(); err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly
	}
	return nil
}

// query runs q with args in tx, a transaction on db, or on db itself when
// tx is nil, through its prepared statement when q is a hot one. database/sql
// keeps one prepared copy per connection, and prepares one on a connection
// that does not have it yet.
func (s *Store) query(ctx context.Context, db *sql.DB, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	st, ok := s.stmts[stmtKey{db, q}]
	switch {
	case !ok && tx == nil:
		return db.QueryContext(ctx, q, args...)
	case !ok:
		return tx.QueryContext(ctx, q, args...)
	case tx == nil:
		return st.QueryContext(ctx, args...)
	}
	return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
}

// errInjected is the failure the test hook injects.
var errInjected = errors.New("sqlitestore: injected fault")

// step runs before every statement: it honours ctx between the statements
// of a transaction and fires the test hook's injected failure.
func (s *Store) step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.failNth.Load() > 0 && s.failNth.Add(-1) == 0 {
		return errInjected
	}
	return nil
}

// lockSQL takes the write lock at the start of a transaction that did not
// begin IMMEDIATE (a store from New): an UPDATE takes the lock when it
// starts, waiting with the busy timeout, even when it changes no row, and
// a transaction that holds it can never fail to upgrade a stale snapshot.
const lockSQL = `UPDATE outbox_meta SET value = value WHERE key = 'write_lock'`

// write runs fn in one write transaction (it holds the write lock from its
// first statement) counting one round trip; fn's error, a failed commit, or
// a panic in fn rolls it back (a panic is then re-raised), so the writer's
// connection is never left inside a transaction.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.step(ctx); err != nil {
		return err
	}
	s.trips.Add(1)
	s.writing.Add(1)
	defer s.writing.Add(-1)
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if !s.immediate {
		if _, err := tx.ExecContext(ctx, lockSQL); err != nil {
			return err
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := s.step(ctx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	committed = true
	s.commits.Add(1)
	return nil
}

// read counts a round trip of a read-only call, once the store is ready
// and ctx live.
func (s *Store) read(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	if err := s.step(ctx); err != nil {
		return err
	}
	s.trips.Add(1)
	return nil
}

// nanos converts a time to the stored form; the zero time is 0. A time
// after the largest stored time (2262-04-11T23:47:16.854775807Z) is that
// time, and one before 1970 is 1ns after the epoch, so that no time wraps.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.After(maxTime):
		return math.MaxInt64
	case !t.After(time.Unix(0, 0)):
		return 1
	}
	return t.UnixNano()
}

var maxTime = time.Unix(0, math.MaxInt64)

// fromNanos converts a stored time back; 0 is the zero time.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// addNanos returns the stored time t plus d (d ≥ 0), clamped to the largest
// stored time, math.MaxInt64 (2262-04-11T23:47:16.854775807Z), rather than
// wrapping around to the past: a lease or retry delay too long to represent
// ends then, so a huge duration means "not for centuries", never "now".
func addNanos(t int64, d time.Duration) int64 {
	if d > 0 && t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}
