package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// migrations are the schema versions in order: migrations[i] takes the
// database from version i to version i+1. Never edit a released entry;
// append a new one.
//
// Times are INTEGER Unix nanoseconds (0 = none). state is 0 pending,
// 1 claimed, 2 settled, 3 dead. ready_at is when the row is claimable: a
// pending row's run_at, a claimed row's lease_expires_at; a row is
// claimable iff state < 2 AND ready_at <= now, which is what the partial
// indexes serve (settled and dead rows are outside them). The indexes carry
// every column their queries read, so the counts and the claim's row search
// never touch the table. The two state < 2 indexes carry state too: SQLite
// does not infer a column's value from a range condition like state < 2.
// outbox_leased does not need it: its condition is the equality state = 1,
// from which SQLite knows the column (TestQueryPlansUseIndexes checks it).
//
// outbox_routes lists the routes with at least one pending or claimed row:
// Enqueue and Requeue add a route with its first such row, and a
// completion that settles or dead-letters a route's last one deletes it.
//
// outbox_meta holds schema_version, shard_count, last_token (the claim
// token counter), enqueue_seq (bumped by every enqueue, which Subscribe
// polls for) and db_id (a random identity, which EnqueueTx checks the
// caller's transaction against).
var migrations = []string{
	// 1: the outbox, its routes and the claim and count indexes.
	`
CREATE TABLE outbox (
	id               INTEGER PRIMARY KEY,
	dispatch_key     TEXT    NOT NULL UNIQUE,
	namespace        TEXT    NOT NULL,
	task_queue       TEXT    NOT NULL,
	shard            INTEGER NOT NULL,
	payload          BLOB    NOT NULL,
	state            INTEGER NOT NULL DEFAULT 0,
	attempts         INTEGER NOT NULL DEFAULT 0,
	token            INTEGER NOT NULL DEFAULT 0,
	enqueued_at      INTEGER NOT NULL,
	visible_at       INTEGER NOT NULL,
	claimed_at       INTEGER NOT NULL DEFAULT 0,
	lease_expires_at INTEGER NOT NULL DEFAULT 0,
	settled_at       INTEGER NOT NULL DEFAULT 0,
	ready_at         INTEGER NOT NULL
) STRICT;
CREATE INDEX outbox_route_claimable ON outbox (namespace, task_queue, id, ready_at, shard, state) WHERE state < 2;
CREATE INDEX outbox_claimable ON outbox (id, ready_at, shard, state) WHERE state < 2;
CREATE INDEX outbox_leased ON outbox (ready_at, namespace, shard) WHERE state = 1;
CREATE TABLE outbox_routes (
	namespace  TEXT NOT NULL,
	task_queue TEXT NOT NULL,
	PRIMARY KEY (namespace, task_queue)
) STRICT, WITHOUT ROWID;
INSERT INTO outbox_meta (key, value) VALUES ('last_token', 0);
`,
	// 2: dead letters, attempt limits, the last error, scheduled rows
	// (visible_at becomes run_at: a schedule or a retry delay alike),
	// finished_at for settled and dead rows, and what purging, ListDead,
	// Subscribe and EnqueueTx need. migrate sets the limit of the rows
	// that are still pending or claimed to the opening store's.
	`
ALTER TABLE outbox RENAME COLUMN visible_at TO run_at;
ALTER TABLE outbox RENAME COLUMN settled_at TO finished_at;
ALTER TABLE outbox ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
CREATE INDEX outbox_finished ON outbox (state, finished_at) WHERE state >= 2;
CREATE INDEX outbox_dead ON outbox (namespace, dispatch_key) WHERE state = 3;
CREATE INDEX outbox_dead_key ON outbox (dispatch_key) WHERE state = 3;
INSERT INTO outbox_meta (key, value) VALUES ('enqueue_seq', 0), ('db_id', random());
`,
	// 3: priority (outbox.Message.Priority, higher first), stored negated
	// as claim_rank, so that the route index, keyed (claim_rank, id) within
	// a route, walks a route highest priority first, then oldest, and a
	// claim steps from row to row with one row-value range seek,
	// (claim_rank, id) > (r, i), as it stepped by id before. (A generated
	// column would do, but SQLite then does not read the index as
	// covering.) Rows enqueued before this version get priority 0. The
	// index is rebuilt with the same name, predicate and covered columns.
	`
ALTER TABLE outbox ADD COLUMN claim_rank INTEGER NOT NULL DEFAULT 0 CHECK (claim_rank BETWEEN -1000 AND 1000);
DROP INDEX outbox_route_claimable;
CREATE INDEX outbox_route_claimable ON outbox (namespace, task_queue, claim_rank, id, ready_at, shard, state) WHERE state < 2;
`,

	// 4: what operators read and share (operate.go). outbox_namespace_state
	// serves every count of Namespaces as a range, (namespace, state) then
	// ready_at, and the loose scan of the namespaces; it is updated by every
	// insert and state change, one more index entry each. Its predicate,
	// state >= 0, holds for every row but is written by no other statement,
	// so only the statements that repeat it (Namespaces') may use the
	// index: the engine's keep theirs. namespace_settings
	// holds each namespace's shared settings as a JSON object (room for
	// more keys), and the version PutSettings gives it from
	// outbox_meta.settings_version; node_reports each dispatcher node's
	// last report, as JSON, until it expires.
	`
CREATE INDEX outbox_namespace_state ON outbox (namespace, state, ready_at) WHERE state >= 0;
CREATE TABLE namespace_settings (
	namespace  TEXT    PRIMARY KEY,
	body       TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE node_reports (
	node        TEXT    PRIMARY KEY,
	body        TEXT    NOT NULL,
	reported_at INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO outbox_meta (key, value) VALUES ('settings_version', 0);
`,

	// 5: a message's headers (outbox.Message.Headers), JSON text; NULL for
	// none, as most rows have.
	`
ALTER TABLE outbox ADD COLUMN headers TEXT;
`,

	// 6: the snoozes of each row (outbox.Snooze, outbox.Row.Snoozes).
	`
ALTER TABLE outbox ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
`,

	// 7: the audit trail (audit.go): one row per change an operator made,
	// written in the transaction of the change. IDs (the rowid, never
	// reused: AUTOINCREMENT) order the entries; each insert deletes those
	// outbox.MaxAuditEntries or more below it. audit_log_namespace serves
	// the listing of one namespace, newest first.
	`
CREATE TABLE audit_log (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	at        INTEGER NOT NULL,
	operator  TEXT    NOT NULL,
	action    TEXT    NOT NULL,
	namespace TEXT    NOT NULL,
	before    TEXT    NOT NULL,
	after     TEXT    NOT NULL,
	rows      INTEGER NOT NULL,
	detail    TEXT    NOT NULL
) STRICT;
CREATE INDEX audit_log_namespace ON audit_log (namespace, id);
`,

	// 8: the history of the nodes' counters (history.go): one row per
	// node, namespace and report, the point as JSON in body. at is the
	// point's At (Unix nanoseconds) and bucket outbox.HistoryBucketOf(at),
	// by which PruneHistory thins points older than outbox.HistoryFull.
	// history_at serves the listing of every namespace, history_namespace
	// one namespace's, history_thin the prune.
	`
CREATE TABLE history (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	node      TEXT    NOT NULL,
	namespace TEXT    NOT NULL,
	at        INTEGER NOT NULL,
	bucket    INTEGER NOT NULL,
	body      TEXT    NOT NULL
) STRICT;
CREATE INDEX history_at ON history (at, id);
CREATE INDEX history_namespace ON history (namespace, at, id);
CREATE INDEX history_thin ON history (node, namespace, bucket, at, id);
`,

	// 9: the per-namespace counts of Namespaces and NextDue from indexes
	// the hot path writes less. outbox_namespace_state, one entry per row
	// keyed (namespace, state, ready_at), was rewritten (an entry deleted
	// and one inserted) by every claim and every completion. In its place,
	// one partial index per state, each keyed by namespace first:
	// outbox_pending (state 0), which a claim deletes from and a retry
	// inserts into; outbox_leased re-keyed (namespace, ready_at, shard)
	// (state 1), which a claim and a completion already wrote;
	// outbox_settled (state 2), which a settling completion inserts into;
	// and outbox_dead (state 3) as it was. A claim and a settle together
	// now write two index entries for these counts rather than four.
	// CountClaimedOutboxRows reads outbox_leased whole (every claimed row,
	// live or expired, in namespace order) rather than the live range of
	// it. Indexes only: every row is kept as it is.
	`
DROP INDEX outbox_namespace_state;
DROP INDEX outbox_leased;
CREATE INDEX outbox_leased ON outbox (namespace, ready_at, shard) WHERE state = 1;
CREATE INDEX outbox_pending ON outbox (namespace, ready_at, shard) WHERE state = 0;
CREATE INDEX outbox_settled ON outbox (namespace) WHERE state = 2;
`,
}

// schemaVersion is the newest schema version this package knows.
var schemaVersion = len(migrations)

// meta is what outbox_meta says about a database; all zero for a database
// without the outbox.
type meta struct {
	version, shardCount int
	dbID                int64
}

// readMeta reads the schema version, shard count and identity without
// taking the write lock: plain reads, each in its own snapshot.
func readMeta(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (meta, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'outbox_meta'`).Scan(&n); err != nil {
		return meta{}, err
	}
	if n == 0 {
		return meta{}, nil
	}
	var m meta
	err := q.QueryRowContext(ctx, `
SELECT coalesce((SELECT value FROM outbox_meta WHERE key = 'schema_version'), 0),
       coalesce((SELECT value FROM outbox_meta WHERE key = 'shard_count'), 0),
       coalesce((SELECT value FROM outbox_meta WHERE key = 'db_id'), 0)`).Scan(&m.version, &m.shardCount, &m.dbID)
	return m, err
}

// adopt checks m against this package and the shard count asked for, and
// takes its shard count and identity.
func (s *Store) adopt(m meta, want int) error {
	switch {
	case m.version > schemaVersion:
		return &outbox.SchemaVersionError{Database: m.version, Package: schemaVersion}
	case m.version == 0 || m.shardCount == 0:
		return argError("Open", "path", "holds no outbox")
	case want != 0 && want != m.shardCount:
		return &outbox.ShardCountError{Store: m.shardCount, Given: want}
	}
	// A count recorded by an older version, before Open bounded it, can
	// exceed MaxShardCount: no owned-shard fraction could describe it.
	if _, err := backpressure.NewOwnedShardFraction(nil, m.shardCount); err != nil {
		return fmt.Errorf("sqlitestore: Open: the database records an unusable shard count: %w", err)
	}
	s.shardCount, s.dbID = m.shardCount, m.dbID
	return nil
}

// settleSchema reads the schema version and, only when the database is not
// current, migrates it in one write transaction; either way it settles the
// shard count and the database's identity.
func (s *Store) settleSchema(ctx context.Context, want int) error {
	m, err := readMeta(ctx, s.writer)
	if err != nil {
		return s.foreignOr(ctx, s.writer, fmt.Errorf("read schema version: %w", err))
	}
	if m.version == schemaVersion && m.shardCount != 0 {
		return s.adopt(m, want)
	}
	if m.version > schemaVersion {
		return &outbox.SchemaVersionError{Database: m.version, Package: schemaVersion}
	}
	if m, err = migrate(ctx, s.writer, s.now, s.pathOf(), want, s.maxAttempts); err != nil {
		return err
	}
	return s.adopt(m, want)
}

// migrate brings the database to schemaVersion in one BEGIN IMMEDIATE
// transaction, recording want (or defaultShardCount when want is 0) as the
// shard count of a new database, and returns what outbox_meta then says.
// It begins the transaction itself on one connection, whatever the DSN's
// _txlock: a deferred transaction would read the schema before it writes,
// and could then fail to upgrade a stale snapshot. Under the lock, before
// any DDL, it refuses a database with foreign objects (checkForeign) of
// the file at path. It records the migration in the audit trail, at now,
// with who from ctx ([outbox.WithOperation]).
func migrate(ctx context.Context, db *sql.DB, now func() time.Time, path string, want, maxAttempts int) (m meta, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return meta{}, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return meta{}, fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			// A fresh context: the rollback must run even when ctx is done.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	if err := checkForeign(ctx, conn, path); err != nil {
		return meta{}, err
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT, WITHOUT ROWID`); err != nil {
		return meta{}, fmt.Errorf("migrate: %w", err)
	}
	version, err := metaValue(ctx, conn, "schema_version")
	if err != nil {
		return meta{}, err
	}
	if version > int64(schemaVersion) {
		return meta{}, &outbox.SchemaVersionError{Database: int(version), Package: schemaVersion}
	}
	for v := int(version); v < schemaVersion; v++ {
		if _, err := conn.ExecContext(ctx, migrations[v]); err != nil {
			return meta{}, fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
		if v+1 == 2 {
			if _, err := conn.ExecContext(ctx, `UPDATE outbox SET max_attempts = ? WHERE state < 2`, maxAttempts); err != nil {
				return meta{}, fmt.Errorf("migrate to version 2: %w", err)
			}
		}
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO outbox_meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, schemaVersion); err != nil {
		return meta{}, fmt.Errorf("migrate: %w", err)
	}
	if version < int64(schemaVersion) {
		if err := recordAudit(ctx, conn, now(), outbox.MigrationAudit(ctx, int(version), schemaVersion)); err != nil {
			return meta{}, fmt.Errorf("migrate: recording it: %w", err)
		}
	}
	stored, err := metaValue(ctx, conn, "shard_count")
	if err != nil {
		return meta{}, err
	}
	shardCount := int(stored)
	switch {
	case stored == 0 && want == 0:
		shardCount = defaultShardCount
	case stored == 0:
		shardCount = want
	case want != 0 && int64(want) != stored:
		return meta{}, &outbox.ShardCountError{Store: int(stored), Given: want}
	}
	if stored == 0 {
		if _, err := conn.ExecContext(ctx, `INSERT INTO outbox_meta (key, value) VALUES ('shard_count', ?)`, shardCount); err != nil {
			return meta{}, fmt.Errorf("migrate: %w", err)
		}
	}
	id, err := metaValue(ctx, conn, "db_id")
	if err != nil {
		return meta{}, err
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return meta{}, fmt.Errorf("migrate: %w", err)
	}
	return meta{version: schemaVersion, shardCount: shardCount, dbID: id}, nil
}

// metaValue returns outbox_meta's value for key, or 0 when it has none.
func metaValue(ctx context.Context, tx *sql.Conn, key string) (int64, error) {
	var v int64
	err := tx.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	return v, nil
}
