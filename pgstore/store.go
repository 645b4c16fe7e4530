package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
)

// Defaults for the zero values of Options.
const (
	DefaultSchema     = "backpressure"
	DefaultShardCount = 64
	DefaultLease      = 30 * time.Second
)

// Options configures a Store. The zero value is valid: every field's zero
// value takes the documented default.
type Options struct {
	// Schema is the PostgreSQL schema that holds the store's tables. It must
	// be a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes, not
	// starting with pg_); it is quoted wherever it appears in SQL. Zero
	// value: "backpressure". Stores in different schemas share nothing.
	Schema string

	// ShardCount is the size of the virtual shard space rows are placed in
	// with backpressure.ShardFor. It is recorded in the schema when the
	// schema is created (or migrated from version 1, which recorded none)
	// and can never change afterwards, since rows keep the shard they were
	// enqueued with: 0 adopts the recorded count (64 for a new schema); any
	// other value must equal it, or New returns a [*ShardCountError]
	// (matching [ErrShardCountMismatch]).
	ShardCount int

	// Lease is the visibility timeout of a claim: a claimed row that is
	// neither settled nor retried within Lease becomes claimable again, so a
	// crashed claimer's rows come back. Zero value: 30s.
	Lease time.Duration

	// Now is the store's clock. Nil, the default, uses the database server's
	// clock (now(), the statement's transaction start), which every node
	// then shares. Tests inject a manual clock; the time is passed to every
	// statement as a parameter.
	Now func() time.Time
}

// Store is a PostgreSQL outbox for many dispatcher nodes sharing one
// database. It implements [backpressure.OutboxStore] for [Row]. A Store is
// safe for concurrent use; many Stores, in one process or many, may share a
// schema. Build one with [New] or [Open].
//
// Every method other than New and Open is one SQL statement (one round
// trip), honours ctx, and returns errors prefixed "pgstore: ". New and Open
// read the schema's version and shard count (two statements) and, only when
// the schema is missing or behind, migrate it in one transaction. Cost
// notes are on each method; n is the outbox's unsettled rows, r the routes
// with unsettled rows.
type Store struct {
	pool       *pgxpool.Pool
	ownsPool   bool
	schema     string
	shardCount int
	lease      time.Duration
	now        func() time.Time
	closed     atomic.Bool
	sql        statements
}

var _ backpressure.OutboxStore[Row] = (*Store)(nil)
var _ backpressure.PendingWindowCounter = (*Store)(nil)

// New returns a store over pool, after validating opts and opening the
// schema. A schema already at [SchemaVersion] is only read, so New needs no
// CREATE privilege then. A missing or older schema is created or migrated
// (idempotent, versioned, under an advisory lock, safe to run from many
// nodes at once); creating the schema itself needs the CREATE privilege on
// the database, migrating an existing one needs ownership of it.
//
// The shard count is settled as Options.ShardCount says: a value that
// differs from the recorded count is a [*ShardCountError] (Op "New"). A
// schema newer than this package is a [*SchemaVersionError]. The store does
// not own pool: Close leaves it open.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, &OptionsError{Field: "pool", Reason: "nil *pgxpool.Pool"}
	}
	if err := ctx.Err(); err != nil {
		return nil, opError("New", err)
	}
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if err := validateSchema(opts.Schema); err != nil {
		return nil, err
	}
	switch {
	case opts.ShardCount < 0:
		return nil, &OptionsError{Field: "ShardCount", Reason: fmt.Sprintf("%d is negative", opts.ShardCount)}
	case int64(opts.ShardCount) > 1<<31-1:
		return nil, &OptionsError{Field: "ShardCount", Reason: fmt.Sprintf("%d does not fit a PostgreSQL integer", opts.ShardCount)}
	}
	switch {
	case opts.Lease == 0:
		opts.Lease = DefaultLease
	case opts.Lease < time.Microsecond:
		return nil, &OptionsError{Field: "Lease", Reason: fmt.Sprintf("%v is below PostgreSQL's microsecond resolution", opts.Lease)}
	}
	quoted := pgx.Identifier{opts.Schema}.Sanitize()
	shardCount, err := open(ctx, pool, opts.Schema, quoted, opts.ShardCount)
	var (
		shardErr   *ShardCountError
		versionErr *SchemaVersionError
	)
	switch {
	case errors.As(err, &shardErr), errors.As(err, &versionErr):
		return nil, err
	case err != nil:
		return nil, opError("New: open schema "+quoted, err)
	}
	return &Store{
		pool:       pool,
		schema:     opts.Schema,
		shardCount: shardCount,
		lease:      opts.Lease,
		now:        opts.Now,
		sql:        prepare(quoted),
	}, nil
}

// Open connects a pool to databaseURL (a postgres:// URL or key=value
// string, as pgxpool.ParseConfig takes) and returns a store over it as New
// does. The store owns that pool: Close closes it. Its sessions run with
// jit = off (see "Large backlogs and JIT" in the package doc), unless
// databaseURL sets jit itself.
func Open(ctx context.Context, databaseURL string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, &OptionsError{Field: "databaseURL", Reason: err.Error()}
	}
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, opError("Open", err)
	}
	s, err := New(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// Close marks the store closed; later calls return [ErrClosed]. It closes
// the pool only if [Open] opened it, never a pool passed to [New]. Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Schema returns the schema the store's tables live in.
func (s *Store) Schema() string { return s.schema }

// ShardCount returns the shard count rows are placed with: the one recorded
// in the schema.
func (s *Store) ShardCount() int { return s.shardCount }

// Lease returns the claim lease (visibility timeout).
func (s *Store) Lease() time.Duration { return s.lease }

// begin is called first by every method: it refuses a closed store and a
// done context, so neither reaches the database.
func (s *Store) begin(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w", op, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return opError(op, err)
	}
	return nil
}

// clock returns the statement time parameter: the injected clock's time, or
// nil so that SQL's coalesce($n, now()) takes the database's clock.
func (s *Store) clock() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

// ownedShards checks the fraction against the store's shard count and
// returns the parameters of the statements' shard filter,
// ($all OR shard = ANY ($ids)): all is true when every shard is owned, so
// the filter costs one test per statement rather than an array search per
// row; else ids lists the owned shards. A filter given all = false and no
// ids matches nothing: it fails closed. none reports that no shard is
// owned.
func (s *Store) ownedShards(op string, shards backpressure.OwnedShardFraction) (ids []int32, all, none bool, err error) {
	if shards.ShardCount() != s.shardCount {
		return nil, false, false, &ShardCountError{Op: op, Store: s.shardCount, Fraction: shards.ShardCount()}
	}
	owned := shards.Owned()
	if len(owned) == s.shardCount {
		return []int32{}, true, false, nil
	}
	ids = make([]int32, len(owned))
	for i, id := range owned {
		ids[i] = int32(id) // < ShardCount, which New bounded to int32
	}
	return ids, false, len(owned) == 0, nil
}
