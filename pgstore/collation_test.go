package pgstore_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// linguistic is a collation whose order is not byte order ("a" < "B"),
// available where PostgreSQL is built with ICU.
const linguistic = "en-US-x-icu"

// hasCollation reports whether the server has the collation name.
func hasCollation(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	if err := adminPool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_collation WHERE collname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// schemaShape describes the outbox table of a schema — its columns with
// their types, collations, defaults and generation, its indexes with their
// validity, and its constraints — as sorted lines with the schema name
// replaced by {schema}, so that two schemas' shapes can be compared.
func schemaShape(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var shape string
	if err := pool.QueryRow(t.Context(), `
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
	SELECT format('column %s %s collate %s not null %s default %s generated %s',
		a.attname, format_type(a.atttypid, a.atttypmod), coalesce(co.collname, '-'), a.attnotnull,
		coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), a.attgenerated) AS line
	FROM pg_catalog.pg_attribute a
	LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
	LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT format('index %s valid %s ready %s', pg_get_indexdef(i.indexrelid), i.indisvalid, i.indisready)
	FROM pg_catalog.pg_index i
	WHERE i.indrelid = $1::regclass
	UNION ALL
	SELECT format('constraint %s %s', c.conname, pg_get_constraintdef(c.oid))
	FROM pg_catalog.pg_constraint c
	WHERE c.conrelid = $1::regclass
	UNION ALL
	SELECT format('options %s', c.reloptions)
	FROM pg_catalog.pg_class c
	WHERE c.oid = $1::regclass
) s`, pgx.Identifier{schema, "outbox"}.Sanitize()).Scan(&shape); err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(shape, schema, "{schema}")
}

// columnCollations returns the collations of the outbox's namespace and
// task_queue columns.
func columnCollations(t *testing.T, pool *pgxpool.Pool, schema string) (namespace, taskQueue string) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), `
SELECT
	max(collation_name) FILTER (WHERE column_name = 'namespace'),
	max(collation_name) FILTER (WHERE column_name = 'task_queue')
FROM information_schema.columns
WHERE table_schema = $1 AND table_name = 'outbox'`, schema).Scan(&namespace, &taskQueue); err != nil {
		t.Fatal(err)
	}
	return namespace, taskQueue
}

// TestRouteColumnsCollateC: a new schema's namespace and task_queue are in
// the "C" collation (byte order), and its indexes are all there and valid.
func TestRouteColumnsCollateC(t *testing.T) {
	schema := testSchema(t)
	if _, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if ns, tq := columnCollations(t, adminPool, schema); ns != "C" || tq != "C" {
		t.Errorf("namespace, task_queue collations = %q, %q; want \"C\", \"C\"", ns, tq)
	}
	shape := schemaShape(t, adminPool, schema)
	for _, index := range []string{
		"outbox_key", "outbox_route_oldest_idx", "outbox_oldest_idx",
		"outbox_live_lease_idx", "outbox_settled_idx", "outbox_route_claimable_idx",
	} {
		if !strings.Contains(shape, "INDEX "+index+" ON {schema}.outbox") {
			t.Errorf("index %s is missing:\n%s", index, shape)
		}
	}
	if strings.Contains(shape, "valid false") || strings.Contains(shape, "ready false") {
		t.Errorf("an index is not valid:\n%s", shape)
	}
}

// TestUpgradeFromVersion2: a version 2 schema (its route columns in a
// linguistic collation where the server has one, as a database with such a
// default collation would have made them) migrates to the shape of a new
// schema, keeps its rows, and counts in byte order.
func TestUpgradeFromVersion2(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	q := pgx.Identifier{schema}.Sanitize()
	setup := "CREATE SCHEMA " + q + `;
CREATE TABLE ` + q + `.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
INSERT INTO ` + q + `.schema_version (version) VALUES (1), (2);
` + pgstore.Migration(1, schema) + pgstore.Migration(2, schema) + `
INSERT INTO ` + q + `.settings (shard_count) VALUES (16);
`
	if hasCollation(t, linguistic) {
		setup += "ALTER TABLE " + q + ".outbox ALTER COLUMN namespace TYPE text COLLATE " + pgx.Identifier{linguistic}.Sanitize() +
			", ALTER COLUMN task_queue TYPE text COLLATE " + pgx.Identifier{linguistic}.Sanitize() + ";\n"
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	spaces := []string{"b", "B", "a", "A", "_"}
	for i, ns := range spaces {
		for j, tq := range []string{"q", "Q"} {
			setup += fmt.Sprintf("INSERT INTO %s.outbox (dispatch_key, namespace, task_queue, shard, payload, enqueued_at, visible_at) VALUES ('k%d%d', '%s', '%s', 0, '\\x', '%s', '%s');\n",
				q, i, j, ns, tq, now.Format(time.RFC3339), now.Format(time.RFC3339))
		}
	}
	if _, err := adminPool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, Now: func() time.Time { return now }})
	if err != nil || s.ShardCount() != 16 {
		t.Fatalf("New on a version 2 schema = %s, %v; want a store over 16 shards", shardsOf(s), err)
	}
	var version, rows int
	if err := adminPool.QueryRow(ctx, "SELECT (SELECT max(version) FROM "+q+".schema_version), (SELECT count(*) FROM "+q+".outbox)").Scan(&version, &rows); err != nil {
		t.Fatal(err)
	}
	if version != pgstore.SchemaVersion || rows != 2*len(spaces) {
		t.Errorf("after the upgrade: version %d with %d rows, want %d with %d", version, rows, pgstore.SchemaVersion, 2*len(spaces))
	}
	fresh := testSchema(t)
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: fresh, ShardCount: 16}); err != nil {
		t.Fatal(err)
	}
	if got, want := schemaShape(t, adminPool, schema), schemaShape(t, adminPool, fresh); got != want {
		t.Errorf("upgraded schema:\n%s\nnew schema:\n%s", got, want)
	}
	all, err := backpressure.AllShards(16)
	if err != nil {
		t.Fatal(err)
	}
	checkByteOrder(t, s, all)
}

// TestPendingWindowByteOrderUnderLinguisticCollation runs the store in a
// database whose default collation is linguistic (en-US, where "_" < "a" <
// "A" < "b" < "B"), so that parameters such as After are in that collation
// too, and checks that the counts and the windows follow byte order.
func TestPendingWindowByteOrderUnderLinguisticCollation(t *testing.T) {
	ctx := t.Context()
	if !hasCollation(t, linguistic) {
		t.Skipf("the server has no %s collation", linguistic)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	db := "pgstore_en_us_" + hex.EncodeToString(b[:])
	if _, err := adminPool.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+
		" TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"); err != nil {
		t.Skipf("cannot create a database with an en-US default collation: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adminPool.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = db
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var linguisticOrder bool
	if err := pool.QueryRow(ctx, `SELECT $1::text < $2::text`, "a", "B").Scan(&linguisticOrder); err != nil {
		t.Fatal(err)
	}
	if !linguisticOrder {
		t.Fatalf(`in database %s "a" < "B" is false: its default collation is byte order`, db)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: "outbox", ShardCount: 4, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if ns, tq := columnCollations(t, pool, "outbox"); ns != "C" || tq != "C" {
		t.Errorf("namespace, task_queue collations = %q, %q; want \"C\", \"C\"", ns, tq)
	}
	var batch []outbox.Message
	for _, ns := range []string{"b", "B", "a", "A", "_", "Z", "é", "E"} {
		for _, tq := range []string{"q", "Q", "_"} {
			batch = append(batch, message(ns, tq, ns+"/"+tq))
		}
	}
	if _, err := s.Enqueue(ctx, batch); err != nil {
		t.Fatal(err)
	}
	all, err := backpressure.AllShards(4)
	if err != nil {
		t.Fatal(err)
	}
	checkByteOrder(t, s, all)
}

// checkByteOrder checks that the store's full counts are in byte order and
// that its windows are the ones byte order gives, for After values between
// and on namespaces whose byte and linguistic orders differ.
func checkByteOrder(t *testing.T, s *pgstore.Store, all backpressure.OwnedShardFraction) {
	t.Helper()
	ctx := t.Context()
	full, err := claimerOf(s).CountPendingOutboxRows(ctx, all, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) == 0 || !slices.IsSortedFunc(full, func(a, b backpressure.RouteCount) int {
		return cmp.Or(strings.Compare(a.Route.Namespace, b.Route.Namespace), strings.Compare(a.Route.TaskQueue, b.Route.TaskQueue))
	}) {
		t.Errorf("full counts not in byte order: %v", full)
	}
	for _, after := range []string{"", "A", "B", "C", "Z", "_", "a", "b", "c", "é", "z"} {
		for n := 1; n <= 9; n++ {
			got, err := pendingOf(claimerOf(s).CountOutboxRows(ctx, all, backpressure.CountParams{CapPerRoute: 10, After: after, Namespaces: n}))
			if err != nil {
				t.Fatal(err)
			}
			if want := windowReference(full, after, n); !slices.Equal(got, want) {
				t.Errorf("after %q, %d namespaces:\n got %v\nwant %v", after, n, got, want)
			}
		}
	}
}
