package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestShardCountIsRecorded: the first store records its shard count in the
// schema; a later store asking for another count is refused with a typed
// error, and one asking for none (0) adopts the recorded count.
func TestShardCountIsRecorded(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		first, recorded int
	}{
		{0, pgstore.DefaultShardCount}, // a new schema with no count asked for: 64
		{16, 16},
	} {
		schema := testSchema(t)
		s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, ShardCount: c.first})
		if err != nil || s.ShardCount() != c.recorded {
			t.Fatalf("New(ShardCount %d) on a new schema = %s, %v; want a store over %d shards", c.first, shardsOf(s), err, c.recorded)
		}
		for _, other := range []int{c.recorded * 2, c.recorded - 1} {
			s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, ShardCount: other})
			var se *outbox.ShardCountError
			if s != nil || !errors.Is(err, outbox.ErrShardCountMismatch) ||
				!errors.As(err, &se) || se.Store != c.recorded || se.Given != other {
				t.Errorf("New(ShardCount %d) on a schema recording %d = %s, %v; want a *ShardCountError", other, c.recorded, shardsOf(s), err)
			}
		}
		for _, same := range []int{0, c.recorded} {
			if s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, ShardCount: same}); err != nil || s.ShardCount() != c.recorded {
				t.Errorf("New(ShardCount %d) on a schema recording %d = %s, %v; want a store over %d shards", same, c.recorded, shardsOf(s), err, c.recorded)
			}
		}
	}
}

// TestShardCountRecordedOnUpgrade: a schema at version 1, which recorded no
// shard count, records the count of the first store that migrates it, and
// keeps it from then on.
func TestShardCountRecordedOnUpgrade(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := adminPool.Exec(ctx, "CREATE SCHEMA "+q+`;
CREATE TABLE `+q+`.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
INSERT INTO `+q+`.schema_version (version) VALUES (1);
`+pgstore.Migration(1, schema)); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, ShardCount: 32})
	if err != nil || s.ShardCount() != 32 {
		t.Fatalf("New(ShardCount 32) on a version 1 schema = %s, %v; want a store over 32 shards", shardsOf(s), err)
	}
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, ShardCount: 64}); !errors.Is(err, outbox.ErrShardCountMismatch) {
		t.Errorf("New(ShardCount 64) after the upgrade recorded 32 = %v, want ErrShardCountMismatch", err)
	}
	if s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema}); err != nil || s.ShardCount() != 32 {
		t.Errorf("New(ShardCount 0) after the upgrade = %s, %v; want 32 shards", shardsOf(s), err)
	}
}

// TestNewOnMigratedSchemaNeedsNoCreatePrivilege opens a migrated schema as
// a role that may use its tables but may create nothing, neither in the
// database nor in the schema: New must only read the schema then.
func TestNewOnMigratedSchemaNeedsNoCreatePrivilege(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	role := "pgstore_app_" + hex.EncodeToString(b[:])
	r, q := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	if _, err := adminPool.Exec(ctx, "CREATE ROLE "+r+" NOLOGIN"); err != nil {
		t.Skipf("cannot create a role to test with: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := adminPool.Exec(ctx, "DROP OWNED BY "+r+"; DROP ROLE "+r); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if _, err := adminPool.Exec(ctx, `GRANT USAGE ON SCHEMA `+q+` TO `+r+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+q+` TO `+r+`;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA `+q+` TO `+r); err != nil {
		t.Fatal(err)
	}
	var mayCreate bool
	if err := adminPool.QueryRow(ctx, "SELECT has_database_privilege($1, current_database(), 'CREATE')", role).Scan(&mayCreate); err != nil {
		t.Fatal(err)
	}
	if mayCreate {
		t.Skipf("PUBLIC has CREATE on the test database, so a role without it cannot be made")
	}

	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+r)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatalf("New on a migrated schema as a role without CREATE: %v", err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	if _, err := s.Enqueue(ctx, []outbox.Message{message("a", "q", "k")}); err != nil {
		t.Fatal(err)
	}
	rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{claim("a", "q", 1)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim = %v, %v", rows, err)
	}
	if err := s.Settle(ctx, rows[0].Lease()); err != nil {
		t.Fatal(err)
	}
	// A schema that is not there yet does need the privilege: New says so
	// with PostgreSQL's error rather than pretending.
	if _, err := pgstore.New(ctx, pool, pgstore.Options{Schema: testSchema(t)}); err == nil {
		t.Errorf("New on a missing schema as a role without CREATE succeeded")
	}
}

// shardsOf describes what New returned, for failure messages.
func shardsOf(s *pgstore.Store) string {
	if s == nil {
		return "no store"
	}
	return fmt.Sprintf("a store over %d shards", s.ShardCount())
}

// TestMigrateVersion3InPlace builds a version 3 schema by hand, with rows in
// each of its states, and opens it: New migrates it to the current version
// in place, keeping every row (a settled row's settled_at becomes its
// finished_at; old rows get no attempts limit), and the rows carry on as
// before: the claimed row settles with its old token, the pending one is
// claimed, dead-lettering works.
func TestMigrateVersion3InPlace(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	q := pgx.Identifier{schema}.Sanitize()
	ddl := "CREATE SCHEMA " + q + `;
CREATE TABLE ` + q + `.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
INSERT INTO ` + q + `.schema_version (version) VALUES (1), (2), (3);
`
	for v := 1; v <= 3; v++ {
		ddl += pgstore.Migration(v, schema) + ";\n"
	}
	ddl += "INSERT INTO " + q + ".settings (shard_count) VALUES (16);"
	if _, err := adminPool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := adminPool.Exec(ctx, `
INSERT INTO `+q+`.outbox (dispatch_key, namespace, task_queue, shard, payload, state, attempts, token, enqueued_at, visible_at, claimed_at, lease_expires_at, settled_at)
VALUES
	('pending', 'a', 'q', $2, 'p', 'pending', 0, 0, $1, $1, NULL, NULL, NULL),
	('claimed', 'a', 'q', $3, 'c', 'claimed', 1, 7, $1, $1, $1, $1 + interval '1 minute', NULL),
	('settled', 'a', 'q', $4, 's', 'settled', 1, 8, $1, $1, $1, $1 + interval '1 minute', $1 + interval '1 second')`,
		now, backpressure.ShardFor("pending", 16), backpressure.ShardFor("claimed", 16), backpressure.ShardFor("settled", 16)); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("New on a version 3 schema: %v", err)
	}
	var version int
	if err := adminPool.QueryRow(ctx, "SELECT max(version) FROM "+q+".schema_version").Scan(&version); err != nil || version != pgstore.SchemaVersion {
		t.Errorf("schema version after New = %d, %v; want %d", version, err, pgstore.SchemaVersion)
	}
	settled, err := s.Get(ctx, "settled")
	if err != nil || settled.State != outbox.StateSettled || !settled.FinishedAt.Equal(now.Add(time.Second)) || string(settled.Payload) != "s" {
		t.Errorf("settled row after the migration = %+v, %v", settled, err)
	}
	claimed, err := s.Get(ctx, "claimed")
	if err != nil || claimed.State != outbox.StateClaimed || claimed.MaxAttempts != 0 || claimed.Token != 7 {
		t.Fatalf("claimed row after the migration = %+v, %v", claimed, err)
	}
	if err := s.Settle(ctx, claimed.Lease()); err != nil {
		t.Errorf("Settle of a row claimed before the migration: %v", err)
	}
	all, _ := backpressure.AllShards(16)
	rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{claim("a", "q", 10)})
	if err != nil || len(rows) != 1 || rows[0].DispatchKey != "pending" {
		t.Fatalf("claim after the migration = %v, %v; want the pending row", rows, err)
	}
	if res, err := s.Complete(ctx, []outbox.Completion{outbox.DeadLetterRow(rows[0], errors.New("bad"))}); err != nil || res[0].State != outbox.StateDead {
		t.Errorf("dead-letter after the migration = %v, %v", res, err)
	}
	if n, err := s.PurgeSettled(ctx, now.Add(time.Hour), 10); err != nil || n != 2 {
		t.Errorf("PurgeSettled after the migration = %d, %v; want 2", n, err)
	}
	// Opening it again is a read: no migration runs twice.
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema}); err != nil {
		t.Errorf("New on the migrated schema: %v", err)
	}
}
