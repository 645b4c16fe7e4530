package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestMigrateVersion12Populated builds a version 12 outbox by its own
// migrations, fills it with 3,000 rows in every state (pending, scheduled,
// claimed under a live lease, claimed under an expired one, settled, dead)
// over 6 namespaces × 2 task queues, and opens it with pgstore.Open (what
// outboxctl migrate runs). The migration keeps every row, column for
// column; leaves the shape of a new schema; and the store then keeps every
// promise over the old rows: a settled key is still deduplicated, the
// claims take exactly the pending rows due and the expired leases, a live
// lease settles with its old token and no other, the dead rows are listed,
// and Namespaces counts what a full count of the rows says.
func TestMigrateVersion12Populated(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	q := pgx.Identifier{schema}.Sanitize()
	const shards = 16
	ddl := "CREATE SCHEMA " + q + `;
CREATE TABLE ` + q + `.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
`
	for v := 1; v <= 12; v++ {
		ddl += pgstore.Migration(v, schema) + ";\n" + fmt.Sprintf("INSERT INTO %s.schema_version (version) VALUES (%d);\n", q, v)
	}
	ddl += fmt.Sprintf("INSERT INTO %s.settings (shard_count) VALUES (%d);", q, shards)
	if _, err := adminPool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// Row i's state is by i % 6; its shard is the key's, as Enqueue
	// places it.
	var keys []string
	var shardOf []int32
	for i := range 3000 {
		k := fmt.Sprintf("k%04d", i)
		keys, shardOf = append(keys, k), append(shardOf, int32(backpressure.ShardFor(k, shards)))
	}
	if _, err := adminPool.Exec(ctx, `
INSERT INTO `+q+`.outbox (dispatch_key, namespace, task_queue, shard, payload, state, attempts, max_attempts, token,
	enqueued_at, visible_at, claimed_at, lease_expires_at, finished_at, last_error, priority, headers, snoozes)
SELECT k, 'ns' || (i % 6), 'q' || (i / 6 % 2), s, convert_to(k, 'UTF8'),
	(ARRAY['pending', 'pending', 'claimed', 'claimed', 'settled', 'dead'])[i % 6 + 1],
	CASE WHEN i % 6 >= 2 THEN 1 ELSE 0 END, i % 3, CASE WHEN i % 6 >= 2 THEN i ELSE 0 END,
	$1::timestamptz - interval '1 hour' + i * interval '1 millisecond',
	CASE i % 6 WHEN 1 THEN $1::timestamptz + interval '1 hour' ELSE $1::timestamptz - interval '1 hour' + i * interval '1 millisecond' END,
	CASE WHEN i % 6 >= 2 THEN $1::timestamptz END,
	CASE i % 6 WHEN 2 THEN $1::timestamptz + interval '1 minute' WHEN 3 THEN $1::timestamptz - interval '1 minute'
		WHEN 4 THEN $1::timestamptz END,
	CASE WHEN i % 6 >= 4 THEN $1::timestamptz - interval '1 second' END,
	CASE i % 6 WHEN 5 THEN 'failed' ELSE '' END, (i % 5) - 2,
	CASE WHEN i % 7 = 0 THEN '{"h": "v"}'::jsonb END, i % 2
FROM unnest($2::text[], $3::int4[]) WITH ORDINALITY AS u (k, s, n), LATERAL (SELECT (u.n - 1)::int AS i) x`, now, keys, shardOf); err != nil {
		t.Fatal(err)
	}
	digest := func() (string, int) {
		t.Helper()
		var d string
		var n int
		if err := adminPool.QueryRow(ctx, `SELECT md5(string_agg(o::text, E'\n' ORDER BY o.dispatch_key)), count(*) FROM `+q+`.outbox o`).Scan(&d, &n); err != nil {
			t.Fatal(err)
		}
		return d, n
	}
	before, rows := digest()
	s, err := pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: schema, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("Open on a populated version 12 schema: %v", err)
	}
	defer s.Close()
	if after, n := digest(); after != before || n != rows || n != 3000 {
		t.Errorf("rows after the migration: %d, digest %s; before: %d, digest %s", n, after, rows, before)
	}
	fresh := testSchema(t)
	if _, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: fresh, ShardCount: shards}); err != nil {
		t.Fatal(err)
	}
	if got, want := schemaShape(t, adminPool, schema), schemaShape(t, adminPool, fresh); got != want {
		t.Errorf("migrated schema:\n%s\nnew schema:\n%s", got, want)
	}

	// Namespaces against a full count of the rows, in the store's terms.
	var want []outbox.NamespaceState
	full, err := adminPool.Query(ctx, `
SELECT namespace,
	count(*) FILTER (WHERE state IN ('pending', 'claimed') AND claimable_at <= $1),
	count(*) FILTER (WHERE state = 'pending' AND claimable_at > $1),
	count(*) FILTER (WHERE state = 'claimed' AND claimable_at > $1),
	count(*) FILTER (WHERE state = 'dead'),
	count(*) FILTER (WHERE state = 'settled')
FROM `+q+`.outbox GROUP BY namespace ORDER BY namespace`, now)
	if err != nil {
		t.Fatal(err)
	}
	var ns string
	var c [5]int
	if _, err := pgx.ForEachRow(full, []any{&ns, &c[0], &c[1], &c[2], &c[3], &c[4]}, func() error {
		want = append(want, outbox.NamespaceState{Namespace: ns, Ready: c[0], Scheduled: c[1], Claimed: c[2], Dead: c[3], Settled: c[4]})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Namespaces(ctx, outbox.NamespacesParams{Cap: outbox.MaxCountCap})
	if err != nil || len(got) != len(want) {
		t.Fatalf("Namespaces = %d states, %v; want %d", len(got), err, len(want))
	}
	for i := range want {
		g := got[i]
		if g.Namespace != want[i].Namespace || g.Ready != want[i].Ready || g.Scheduled != want[i].Scheduled ||
			g.Claimed != want[i].Claimed || g.Dead != want[i].Dead || g.Settled != want[i].Settled {
			t.Errorf("Namespaces[%d] = %+v; want %+v", i, g, want[i])
		}
	}

	// Dedup: no key already there is inserted again, whatever its state.
	var again []outbox.Message
	for i := range 12 {
		again = append(again, message("ns0", "q0", keys[i]))
	}
	if n, err := s.Enqueue(ctx, again); err != nil || n != 0 {
		t.Errorf("Enqueue of 12 keys already there = %d, %v; want 0", n, err)
	}
	// A live lease of before the migration settles with its token, and
	// not with another.
	live, err := s.Get(ctx, keys[2])
	if err != nil || live.State != outbox.StateClaimed || live.Token != 2 {
		t.Fatalf("Get(%s) = %+v, %v", keys[2], live, err)
	}
	stale := live.Lease()
	stale.Token++
	if res, err := s.Complete(ctx, []outbox.Completion{{Lease: stale, Outcome: outbox.Settle}}); err != nil || res[0].State != "" {
		t.Errorf("Complete with a wrong token = %+v, %v; want a lost lease", res, err)
	}
	if err := s.Settle(ctx, live.Lease()); err != nil {
		t.Errorf("Settle of a lease taken before the migration: %v", err)
	}
	// The claims take the pending rows due and the expired leases, no
	// other: rows with i % 6 of 0 or 3.
	all, _ := backpressure.AllShards(shards)
	claimed, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, all, 5000)
	if err != nil || len(claimed) != 1000 {
		t.Fatalf("claim after the migration = %d rows, %v; want 1000", len(claimed), err)
	}
	for j, r := range claimed {
		var i int
		fmt.Sscanf(r.DispatchKey, "k%d", &i)
		if i%6 != 0 && i%6 != 3 {
			t.Errorf("claimed %s (state %d of 6)", r.DispatchKey, i%6)
		}
		if j > 0 && r.EnqueuedAt.Before(claimed[j-1].EnqueuedAt) {
			t.Errorf("claim order: %s after %s", r.DispatchKey, claimed[j-1].DispatchKey)
		}
	}
	dead, err := s.ListDead(ctx, outbox.ListDeadParams{Limit: 1000})
	if err != nil || len(dead) != 500 {
		t.Errorf("ListDead = %d rows, %v; want 500", len(dead), err)
	}
}
