package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/keptcount"
	"github.com/outboxkit/backpressure/outbox"
	"modernc.org/sqlite" // registers the "sqlite" driver
)

// MaxReaders bounds Options.Readers (256): each reader is a connection
// with its own page cache, and SQLite serves reads of one file from a few
// connections as well as from many.
const MaxReaders = 256

const (
	defaultShardCount   = 64
	defaultBusyTimeout  = 5 * time.Second
	defaultReaders      = 4
	defaultPollInterval = 100 * time.Millisecond
)

// Options configures a Store. The zero value is a valid configuration: every
// field's zero value picks the documented default.
type Options struct {
	// ShardCount is the number of virtual shards rows are placed over with
	// backpressure.ShardFor. It is recorded in the database when the
	// database is created and can never change afterwards: 0 adopts the
	// recorded count (64 for a new database); any other value must equal
	// it, or Open fails with an *outbox.ShardCountError. At most
	// backpressure.MaxShardCount; negative or larger is refused with an
	// *outbox.ArgumentError.
	ShardCount int

	// Lease is how long a claim holds its rows (the visibility timeout):
	// a claimed row that is neither completed nor extended within Lease is
	// claimable again, so a crashed claimer's rows come back. 0 means
	// outbox.DefaultLease (30s); otherwise outbox.MinLease (100ms) to
	// outbox.MaxLease (24h), else Open fails with an *outbox.ArgumentError.
	Lease time.Duration

	// MaxAttempts is the most claims a row gets unless its message sets
	// its own: a Retry of a row that has had MaxAttempts claims
	// dead-letters it instead. 0 means outbox.DefaultMaxAttempts (25);
	// negative or above outbox.MaxAttemptsLimit is refused. Each row records its limit when it is enqueued.
	MaxAttempts int

	// Now is the store's clock. nil means time.Now. Tests inject a manual
	// clock; the store never reads time any other way.
	Now func() time.Time

	// BusyTimeout is how long a connection waits for a lock held by
	// another connection or process sharing the file before failing with
	// SQLITE_BUSY. 0 means 5s; otherwise at least 1ms (SQLite counts it in
	// whole milliseconds, so a shorter one would silently mean "never
	// wait"), else Open fails with an *outbox.ArgumentError. Open only.
	BusyTimeout time.Duration

	// Readers is the number of read connections for a file database (the
	// counts, Get, Stats, ListDead). 0 means 4; at most [MaxReaders]. An
	// in-memory database always uses its one connection for everything.
	// Open only.
	Readers int

	// SyncNormal selects PRAGMA synchronous=NORMAL instead of FULL for a
	// file database: commits no longer wait for fsync, so a power loss
	// (not a process crash) may lose the last transactions. false (FULL)
	// is the durable default. Open only.
	SyncNormal bool

	// ReadOnly opens the file for inspection (Open only): the counts, Get,
	// Stats, ListDead and Subscribe work; every write returns ErrReadOnly.
	// Open then never writes, not even to migrate: a database at an older
	// schema version fails with an *outbox.ArgumentError (open it
	// read-write once), and the file must exist.
	ReadOnly bool

	// MustExist makes Open open an existing outbox only (Open only): a
	// file that does not exist, or a SQLite database without the outbox
	// (a zero-length file included), fails with an *outbox.NotExistError
	// (matching outbox.ErrNotExist) and Open creates and writes nothing.
	// An existing outbox at an older schema version is still migrated
	// (read-write). In memory it is an *outbox.ArgumentError. Tools that
	// only inspect or act on an outbox set it, so that a mistyped path
	// does not create a new, empty one.
	MustExist bool

	// PollInterval is how often a subscribed store looks for rows that
	// other connections committed (see [Store.Subscribe]). 0 means 100ms;
	// otherwise at least 1ms.
	PollInterval time.Duration

	// PendingCaps caps the unfinished rows each namespace may hold (see
	// outbox.PendingCaps; the zero value caps nothing): an Enqueue or
	// EnqueueTx past a cap fails with an *outbox.PendingCapError and writes
	// nothing. The bound is exact under any number of concurrent producers,
	// since SQLite runs one write transaction at a time. Cost: per capped
	// namespace of a batch, one count of at most cap + 1 index entries.
	PendingCaps outbox.PendingCaps

	// RecountInterval, when positive, turns kept counts on (see "Kept
	// counts" in the package doc): the store answers the planner's counts
	// (the Claimer's CountClaimedOutboxRows, CountPendingOutboxRows and
	// CountOutboxRows) from counts it keeps from its own claims,
	// completions and enqueues, for at most RecountInterval after it last
	// read them all, and reads what it cannot know. An answer is always
	// what a full count would return at that instant: a commit by any
	// other connection to the file (another Store, another process, an
	// application's transaction) makes the store read again. Zero (the
	// default) or a negative value keeps nothing: every count reads the
	// database. They are off by default because on a plain trickle and in
	// a drain they cost as much or more CPU than they save; beside many
	// namespaces holding delayed rows they cost a third (docs/sqlitestore.md,
	// "Kept counts", has the figures). Open only, and not with ReadOnly (an
	// *outbox.ArgumentError otherwise): a store from New shares its
	// connections with the application, so it cannot tell its own commits
	// from others'.
	RecountInterval time.Duration
}

// Store is an outbox.Store on an embedded SQLite database
// (modernc.org/sqlite, no cgo). Build one with [Open] (the store opens the
// file itself) or [New] (on the application's own *sql.DB, so business
// writes and outbox rows share transactions).
//
// A Store is safe for concurrent use. A nil *Store, the zero Store and a
// closed Store return an error matching outbox.ErrClosed from every method.
type Store struct {
	writer      *sql.DB // every write transaction; one connection when Open opened it
	reader      *sql.DB // read connections; == writer in memory and for New
	owned       bool    // Open opened writer and reader: Close closes them
	immediate   bool    // the writer's transactions begin IMMEDIATE (Open's DSN)
	readOnly    bool
	path        string // the database file, as Open was given it or db reports it; "" in memory
	shardCount  int
	lease       time.Duration
	maxAttempts int
	caps        outbox.PendingCaps // see pendingcap.go
	poll        time.Duration
	now         func() time.Time
	dbID        int64 // the database's random identity, outbox_meta.db_id
	trips       atomic.Int64
	commits     atomic.Int64          // write transactions committed; the drain benchmark reports them per row
	writing     atomic.Int32          // write transactions in progress (see keptCheck)
	stmts       map[stmtKey]*sql.Stmt // the hot statements, prepared at Open; read-only after
	closed      atomic.Bool
	subs        subscribers
	kept        *keptcount.Counts // nil: every count reads (see kept.go)
	keptSt      keptState

	failNth atomic.Int64 // test hook: statements until an injected failure; ≤ 0 off
}

var (
	_ outbox.Store    = (*Store)(nil)
	_ outbox.Notifier = (*Store)(nil)
)

// Open opens (creating it if need be) the outbox database at path and
// brings its schema to the current version. It reads the schema version
// first and takes the write lock only when the database needs creating or
// migrating, so opening a current database succeeds while another
// connection holds the write lock. Migrating is versioned and idempotent,
// so Open is safe on every start. path is a file name, or ":memory:" for a
// private in-memory database that lives until Close.
//
// It fails with an *outbox.ArgumentError for an invalid option, an
// *outbox.ShardCountError when Options.ShardCount differs from the
// database's, an *outbox.SchemaVersionError for a database migrated by a
// newer version of this package, and a *[FileError] (matching
// [ErrDatabaseFile], with path) for a file SQLite cannot use: one that
// cannot be created or opened (with Options.ReadOnly, one that does not
// exist), is read-only for a read-write Open (which Open proves by a
// write it rolls back, without waiting for the write lock), is not a
// SQLite database, or is corrupt. A file that holds a table or index of
// its own under a name the store creates (an "outbox" table of the
// application's), with no schema version of the store, fails with an
// *outbox.ForeignSchemaError (matching outbox.ErrForeignSchema) naming it,
// and is left unchanged. A zero-length file is an empty SQLite database,
// as SQLite itself has it: a read-write Open creates the outbox in it, and
// a read-only one fails with an *outbox.ArgumentError (it holds no
// outbox), as for any database without one.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validate("Open", path, opts); err != nil {
		return nil, err
	}
	s := newStore(opts)
	s.owned, s.immediate, s.readOnly = true, true, opts.ReadOnly
	if path != ":memory:" {
		s.path = path
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
	if opts.MustExist {
		if err := mustExist(ctx, path, base); err != nil {
			return nil, err
		}
	}
	pragmas := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=temp_store(MEMORY)", busy.Milliseconds())
	if opts.ReadOnly {
		return s.openReadOnly(ctx, path, base+"?mode=ro&"+pragmas+"&_pragma=query_only(1)", opts)
	}
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
	if err := s.settleSchema(ctx, opts.ShardCount); err != nil {
		_ = s.writer.Close()
		return nil, openError(path, err)
	}
	if err := s.checkWritable(ctx, busy); err != nil {
		_ = s.writer.Close()
		return nil, openError(path, err)
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

// openReadOnly is Open for Options.ReadOnly: the reader pool alone, opened
// mode=ro, and a schema check that writes nothing.
func (s *Store) openReadOnly(ctx context.Context, path, dsn string, opts Options) (*Store, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	}
	readers := opts.Readers
	if readers == 0 {
		readers = defaultReaders
	}
	db.SetMaxOpenConns(readers)
	db.SetMaxIdleConns(readers)
	s.writer, s.reader = db, db
	m, err := readMeta(ctx, db)
	if err == nil {
		err = s.adopt(m, opts.ShardCount)
	}
	if err != nil {
		err = s.foreignOr(ctx, db, err)
	}
	if err == nil && m.version < schemaVersion {
		err = argError("Open", "Options.ReadOnly", fmt.Sprintf(
			"the database is at schema version %d, older than this package's %d: open it read-write once to migrate it", m.version, schemaVersion))
	}
	if err != nil {
		_ = db.Close()
		return nil, openError(path, err)
	}
	return s.opened(ctx, path)
}

// New builds a store on db, a database the application opened and keeps
// using for its own tables, so that [Store.EnqueueTx] can write outbox rows
// in the application's transactions. It creates or migrates the outbox
// tables as Open does (taking the write lock only when needed). Close
// releases the store but leaves db open: db stays the caller's.
//
// Requirements on db, checked here (an *outbox.ArgumentError otherwise):
//
//   - It was opened with modernc.org/sqlite (the "sqlite" driver).
//   - A file database runs in WAL mode (_pragma=journal_mode(WAL) in the
//     DSN): the store's counts then read while a transaction writes, and
//     an application transaction never blocks them.
//   - A file database has a busy timeout (_pragma=busy_timeout(5000)):
//     without one, any write that meets another connection's write lock
//     fails at once with SQLITE_BUSY.
//
// Recommended: _txlock=immediate in the DSN, so every transaction of the
// application takes the write lock when it begins and waits for it with
// the busy timeout. A deferred transaction that reads and then writes
// fails with SQLITE_BUSY at once, without waiting, when another connection
// committed in between (SQLite cannot upgrade its stale snapshot); the
// store's own transactions are immune (each takes the lock with its first
// statement), but the application's are not. Options.BusyTimeout,
// Readers, SyncNormal, ReadOnly and MustExist apply to Open only and must
// be zero.
//
// A db whose database holds tables of the application under names the
// store creates (outbox, outbox_meta, …; see SchemaSQL) fails with an
// *outbox.ForeignSchemaError, as in Open, changing nothing.
func New(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, argError("New", "db", "is nil")
	}
	if err := validate("New", "-", opts); err != nil {
		return nil, err
	}
	switch {
	case opts.BusyTimeout != 0:
		return nil, argError("New", "Options.BusyTimeout", "applies to Open only: set busy_timeout in db's DSN")
	case opts.Readers != 0:
		return nil, argError("New", "Options.Readers", "applies to Open only: db's pool serves every read")
	case opts.SyncNormal:
		return nil, argError("New", "Options.SyncNormal", "applies to Open only: set synchronous in db's DSN")
	case opts.ReadOnly:
		return nil, argError("New", "Options.ReadOnly", "applies to Open only")
	case opts.MustExist:
		return nil, argError("New", "Options.MustExist", "applies to Open only")
	case opts.RecountInterval > 0:
		return nil, argError("New", "Options.RecountInterval", "applies to Open only: the store cannot tell its commits on db from the application's")
	}
	file, err := checkAppDB(ctx, db)
	if err != nil {
		return nil, err
	}
	s := newStore(opts)
	s.writer, s.reader, s.path = db, db, file
	if err := s.settleSchema(ctx, opts.ShardCount); err != nil {
		return nil, openError(file, err)
	}
	if err := s.prepare(ctx); err != nil {
		s.closeStmts()
		return nil, fmt.Errorf("sqlitestore: New: %w", err)
	}
	return s, nil
}

// checkAppDB checks New's requirements on db and returns its main
// database's file ("" in memory).
func checkAppDB(ctx context.Context, db *sql.DB) (string, error) {
	if !isModernc(db.Driver()) {
		return "", argError("New", "db", fmt.Sprintf("uses driver %T; want modernc.org/sqlite", db.Driver()))
	}
	var file string
	// database_list: seq, name, file; file is "" for an in-memory database.
	if err := db.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		if fe := fileError("", err); fe != nil {
			return "", fe
		}
		return "", fmt.Errorf("sqlitestore: New: %w", err)
	}
	if file == "" {
		return "", nil
	}
	var mode string
	var busy int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT journal_mode FROM pragma_journal_mode), (SELECT timeout FROM pragma_busy_timeout)`).Scan(&mode, &busy); err != nil {
		return "", openError(file, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return "", argError("New", "db", "journal_mode is "+mode+"; open it in WAL mode (_pragma=journal_mode(WAL))")
	}
	if busy <= 0 {
		return "", argError("New", "db", "has no busy timeout; set one (_pragma=busy_timeout(5000))")
	}
	return file, nil
}

// isModernc reports whether d is modernc.org/sqlite's driver.
func isModernc(d any) bool {
	_, ok := d.(*sqlite.Driver)
	return ok
}

// newStore applies the defaults of opts.
func newStore(opts Options) *Store {
	s := &Store{lease: opts.Lease, maxAttempts: opts.MaxAttempts, now: opts.Now, poll: opts.PollInterval,
		caps: outbox.PendingCaps{Default: opts.PendingCaps.Default, PerNamespace: maps.Clone(opts.PendingCaps.PerNamespace)},
		kept: newKept(opts.RecountInterval)}
	if s.lease == 0 {
		s.lease = outbox.DefaultLease
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = outbox.DefaultMaxAttempts
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.poll == 0 {
		s.poll = defaultPollInterval
	}
	return s
}

// opened prepares the hot statements of a store whose databases are open,
// closing them if that fails.
func (s *Store) opened(ctx context.Context, path string) (*Store, error) {
	if err := errors.Join(s.prepare(ctx), s.prepareKept(ctx)); err != nil {
		_ = s.Close()
		return nil, openError(path, err)
	}
	return s, nil
}

// validate checks path and opts for op, Open or New (which passes a path
// of "-").
func validate(op, path string, opts Options) error {
	switch {
	case path == "":
		return argError(op, "path", `is empty; want a file name or ":memory:"`)
	case opts.ReadOnly && path == ":memory:":
		return argError(op, "Options.ReadOnly", "a private in-memory database has nothing to inspect")
	case opts.ShardCount < 0 || opts.ShardCount > backpressure.MaxShardCount:
		return argError(op, "Options.ShardCount", fmt.Sprintf("%d is outside 0 to backpressure.MaxShardCount (%d)", opts.ShardCount, backpressure.MaxShardCount))
	case opts.Lease < 0 || (opts.Lease > 0 && opts.Lease < outbox.MinLease):
		return argError(op, "Options.Lease", fmt.Sprintf("%v is below the floor outbox.MinLease (%v)", opts.Lease, outbox.MinLease))
	case opts.Lease > outbox.MaxLease:
		return argError(op, "Options.Lease", fmt.Sprintf("%v is above outbox.MaxLease (%v)", opts.Lease, outbox.MaxLease))
	case opts.MaxAttempts < 0 || int64(opts.MaxAttempts) > outbox.MaxAttemptsLimit:
		return argError(op, "Options.MaxAttempts", fmt.Sprintf("%d is outside 0 to outbox.MaxAttemptsLimit (%d)", opts.MaxAttempts, outbox.MaxAttemptsLimit))
	case opts.BusyTimeout < 0 || (opts.BusyTimeout > 0 && opts.BusyTimeout < time.Millisecond):
		return argError(op, "Options.BusyTimeout", fmt.Sprintf("%v is below 1ms, SQLite's resolution (0 means 5s)", opts.BusyTimeout))
	case opts.Readers < 0 || opts.Readers > MaxReaders:
		return argError(op, "Options.Readers", fmt.Sprintf("%d is outside 0 to MaxReaders (%d)", opts.Readers, MaxReaders))
	case opts.ReadOnly && opts.RecountInterval > 0:
		return argError(op, "Options.RecountInterval", "a read-only store does not claim: it has no counts to keep")
	case opts.PollInterval < 0 || (opts.PollInterval > 0 && opts.PollInterval < time.Millisecond):
		return argError(op, "Options.PollInterval", fmt.Sprintf("%v is below 1ms", opts.PollInterval))
	}
	return opts.PendingCaps.Validate("Open", "Options.PendingCaps")
}

// Close releases the store: its subscriptions' channels are closed and
// every later call returns an error matching outbox.ErrClosed. A store
// from Open closes its database (an in-memory one is gone afterwards); a
// store from New leaves the caller's *sql.DB open. Closing a closed store
// returns nil; a nil or zero store returns outbox.ErrClosed.
func (s *Store) Close() error {
	if s == nil || s.writer == nil {
		return fmt.Errorf("sqlitestore: Close: %w", outbox.ErrClosed)
	}
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.subs.closeAll()
	s.closeStmts()
	s.closeKept()
	if !s.owned {
		return nil
	}
	err := s.writer.Close()
	if s.reader != s.writer {
		err = errors.Join(err, s.reader.Close())
	}
	return err
}

// ShardCount returns the shard count the store places rows with; 0 for a
// nil or zero store.
func (s *Store) ShardCount() int {
	if s == nil {
		return 0
	}
	return s.shardCount
}

// Lease returns the store's lease length; 0 for a nil or zero store.
func (s *Store) Lease() time.Duration {
	if s == nil {
		return 0
	}
	return s.lease
}

// roundTrips returns how many round trips the store has made since Open:
// each call of a method that reaches the database counts one, because each
// runs one statement or one transaction. It is the hook the conformance
// suite (storetest) counts with. Subscribe and its polling are not counted.
func (s *Store) roundTrips() int64 {
	if s == nil {
		return 0
	}
	return s.trips.Load()
}
