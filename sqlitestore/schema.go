package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// migrations are the schema versions in order: migrations[i] takes the
// database from version i to version i+1. Never edit a released entry;
// append a new one.
//
// Times are INTEGER Unix nanoseconds (0 = none). state is 0 pending,
// 1 claimed, 2 settled. ready_at is when the row is claimable: a pending
// row's visible_at, a claimed row's lease_expires_at; a row is claimable
// iff state < 2 AND ready_at <= now, which is what the partial indexes
// serve. The indexes carry every column their queries read, so the counts
// and the claim's row search never touch the table. The two state < 2
// indexes carry state too: SQLite does not infer a column's value from a
// range condition like state < 2. outbox_leased does not need it: its
// condition is the equality state = 1, from which SQLite knows the column
// (EXPLAIN QUERY PLAN shows CountClaimedOutboxRows using it as a covering
// index; TestQueryPlansUseIndexes checks it).
//
// outbox_routes lists the routes with at least one unsettled row: Enqueue
// adds a route with its first new row, and Settle deletes it with its last
// unsettled row.
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
}

// schemaVersion is the newest schema version this package knows.
var schemaVersion = len(migrations)

// migrate brings the database to schemaVersion in one write transaction and
// settles the shard count: it returns the count the rows are placed with,
// recording want (or defaultShardCount when want is 0) in a new database.
func migrate(ctx context.Context, db *sql.DB, want int) (shardCount int, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT, WITHOUT ROWID`); err != nil {
		return 0, fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	version, err := metaValue(ctx, tx, "schema_version")
	if err != nil {
		return 0, err
	}
	if version > int64(schemaVersion) {
		return 0, &SchemaVersionError{Database: int(version), Known: schemaVersion}
	}
	for v := int(version); v < schemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return 0, fmt.Errorf("sqlitestore: migrate to version %d: %w", v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, schemaVersion); err != nil {
		return 0, fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	stored, err := metaValue(ctx, tx, "shard_count")
	if err != nil {
		return 0, err
	}
	switch {
	case stored == 0 && want == 0:
		shardCount = defaultShardCount
	case stored == 0:
		shardCount = want
	case want == 0 || int64(want) == stored:
		shardCount = int(stored)
	default:
		return 0, &ShardCountError{Store: int(stored), Given: want}
	}
	if stored == 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_meta (key, value) VALUES ('shard_count', ?)`, shardCount); err != nil {
			return 0, fmt.Errorf("sqlitestore: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	return shardCount, nil
}

// metaValue returns outbox_meta's value for key, or 0 when it has none.
func metaValue(ctx context.Context, tx *sql.Tx, key string) (int64, error) {
	var v int64
	err := tx.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: read %s: %w", key, err)
	}
	return v, nil
}
