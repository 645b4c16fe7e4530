package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/keptcount"
	"github.com/outboxkit/backpressure/outbox"
)

// Defaults for the zero values of Options.
const (
	DefaultSchema     = "backpressure"
	DefaultShardCount = 64
)

// Options configures a Store. The zero value is valid: every field's zero
// value takes the documented default.
type Options struct {
	// Schema is the PostgreSQL schema that holds the store's tables. It must
	// be a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes), not
	// starting with pg_ and not information_schema; it is quoted wherever
	// it appears in SQL. Zero value: "backpressure". Stores in different
	// schemas share nothing.
	Schema string

	// ShardCount is the size of the virtual shard space rows are placed in
	// with backpressure.ShardFor. It is recorded in the schema when the
	// schema is created (or migrated from version 1, which recorded none)
	// and can never change afterwards, since rows keep the shard they were
	// enqueued with: 0 adopts the recorded count (64 for a new schema); any
	// other value must equal it, or New returns an [*outbox.ShardCountError]
	// (matching [outbox.ErrShardCountMismatch]). Above
	// [backpressure.MaxShardCount] is an error.
	ShardCount int

	// Lease is the visibility timeout of a claim: a claimed row that is
	// neither completed nor extended within Lease becomes claimable again,
	// so a crashed claimer's rows come back. Zero value:
	// [outbox.DefaultLease]; below [outbox.MinLease] or above
	// [outbox.MaxLease] is an error.
	Lease time.Duration

	// MaxAttempts is the most claims a row gets: a Retry of a row that has
	// had MaxAttempts claims dead-letters it instead. A message's own
	// MaxAttempts overrides it. Zero value: [outbox.DefaultMaxAttempts];
	// negative or above [outbox.MaxAttemptsLimit] is an error.
	MaxAttempts int

	// Now is the store's clock. Nil, the default, uses the database server's
	// clock (now(), the statement's transaction start), which every node
	// then shares. Tests inject a manual clock; the time is passed to every
	// statement as a parameter.
	Now func() time.Time

	// PendingCaps caps the unfinished rows each namespace may hold (see
	// outbox.PendingCaps; the zero value caps nothing): an Enqueue or
	// EnqueueTx past a cap fails with an *outbox.PendingCapError and writes
	// nothing. The bound is exact among producers whose stores have the
	// cap: a batch with capped namespaces takes a transaction-level
	// advisory lock per capped namespace (in byte order, so producers never
	// deadlock on them), inserts, counts and undoes its insert if a count
	// is over the cap; a producer of the same namespace waits for the lock
	// until the transaction ends (for EnqueueTx, the caller's transaction).
	// Cost: two more statements per batch with capped namespaces (three and
	// a transaction for Enqueue), and a count of at most cap + 1 index
	// entries per capped namespace.
	PendingCaps outbox.PendingCaps

	// WindowClaims makes [Store.Claimer]'s value offer the window claim
	// ([backpressure.OutboxStore] describes it), so that a sweep under the
	// window rule (more namespaces with demand than its budget) plans and
	// claims in one statement rather than a counted window and a claim.
	// Off by default: on PostgreSQL 15 it took the same round trips per row
	// as the counted window and drained slower (0.90× in
	// BenchmarkWindowClaimDrain; 0.75× for dispatch at 1,000 namespaces,
	// BatchSize 100, in bench's BenchmarkDrain, fair-1000-window against
	// fair-1000, 2026-12-01), its one
	// statement walking every route of the window in one backend where the
	// counted path's count and claim each walk less. Either way the rows
	// claimed are the same (storetest's WindowClaim area checks it).
	WindowClaims bool

	// MustExist makes New and Open open an existing outbox only: a schema
	// that does not exist, or one without the outbox's tables, fails with
	// an [*outbox.NotExistError] (matching [outbox.ErrNotExist]) and
	// nothing is created. An existing outbox at an older schema version is
	// still migrated. Tools that only inspect or act on an outbox set it,
	// so that a mistyped schema name does not create a new, empty one.
	MustExist bool

	// RecountInterval, when positive, turns kept counts on (see "Kept
	// counts" in the package doc): the store answers the planner's counts
	// from the counts it keeps for at most RecountInterval before it reads
	// them all from the database again. Zero (the default) or a negative
	// value keeps nothing: every count reads the database. Kept counts never
	// loosen a ceiling on one node: a count the store cannot know is read.
	// They are off by default because on a plain trickle they save a
	// round trip per wake-up but not measurably its CPU (docs/pgstore.md,
	// "Kept counts", has the figures); they pay off beside many namespaces
	// holding delayed rows.
	// [RecommendedRecountInterval] is the interval measured there.
	RecountInterval time.Duration
}

// RecommendedRecountInterval is the Options.RecountInterval the kept
// counts were measured with: the bound on how long a change made outside
// the store's sight (SQL run by hand, a second process claiming on the same
// shards) can go unseen.
const RecommendedRecountInterval = time.Second

// Store is a PostgreSQL outbox for many dispatcher nodes sharing one
// database. It implements [outbox.Store] and [outbox.Notifier]. A Store is
// safe for concurrent use; many Stores, in one process or many, may share a
// schema. Build one with [New] or [Open]; a nil or zero Store, like a
// closed one, returns an error matching [outbox.ErrClosed] from every
// method.
//
// Every method other than New, Open and Subscribe is one SQL statement
// (one round trip), honours ctx, and returns errors prefixed "pgstore: ".
// New and Open read the schema's version and shard count (two statements)
// and, only when the schema is missing or behind, migrate it in one
// transaction. Cost notes are on each method; n is the outbox's unsettled
// rows, r the routes with unsettled rows.
//
// # Lost connections
//
// A call whose connection is lost (a server restart or failover,
// pg_terminate_backend) runs once more on a live connection when running it
// again cannot misreport what it did: reads and claims always, other writes
// only if their statement never reached the server; otherwise it returns
// the error, and the write may or may not have committed (dedup makes an
// Enqueue's rows safe either way). A claim committed before its connection
// died leaves its rows claimed under tokens nobody holds until their lease
// expires; they are then claimed again, with one more attempt counted.
type Store struct {
	pool        *pgxpool.Pool
	ownsPool    bool
	schema      string
	shardCount  int
	lease       time.Duration
	maxAttempts int
	caps        outbox.PendingCaps // see enqueue.go
	windowClaim bool               // Options.WindowClaims
	now         func() time.Time
	closed      atomic.Bool
	sql         statements
	channel     string   // the LISTEN/NOTIFY channel of the schema
	identity    identity // of the store's database and schema, for EnqueueTx
	listen      listener
	fence       *Membership       // non-nil for a Membership's store: fenced claims
	kept        *keptcount.Counts // nil: every count reads (see kept.go)
	keptSQL     keptStatements

	// views are the fenced views of the Memberships joined through this
	// store; Close closes them too, so their subscribers' channels close
	// and their calls return ErrClosed rather than the pool's error.
	views struct {
		mu  sync.Mutex
		set map[*Store]struct{}
	}
}

var (
	_ outbox.Store    = (*Store)(nil)
	_ outbox.Notifier = (*Store)(nil)
)

// New returns a store over pool, after validating opts and opening the
// schema. A schema already at [SchemaVersion] is only read, so New needs no
// CREATE privilege then. A missing or older schema is created or migrated
// (idempotent, versioned, under an advisory lock, safe to run from many
// nodes at once); creating the schema itself needs the CREATE privilege on
// the database, migrating an existing one needs ownership of it.
//
// Invalid options are an [*outbox.ArgumentError] (Op "New", Arg
// "Options.Schema", "Options.Lease", …), returned before touching the
// database. The shard count is settled as Options.ShardCount says: a value
// that differs from the recorded count is an [*outbox.ShardCountError]; a
// recorded count above [backpressure.MaxShardCount] (which only an older
// version could record) is a [*backpressure.ShardError]. A
// schema newer than this package is an [*outbox.SchemaVersionError]. A
// schema that holds a table, index or sequence under a name the store
// creates (an "outbox" table of the application's, say) and no schema
// version of the store is an [*outbox.ForeignSchemaError] (matching
// [outbox.ErrForeignSchema]) naming the schema and the object; nothing is
// created or changed. The store does not own pool: Close leaves it open.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	return newStore(ctx, "New", pool, opts)
}

// newStore is New, naming op (New or Open) in its errors.
func newStore(ctx context.Context, op string, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, argError(op, "pool", "nil *pgxpool.Pool")
	}
	if ctx == nil {
		return nil, argError(op, "ctx", "nil context")
	}
	if err := ctx.Err(); err != nil {
		return nil, opError(op, err)
	}
	opts, err := withDefaults(op, opts)
	if err != nil {
		return nil, err
	}
	quoted, shardCount, err := openSchema(ctx, op, pool, opts)
	if err != nil {
		return nil, err
	}
	sql := prepare(quoted)
	var id identity
	if err := pool.QueryRow(ctx, sql.identity).Scan(&id.database, &id.settings, &id.storeID); err != nil {
		return nil, opError(op+": read schema "+quoted, err)
	}
	return &Store{
		pool:        pool,
		schema:      opts.Schema,
		shardCount:  shardCount,
		lease:       opts.Lease,
		maxAttempts: opts.MaxAttempts,
		caps:        outbox.PendingCaps{Default: opts.PendingCaps.Default, PerNamespace: maps.Clone(opts.PendingCaps.PerNamespace)},
		now:         opts.Now,
		windowClaim: opts.WindowClaims,
		sql:         sql,
		channel:     channelName(opts.Schema),
		identity:    id,
		kept:        newKept(opts.RecountInterval),
		keptSQL:     prepareKept(quoted),
	}, nil
}

// withDefaults is New's validation of opts, with its defaults filled in.
func withDefaults(op string, opts Options) (Options, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if err := validateSchema(op, opts.Schema); err != nil {
		return opts, err
	}
	switch {
	case opts.ShardCount < 0:
		return opts, argError(op, "Options.ShardCount", "%d is negative", opts.ShardCount)
	case opts.ShardCount > backpressure.MaxShardCount:
		return opts, argError(op, "Options.ShardCount", "%d is above backpressure.MaxShardCount (%d)", opts.ShardCount, backpressure.MaxShardCount)
	}
	switch {
	case opts.Lease == 0:
		opts.Lease = outbox.DefaultLease
	case opts.Lease < outbox.MinLease:
		return opts, argError(op, "Options.Lease", "%v is below the floor of %v", opts.Lease, outbox.MinLease)
	case opts.Lease > outbox.MaxLease:
		return opts, argError(op, "Options.Lease", "%v is above outbox.MaxLease (%v)", opts.Lease, outbox.MaxLease)
	}
	switch {
	case opts.MaxAttempts == 0:
		opts.MaxAttempts = outbox.DefaultMaxAttempts
	case opts.MaxAttempts < 0:
		return opts, argError(op, "Options.MaxAttempts", "%d is negative", opts.MaxAttempts)
	case int64(opts.MaxAttempts) > outbox.MaxAttemptsLimit:
		return opts, argError(op, "Options.MaxAttempts", "%d is above outbox.MaxAttemptsLimit (%d)", opts.MaxAttempts, outbox.MaxAttemptsLimit)
	}
	if err := opts.PendingCaps.Validate(op, "Options.PendingCaps"); err != nil {
		return opts, fmt.Errorf("pgstore: %w", err)
	}
	return opts, nil
}

// openSchema opens, creates or migrates the schema opts names (see
// open), returning its quoted name and its shard count.
func openSchema(ctx context.Context, op string, pool *pgxpool.Pool, opts Options) (quoted string, shardCount int, err error) {
	quoted = pgx.Identifier{opts.Schema}.Sanitize()
	shardCount, err = open(ctx, pool, opts.Schema, quoted, opts.ShardCount, opts.MustExist)
	var (
		shardErr   *outbox.ShardCountError
		versionErr *outbox.SchemaVersionError
		missing    *outbox.NotExistError
		foreignErr *outbox.ForeignSchemaError
	)
	switch {
	case errors.As(err, &missing), errors.As(err, &foreignErr):
		return "", 0, err
	case errors.As(err, &shardErr), errors.As(err, &versionErr):
		return "", 0, fmt.Errorf("pgstore: %s: schema %s: %w", op, quoted, err)
	case err != nil:
		return "", 0, opError(op+": open schema "+quoted, err)
	}
	// A count recorded by an older version, before New bounded it, can
	// exceed MaxShardCount: no owned-shard fraction could describe it.
	if _, err := backpressure.NewOwnedShardFraction(nil, shardCount); err != nil {
		return "", 0, fmt.Errorf("pgstore: %s: schema %s records an unusable shard count: %w", op, quoted, err)
	}
	return quoted, shardCount, nil
}

// identity tells the store's database and schema from any other: the
// database's name, the oid of the schema's settings table, and the
// schema's random store_id. A copy of the schema elsewhere (a restored
// dump, a database cloned from a template) differs in the name or the oid;
// the random id tells apart schemas that match in both (two clusters built
// alike).
type identity struct {
	database string
	settings uint32
	storeID  string
}

// Open connects a pool to databaseURL (a postgres:// URL or key=value
// string, as pgxpool.ParseConfig takes) and returns a store over it as New
// does. The store owns that pool: Close closes it. Its sessions run with
// jit = off (see "Large backlogs and JIT" in the package doc), unless
// databaseURL sets jit itself.
func Open(ctx context.Context, databaseURL string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, argError("Open", "databaseURL", "%v", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, opError("Open", err)
	}
	s, err := newStore(ctx, "Open", pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// Close marks the store closed; later calls return an error matching
// [outbox.ErrClosed], and every channel [Store.Subscribe] returned is
// closed. The fenced views of the Memberships joined through it
// ([Membership.Store]) are closed with it. It closes the pool only if
// [Open] opened it, never a pool passed to [New]. Closing a closed store
// returns nil; a nil or zero store returns [outbox.ErrClosed].
func (s *Store) Close() error {
	if s == nil || s.pool == nil {
		return closedError("Close")
	}
	if s.closed.Swap(true) {
		return nil
	}
	s.listen.close()
	if s.fence != nil {
		s.fence.store.forget(s)
	}
	s.views.mu.Lock()
	views := s.views.set
	s.views.set = nil
	s.views.mu.Unlock()
	for v := range views { // before the pool closes: no view call reaches it
		_ = v.Close()
	}
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// adopt registers v, a fenced view over s, to be closed with s; if s is
// already closed it closes v now. Close sets closed before it takes
// views.mu, so a view adopted concurrently is closed by one or the other.
func (s *Store) adopt(v *Store) {
	s.views.mu.Lock()
	if !s.closed.Load() {
		if s.views.set == nil {
			s.views.set = map[*Store]struct{}{}
		}
		s.views.set[v] = struct{}{}
		s.views.mu.Unlock()
		return
	}
	s.views.mu.Unlock()
	_ = v.Close()
}

// forget drops v, a fenced view closed on its own, from s's views.
func (s *Store) forget(v *Store) {
	s.views.mu.Lock()
	defer s.views.mu.Unlock()
	delete(s.views.set, v)
}

// Schema returns the schema the store's tables live in ("" for a nil
// store).
func (s *Store) Schema() string {
	if s == nil {
		return ""
	}
	return s.schema
}

// ShardCount returns the shard count rows are placed with: the one recorded
// in the schema (0 for a nil or zero store).
func (s *Store) ShardCount() int {
	if s == nil {
		return 0
	}
	return s.shardCount
}

// Lease returns the claim lease (visibility timeout; 0 for a nil or zero
// store).
func (s *Store) Lease() time.Duration {
	if s == nil {
		return 0
	}
	return s.lease
}
