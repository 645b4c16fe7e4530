package pgstore

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/outbox"
)

// schemaName is the identifier rule for Options.Schema: a lower-case SQL
// identifier that PostgreSQL accepts unquoted, at most 63 bytes (NAMEDATALEN
// − 1), so the quoted and unquoted spellings name the same schema.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func validateSchema(op, name string) error {
	fail := func(reason string) error { return argError(op, "Options.Schema", "%s", reason) }
	switch {
	case !schemaName.MatchString(name):
		return fail(fmt.Sprintf("%q is not a lower-case identifier of 1 to 63 characters [a-z_][a-z0-9_]*", name))
	case strings.HasPrefix(name, "pg_"):
		return fail(fmt.Sprintf("%q: the pg_ prefix is reserved for system schemas", name))
	case name == "information_schema":
		return fail(`"information_schema" is the SQL standard's system schema`)
	}
	return nil
}

// migrations are applied in order, each once, in one transaction under an
// advisory lock, and recorded in {schema}.schema_version. Never edit a
// released migration; append a new one.
//
// The outbox row lifecycle is pending → claimed → (settled | pending again
// by a retry | dead | claimed again after its lease expired), and dead →
// pending by a requeue. claimable_at is derived by the database, so no
// statement can get it out of step: a pending row is claimable from
// visible_at, a claimed row from lease_expires_at (the visibility timeout),
// a settled or dead row never (NULL).
var migrations = []string{
	// 1: the outbox, the claim-token sequence and the indexes that serve
	// the claims and the counts.
	`
CREATE SEQUENCE {schema}.claim_token_seq AS bigint;
CREATE SEQUENCE {schema}.outbox_id_seq AS bigint;

CREATE TABLE {schema}.outbox (
	id               bigint      PRIMARY KEY DEFAULT nextval('{schema}.outbox_id_seq'),
	dispatch_key     text        NOT NULL,
	namespace        text        NOT NULL,
	task_queue       text        NOT NULL,
	shard            integer     NOT NULL CHECK (shard >= 0),
	payload          bytea       NOT NULL,
	state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'claimed', 'settled')),
	attempts         integer     NOT NULL DEFAULT 0,
	token            bigint      NOT NULL DEFAULT 0,
	enqueued_at      timestamptz NOT NULL,
	visible_at       timestamptz NOT NULL,
	claimed_at       timestamptz,
	lease_expires_at timestamptz,
	settled_at       timestamptz,
	claimable_at     timestamptz GENERATED ALWAYS AS (
		CASE state WHEN 'pending' THEN visible_at WHEN 'claimed' THEN lease_expires_at END
	) STORED,
	CONSTRAINT outbox_dispatch_key_key UNIQUE (dispatch_key)
);
ALTER SEQUENCE {schema}.outbox_id_seq OWNED BY {schema}.outbox.id;

-- One index per route serves both the scoped claims (oldest first within a
-- route) and the pending counts: the counts read it index-only, checking
-- claimable_at and shard in the index entry, and find the routes with a
-- loose index scan of its (namespace, task_queue) prefix. A second index
-- keyed by (namespace, task_queue, claimable_at) would tempt the planner,
-- for generic plans, to sort a whole route's backlog for a claim.
CREATE INDEX outbox_route_oldest_idx ON {schema}.outbox (namespace, task_queue, enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state <> 'settled';

-- The unscoped oldest-first claim. Ordering by (enqueued_at, id) rather
-- than id alone leaves the planner no other ordered path: the primary key
-- would also give id order, but walks every settled row kept for audit.
CREATE INDEX outbox_oldest_idx ON {schema}.outbox (enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state <> 'settled';

-- Live-lease counts: a range on lease_expires_at over claimed rows only.
CREATE INDEX outbox_live_lease_idx ON {schema}.outbox (lease_expires_at)
	INCLUDE (namespace, shard) WHERE state = 'claimed';

-- Retention: PurgeSettled deletes the oldest settled rows first.
CREATE INDEX outbox_settled_idx ON {schema}.outbox (settled_at)
	WHERE state = 'settled';
`,

	// 2: the store's settings, one row: the shard count rows are placed
	// with, recorded by the first store that migrates the schema to
	// version 2 (its Options.ShardCount, or 64), and never changed; and
	// the index that bounds the pending counts to claimable rows.
	`
CREATE TABLE {schema}.settings (
	singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	shard_count integer NOT NULL CHECK (shard_count > 0)
);

-- Pending counts walk a route's claimable rows only: claimable_at <= now
-- is a bound of this index's range, so rows in retry back-off and rows
-- under a live lease (claimable_at in the future) are never read. Its
-- predicate is spelled state IN ('pending', 'claimed') — the same rows as
-- state <> 'settled', by the CHECK on state — so that only the counts,
-- which say so, can use it: the claims say state <> 'settled', from which
-- the planner cannot prove this predicate, and keep walking
-- outbox_route_oldest_idx oldest first rather than sorting a route.
CREATE INDEX outbox_route_claimable_idx ON {schema}.outbox (namespace, task_queue, claimable_at)
	INCLUDE (shard) WHERE state IN ('pending', 'claimed');
`,

	// 3: namespace and task_queue in byte order. The root package's
	// planner and the Counter contract order namespaces (and
	// routes) by bytes, as Go's strings.Compare does; under the database's
	// collation (say en_US, where "a" < "B") the walks of the counts and of
	// the window would follow another order, and the window would not be
	// the one the planner's rotation cursor expects. The "C" collation
	// compares bytes, and UTF-8 byte order is code-point order. With the
	// columns in "C", every comparison and ORDER BY on them is in byte
	// order with no COLLATE clause in the statements: a column's implicit
	// collation wins over the default collation of a parameter or a
	// literal. PostgreSQL rebuilds the indexes that use the columns
	// (outbox_route_oldest_idx, outbox_live_lease_idx,
	// outbox_route_claimable_idx), with the same names, keys and
	// predicates, and the table is not rewritten: text to text needs no
	// conversion. The ALTER holds an ACCESS EXCLUSIVE lock on the outbox
	// while the indexes are rebuilt. A new schema gets the same columns:
	// migration 1 creates them, this one sets their collation.
	`
ALTER TABLE {schema}.outbox
	ALTER COLUMN namespace  TYPE text COLLATE "C",
	ALTER COLUMN task_queue TYPE text COLLATE "C";
`,

	// 4: the complete outbox (dead letters, attempts limits, last errors,
	// scheduled rows). A dead row is kept, never claimed (claimable_at is
	// NULL for it), until Requeue or PurgeDead. settled_at becomes
	// finished_at: when a row was settled or dead-lettered. visible_at
	// already is a row's run-at (enqueue time, Message.RunAt, or the end of
	// a retry delay), so scheduled rows need no new column. Rows enqueued
	// before this version get max_attempts 0: no limit, as they had.
	//
	// The claim indexes are rebuilt without dead rows, so that a pile of
	// dead rows at the head of a route is never walked by its claims; their
	// predicate is spelled state NOT IN ('settled', 'dead'), which the
	// claims repeat, and which the planner cannot prove
	// outbox_route_claimable_idx's state IN ('pending', 'claimed') from (see
	// migration 2). Two small partial indexes serve the dead rows:
	// ListDead's page by dispatch key (in byte order) and PurgeDead's oldest
	// first.
	`
ALTER TABLE {schema}.outbox DROP CONSTRAINT outbox_state_check;
ALTER TABLE {schema}.outbox
	ADD CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'claimed', 'settled', 'dead')),
	ADD COLUMN max_attempts integer NOT NULL DEFAULT 0 CHECK (max_attempts >= 0),
	ADD COLUMN last_error   text    NOT NULL DEFAULT '';
ALTER TABLE {schema}.outbox RENAME COLUMN settled_at TO finished_at;

DROP INDEX {schema}.outbox_route_oldest_idx;
CREATE INDEX outbox_route_oldest_idx ON {schema}.outbox (namespace, task_queue, enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state NOT IN ('settled', 'dead');
DROP INDEX {schema}.outbox_oldest_idx;
CREATE INDEX outbox_oldest_idx ON {schema}.outbox (enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state NOT IN ('settled', 'dead');

CREATE INDEX outbox_dead_key_idx ON {schema}.outbox (dispatch_key COLLATE "C")
	WHERE state = 'dead';
CREATE INDEX outbox_finished_dead_idx ON {schema}.outbox (finished_at)
	WHERE state = 'dead';
`,

	// 5: membership (see membership.go). members holds each node's
	// heartbeat lease; shard_owners one row per shard, its owner, the
	// epoch (a fencing token that grows by one at every acquisition) and
	// the ownership lease, all judged by the database's clock; the fenced
	// claims read shard_owners. shard_epochs records every acquisition, an
	// audit of hand-offs (one row per shard per hand-off; old rows may be
	// deleted freely). The shard_owners rows are created by the first
	// Join, when the shard count is known.
	`
CREATE TABLE {schema}.members (
	node             text        PRIMARY KEY COLLATE "C",
	joined_at        timestamptz NOT NULL,
	lease_expires_at timestamptz NOT NULL
);

CREATE TABLE {schema}.shard_owners (
	shard            integer     PRIMARY KEY CHECK (shard >= 0),
	owner            text        COLLATE "C",
	epoch            bigint      NOT NULL DEFAULT 0,
	lease_expires_at timestamptz NOT NULL DEFAULT '-infinity'
);

CREATE TABLE {schema}.shard_epochs (
	shard       integer     NOT NULL,
	epoch       bigint      NOT NULL,
	owner       text        NOT NULL COLLATE "C",
	acquired_at timestamptz NOT NULL,
	PRIMARY KEY (shard, epoch)
);
`,

	// 6: priority (outbox.Message.Priority): within a route, the claims
	// take the highest priority first, then the oldest. The route index
	// that the scoped claims walk is rebuilt keyed (namespace, task_queue,
	// priority DESC, enqueued_at, id), so the walk stays in the index's
	// order with no sort of a route's backlog (TestClaimPlanServesPriority
	// checks the plan); its name, predicate and INCLUDE columns are
	// unchanged. Rows enqueued before this version get priority 0. Adding a
	// column with a constant default rewrites no row; the index rebuild
	// holds a SHARE lock on the outbox (writes wait) while it runs.
	`
ALTER TABLE {schema}.outbox
	ADD COLUMN priority smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000);
DROP INDEX {schema}.outbox_route_oldest_idx;
CREATE INDEX outbox_route_oldest_idx ON {schema}.outbox (namespace, task_queue, priority DESC, enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state NOT IN ('settled', 'dead');
`,

	// 7: one live incarnation per node name (see membership.go): each Join
	// draws a random incarnation, and a heartbeat under a name another
	// incarnation holds under a live lease writes nothing. And the
	// schema's random identity, settings.store_id, which EnqueueTx checks
	// in its statement (with the database's name and the settings table's
	// oid) to refuse a transaction on another database.
	`
ALTER TABLE {schema}.members ADD COLUMN incarnation text NOT NULL DEFAULT '' COLLATE "C";
ALTER TABLE {schema}.settings ADD COLUMN store_id text NOT NULL
	DEFAULT md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text);
`,

	// 8: what operators read and share (operate.go).
	// outbox_namespace_state serves every count of Namespaces as a range,
	// (namespace, state) then claimable_at, and the loose scan of the
	// namespaces: one more index entry per insert and per state change.
	// namespace_settings holds each namespace's shared settings as a JSON
	// object (room for more keys) with the version PutSettings gives it
	// from settings_clock, whose one row also serialises PutSettings;
	// node_reports each dispatcher node's last report until it expires.
	`
CREATE INDEX outbox_namespace_state_idx ON {schema}.outbox (namespace, state, claimable_at);

CREATE TABLE {schema}.settings_clock (
	singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	version   bigint  NOT NULL
);
INSERT INTO {schema}.settings_clock (version) VALUES (0);

CREATE TABLE {schema}.namespace_settings (
	namespace  text        PRIMARY KEY COLLATE "C",
	body       jsonb       NOT NULL,
	version    bigint      NOT NULL,
	updated_at timestamptz NOT NULL
);

CREATE TABLE {schema}.node_reports (
	node        text        PRIMARY KEY COLLATE "C",
	body        jsonb       NOT NULL,
	reported_at timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL
);
`,

	// 9: a message's headers (outbox.Message.Headers), a JSON object of
	// strings; NULL for none, as most rows have. Adding a nullable column
	// without a default rewrites nothing.
	`
ALTER TABLE {schema}.outbox ADD COLUMN headers jsonb;
`,

	// 10: the snoozes of each row (outbox.Snooze, outbox.Row.Snoozes). A
	// constant default is kept in the catalogue: no rewrite.
	`
ALTER TABLE {schema}.outbox ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
`,

	// 11: the audit trail (audit.go): one row per change an operator made,
	// written in the transaction of the change. IDs order the entries;
	// each insert deletes those outbox.MaxAuditEntries or more below it
	// (a range of the primary key). audit_log_namespace_idx serves the
	// listing of one namespace, newest first.
	`
CREATE TABLE {schema}.audit_log (
	id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at        timestamptz NOT NULL,
	operator  text        NOT NULL,
	action    text        NOT NULL,
	namespace text        NOT NULL COLLATE "C",
	before    text        NOT NULL,
	after     text        NOT NULL,
	rows      bigint      NOT NULL,
	detail    text        NOT NULL
);
CREATE INDEX audit_log_namespace_idx ON {schema}.audit_log (namespace, id);
`,

	// 12: the history of the nodes' counters (history.go): one row per
	// node, namespace and report, the point as JSON in body. at is the
	// point's At (Unix microseconds, exact as a bigint) and bucket
	// outbox.HistoryBucketOf(at), by which PruneHistory thins points older
	// than outbox.HistoryFull. history_at_idx serves the listing of every
	// namespace, history_namespace_idx one namespace's, history_thin_idx
	// the prune.
	`
CREATE TABLE {schema}.history (
	id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	node      text   NOT NULL COLLATE "C",
	namespace text   NOT NULL COLLATE "C",
	at        bigint NOT NULL,
	bucket    bigint NOT NULL,
	body      jsonb  NOT NULL
);
CREATE INDEX history_at_idx ON {schema}.history (at, id);
CREATE INDEX history_namespace_idx ON {schema}.history (namespace, at, id);
CREATE INDEX history_thin_idx ON {schema}.history (node, namespace, bucket, at, id);
`,

	// 13: the claiming schema (issue 31): fewer index entries per claimed
	// and per settled row, and keys a Citus cluster distributed by shard
	// accepts (every UNIQUE and PRIMARY KEY holds the distribution column).
	//
	// The dispatch key's uniqueness moves to the primary key (dispatch_key,
	// shard). A row's shard is a function of its key and the recorded shard
	// count, which never changes, so two rows with one key have one shard:
	// the promise is the same, and it is never without an index that keeps
	// it — the new key is built, under this transaction's ACCESS EXCLUSIVE
	// lock, before the old one is dropped. Leading with dispatch_key keeps
	// the lookups by key (Complete, ExtendLeases, Get, Requeue, DeleteDead)
	// one descent of the key, with no shard to pass. id keeps its sequence
	// and order (the claims' tie-break) but loses its index: the claims and
	// the purges update or delete the rows they locked by ctid.
	//
	// The claim indexes (outbox_route_oldest_idx, outbox_oldest_idx) hold
	// pending rows only, so a claim (pending → claimed) and a settle add no
	// entry to them; the claims find the rows whose lease expired through
	// outbox_live_lease_idx (lease_expires_at <= now over claimed rows, an
	// empty range while no lease has expired). outbox_namespace_state_idx
	// leaves out claimed rows, so a claim adds no entry to it either;
	// Namespaces counts claimed rows from outbox_live_lease_idx.
	// outbox_route_claimable_idx (the counts' walk) keeps claimed rows: a
	// claim still adds one entry to it.
	//
	// The outbox's pages are filled to half (fillfactor 50), so that a
	// claim's and a settle's new row version fits on its page: an update
	// that must move its row to another page logs one more record (the old
	// version is marked locked while the page is released). Rows already
	// there keep their pages; new pages are filled to half. The cost is
	// room: a kept settled row takes about twice the heap.
	//
	// Per claimed row: the row lock, the update, and entries in the key,
	// outbox_live_lease_idx and outbox_route_claimable_idx; per settled
	// row: the update, and entries in the key, outbox_settled_idx and
	// outbox_namespace_state_idx. BenchmarkRowCost measures both, before
	// and after (pgstore/EXPLAIN.md, "Database work per row"). The
	// rebuild holds an ACCESS EXCLUSIVE lock on the outbox while it runs;
	// no row is rewritten.
	`
ALTER TABLE {schema}.outbox SET (fillfactor = 50);
ALTER TABLE {schema}.outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE {schema}.outbox ADD CONSTRAINT outbox_key PRIMARY KEY (dispatch_key, shard);
ALTER TABLE {schema}.outbox DROP CONSTRAINT outbox_dispatch_key_key;

DROP INDEX {schema}.outbox_route_oldest_idx;
CREATE INDEX outbox_route_oldest_idx ON {schema}.outbox (namespace, task_queue, priority DESC, enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state = 'pending';
DROP INDEX {schema}.outbox_oldest_idx;
CREATE INDEX outbox_oldest_idx ON {schema}.outbox (enqueued_at, id)
	INCLUDE (shard, claimable_at) WHERE state = 'pending';
DROP INDEX {schema}.outbox_namespace_state_idx;
CREATE INDEX outbox_namespace_state_idx ON {schema}.outbox (namespace, state, claimable_at)
	WHERE state <> 'claimed';
`,
}

// SchemaVersion is the schema version this package migrates to: the number
// of migrations it knows.
const SchemaVersion = 13

// advisoryLock serialises the migrators of one schema.
const advisoryLock = `SELECT pg_advisory_xact_lock(hashtext('github.com/outboxkit/backpressure/pgstore'), hashtext($1))`

// open returns the shard count of a schema at SchemaVersion, migrating it
// first if it is behind. want is Options.ShardCount: 0 adopts the recorded
// count, any other value must equal it.
//
// A schema already at SchemaVersion is only read: two statements, no
// lock, no DDL, so a role with no CREATE privilege (on the database or the
// schema) can open it. Otherwise migrate takes the advisory lock and
// brings it up to date. With mustExist, a schema without the outbox is
// not created: see [missingOutbox].
func open(ctx context.Context, pool *pgxpool.Pool, schema, quoted string, want int, mustExist bool) (int, error) {
	version, shardCount, err := readSchema(ctx, pool, quoted)
	if err != nil {
		// A schema_version of another program can fail the read: say so.
		if ferr := checkForeign(ctx, pool, schema, quoted); ferr != nil {
			return 0, ferr
		}
		return 0, err
	}
	if mustExist && version == 0 {
		return 0, missingOutbox(ctx, pool, schema)
	}
	switch {
	case version > SchemaVersion:
		return 0, &outbox.SchemaVersionError{Database: version, Package: SchemaVersion}
	case version < SchemaVersion || shardCount == 0:
		if shardCount, err = migrate(ctx, pool, schema, quoted, want); err != nil {
			return 0, err
		}
	}
	if want != 0 && want != shardCount {
		return 0, &outbox.ShardCountError{Store: shardCount, Given: want}
	}
	return shardCount, nil
}

// missingOutbox is open's error for Options.MustExist when the schema
// records no version: an *outbox.NotExistError saying whether the schema
// itself or only the outbox's tables are missing.
func missingOutbox(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return err
	}
	kind := "outbox"
	if !exists {
		kind = "schema"
	}
	return &outbox.NotExistError{Pkg: "pgstore", Kind: kind, Name: schema}
}

// readSchema returns the schema's version and recorded shard count, 0 for
// what is not there yet. It creates and locks nothing: the tables are
// looked up with to_regclass first and read only if they exist.
func readSchema(ctx context.Context, pool *pgxpool.Pool, quoted string) (version, shardCount int, err error) {
	var hasVersion, hasSettings bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		quoted+".schema_version", quoted+".settings").Scan(&hasVersion, &hasSettings); err != nil {
		return 0, 0, err
	}
	switch {
	case hasVersion && hasSettings:
		err = pool.QueryRow(ctx, expand(quoted, `SELECT
	(SELECT coalesce(max(version), 0) FROM {schema}.schema_version),
	coalesce((SELECT shard_count FROM {schema}.settings), 0)`)).Scan(&version, &shardCount)
	case hasVersion:
		err = pool.QueryRow(ctx, expand(quoted, `SELECT coalesce(max(version), 0) FROM {schema}.schema_version`)).Scan(&version)
	}
	return version, shardCount, err
}

// migrate brings the schema up to SchemaVersion and returns its shard
// count, recording want (or DefaultShardCount when want is 0) if none is
// recorded yet. It is idempotent and safe to run from many processes at
// once: a transaction-scoped advisory lock, keyed by the schema name,
// serialises concurrent migrators, each migration is recorded in the same
// transaction that applies it (in schema_version, and in the audit trail
// with who from ctx: [outbox.WithOperation]), and the schema itself is created only if it
// does not exist (CREATE SCHEMA needs the CREATE privilege on the
// database, even with IF NOT EXISTS).
func migrate(ctx context.Context, pool *pgxpool.Pool, schema, quoted string, want int) (shardCount int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, advisoryLock, schema); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, expand(quoted, `CREATE SCHEMA {schema}`)); err != nil {
				return err
			}
		} else if err := checkForeign(ctx, tx, schema, quoted); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, expand(quoted, `CREATE TABLE IF NOT EXISTS {schema}.schema_version (
	version    integer     PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`)); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, expand(quoted, `SELECT coalesce(max(version), 0) FROM {schema}.schema_version`)).Scan(&current); err != nil {
			return err
		}
		if current > len(migrations) {
			return &outbox.SchemaVersionError{Database: current, Package: len(migrations)}
		}
		for v := current + 1; v <= len(migrations); v++ {
			if _, err := tx.Exec(ctx, expand(quoted, migrations[v-1])); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
			if _, err := tx.Exec(ctx, expand(quoted, `INSERT INTO {schema}.schema_version (version) VALUES ($1)`), v); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
		}
		if current < len(migrations) {
			if err := recordAuditTx(ctx, tx, quoted, outbox.MigrationAudit(ctx, current, len(migrations))); err != nil {
				return fmt.Errorf("recording the migration: %w", err)
			}
		}
		record := want
		if record == 0 {
			record = DefaultShardCount
		}
		return tx.QueryRow(ctx, expand(quoted, `
WITH recorded AS (
	INSERT INTO {schema}.settings (shard_count) VALUES ($1)
	ON CONFLICT (singleton) DO NOTHING
	RETURNING shard_count
)
SELECT shard_count FROM recorded
UNION ALL
SELECT shard_count FROM {schema}.settings`), record).Scan(&shardCount)
	})
	return shardCount, err
}
