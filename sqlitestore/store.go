package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

const (
	defaultShardCount  = 64
	defaultLease       = 30 * time.Second
	defaultBusyTimeout = 5 * time.Second
	defaultReaders     = 4
)

// Options configures a Store. The zero value is a valid configuration: every
// field's zero value picks the documented default.
type Options struct {
	// ShardCount is the number of virtual shards rows are placed over with
	// backpressure.ShardFor. It is recorded in the database when the
	// database is created and can never change afterwards: 0 adopts the
	// recorded count (64 for a new database); any other value must equal
	// it, or Open fails with ErrShardCountMismatch.
	ShardCount int

	// Lease is how long a claim holds its rows (the visibility timeout):
	// a claimed row that is neither settled nor retried within Lease is
	// claimable again, so a crashed claimer's rows come back. 0 means 30s.
	Lease time.Duration

	// Now is the store's clock. nil means time.Now. Tests inject a manual
	// clock; the store never reads time any other way.
	Now func() time.Time

	// BusyTimeout is how long a connection waits for a lock held by another
	// process sharing the file before failing with SQLITE_BUSY. 0 means 5s.
	BusyTimeout time.Duration

	// Readers is the number of read connections for a file database (the
	// counts, Get and Stats). 0 means 4. An in-memory database always uses
	// its one connection for everything.
	Readers int

	// SyncNormal selects PRAGMA synchronous=NORMAL instead of FULL for a
	// file database: commits no longer wait for fsync, so a power loss
	// (not a process crash) may lose the last transactions. false (FULL)
	// is the durable default.
	SyncNormal bool
}

// Store is an OutboxStore on an embedded SQLite database (modernc.org/sqlite,
// no cgo). Every write runs in a BEGIN IMMEDIATE transaction on the store's
// single writer connection; a file database runs in WAL mode so reads use
// their own connections without blocking the writer. Several processes may
// share a file: the write lock and busy timeout serialise them.
//
// A Store is safe for concurrent use. Build one with [Open]; the zero value
// is not usable.
type Store struct {
	writer     *sql.DB // one connection; every write transaction
	reader     *sql.DB // read connections; == writer in memory
	shardCount int
	lease      time.Duration
	now        func() time.Time
	trips      atomic.Int64
	stmts      map[stmtKey]*sql.Stmt // the hot statements, prepared at Open; read-only after

	failNth atomic.Int64 // test hook: statements until an injected failure; ≤ 0 off
}

var _ backpressure.OutboxStore[Row] = (*Store)(nil)

// Open opens (creating it if need be) the outbox database at path and
// migrates its schema to the current version; migrating is idempotent and
// versioned, so Open is safe on every start. path is a file name, or
// ":memory:" for a private in-memory database that lives until Close.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validate(path, opts); err != nil {
		return nil, err
	}
	s := &Store{lease: opts.Lease, now: opts.Now}
	if s.lease == 0 {
		s.lease = defaultLease
	}
	if s.now == nil {
		s.now = time.Now
	}
	busy := opts.BusyTimeout
	if busy == 0 {
		busy = defaultBusyTimeout
	}
	memory := path == ":memory:"
	base := ":memory:"
	if !memory {
		// A URI file name, so that no character of path is read as a DSN
		// parameter.
		base = "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	}
	pragmas := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=temp_store(MEMORY)", busy.Milliseconds())
	if !memory {
		sync := "FULL"
		if opts.SyncNormal {
			sync = "NORMAL"
		}
		pragmas += "&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")"
	}

	var err error
	s.writer, err = sql.Open("sqlite", base+"?"+pragmas+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	}
	// One writer connection; in memory it is also the database itself, so
	// it must never be closed while the store is open.
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	s.writer.SetConnMaxLifetime(0)
	s.writer.SetConnMaxIdleTime(0)
	if s.shardCount, err = migrate(ctx, s.writer, opts.ShardCount); err != nil {
		_ = s.writer.Close()
		if errors.Is(err, ErrSchemaTooNew) || errors.Is(err, ErrShardCountMismatch) {
			return nil, err
		}
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	}
	if memory {
		s.reader = s.writer
		return s.opened(ctx, path)
	}
	s.reader, err = sql.Open("sqlite", base+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		_ = s.writer.Close()
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	}
	readers := opts.Readers
	if readers == 0 {
		readers = defaultReaders
	}
	s.reader.SetMaxOpenConns(readers)
	s.reader.SetMaxIdleConns(readers)
	return s.opened(ctx, path)
}

// opened prepares the hot statements of a store whose databases are open,
// closing them if that fails.
func (s *Store) opened(ctx context.Context, path string) (*Store, error) {
	if err := s.prepare(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	}
	return s, nil
}

func validate(path string, opts Options) error {
	switch {
	case path == "":
		return &ArgumentError{Name: "path", Value: `""`, Reason: `want a file name or ":memory:"`}
	case opts.ShardCount < 0:
		return &ArgumentError{Name: "Options.ShardCount", Value: opts.ShardCount, Reason: "must be ≥ 0"}
	case opts.Lease < 0:
		return &ArgumentError{Name: "Options.Lease", Value: opts.Lease, Reason: "must be ≥ 0"}
	case opts.BusyTimeout < 0:
		return &ArgumentError{Name: "Options.BusyTimeout", Value: opts.BusyTimeout, Reason: "must be ≥ 0"}
	case opts.Readers < 0:
		return &ArgumentError{Name: "Options.Readers", Value: opts.Readers, Reason: "must be ≥ 0"}
	}
	return nil
}

// stmtKey is a hot statement: its text and the database it runs on.
type stmtKey struct {
	db *sql.DB
	q  string
}

// hotStatements lists the statements every sweep runs, each with and
// without the shard filter, with the database each runs on.
func (s *Store) hotStatements() []stmtKey {
	var out []stmtKey
	for _, cond := range []string{"", ownedCond(2)} {
		// The writer's for InSweepTx.
		out = append(out, stmtKey{s.reader, countClaimedSQL(cond)}, stmtKey{s.writer, countClaimedSQL(cond)})
	}
	for _, cond := range []string{"", ownedCond(3)} {
		out = append(out, stmtKey{s.reader, countPendingSQL(cond)})
		for _, m := range []countMode{countIDs, countFirstID} {
			out = append(out, stmtKey{s.writer, routeCountsSQL(cond, "", m)})
		}
		for _, part := range []string{windowAfter, windowUpTo, windowRestOf} {
			out = append(out, stmtKey{s.reader, countPendingWindowSQL(cond, part, countOnly)})
			for _, m := range []countMode{countIDs, countFirstID} {
				out = append(out, stmtKey{s.writer, countPendingWindowSQL(cond, part, m)})
			}
		}
	}
	for _, cond := range []string{"", ownedCond(7)} {
		out = append(out, stmtKey{s.writer, scopedClaimSQL(cond)}, stmtKey{s.writer, unscopedClaimSQL(cond)})
	}
	for _, cond := range []string{"", ownedCond(7)} {
		out = append(out, stmtKey{s.writer, claimByIDSQL(cond)})
	}
	return append(out, stmtKey{s.writer, nextTokenSQL})
}

// prepare prepares the hot statements, once, at Open. SQLite would
// otherwise parse and plan each of them again on every call, which costs
// about as much as running them. They are prepared up front, not on first
// use, because a first use can come inside a transaction that holds the
// writer's only connection.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = map[stmtKey]*sql.Stmt{}
	for _, k := range s.hotStatements() {
		if _, dup := s.stmts[k]; dup { // in memory, reader is writer
			continue
		}
		st, err := k.db.PrepareContext(ctx, k.q)
		if err != nil {
			return err
		}
		s.stmts[k] = st
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

// Close closes the database. An in-memory database is gone afterwards.
func (s *Store) Close() error {
	for _, st := range s.stmts {
		_ = st.Close()
	}
	err := s.writer.Close()
	if s.reader != s.writer {
		err = errors.Join(err, s.reader.Close())
	}
	return err
}

// ShardCount returns the shard count the store places rows with.
func (s *Store) ShardCount() int { return s.shardCount }

// Lease returns the store's lease length.
func (s *Store) Lease() time.Duration { return s.lease }

// RoundTrips returns how many round trips the store has made since Open:
// each call of a method that reaches the database counts one, because each
// runs one statement or one transaction. It is the hook the conformance
// suite (storetest) counts with; it is also a cheap load metric.
func (s *Store) RoundTrips() int64 { return s.trips.Load() }

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

// write runs fn in one BEGIN IMMEDIATE transaction on the writer connection,
// counting one round trip; fn's error, a failed commit, or a panic in fn
// rolls it back (a panic is then re-raised), so the writer's one connection
// is never left inside a transaction.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if err := s.step(ctx); err != nil {
		return err
	}
	s.trips.Add(1)
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
	return nil
}

// nanos converts a time to the stored form; the zero time is 0.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

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
