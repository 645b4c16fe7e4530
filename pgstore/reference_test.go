package pgstore_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestCountsMatchNaiveSQL compares every count statement with a naive
// GROUP BY over the whole table, on random outboxes written directly:
// rows pending, delayed (some due exactly now), leased (live, expired, or
// expiring exactly now; and, though no store call writes one, claimed with
// no lease end, which is never due), and settled, on random shards, with
// all, some or no shards owned, at caps 1, 2 and 5. The reference reads
// state, visible_at and lease_expires_at, not the generated claimable_at.
// The full counts, the windows (After before, on, between and past the
// namespaces, every size up to past all of them) and CountOutboxRows with the
// claimed counts in both forms must all equal it.
func TestCountsMatchNaiveSQL(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const shards = 4
	schema := testSchema(t)
	s, err := pgstore.New(ctx, newPool(t, nil, 2), pgstore.Options{Schema: schema, ShardCount: shards, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{schema}.Sanitize() + ".outbox"
	names := []string{"a", "b", "bb", "c", "d", "é", "z"}
	afters := []string{"", "a", "ba", "bb", "cz", "é", "\U0010ffff"}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 30; trial++ {
		if _, err := adminPool.Exec(ctx, "TRUNCATE "+table); err != nil {
			t.Fatal(err)
		}
		batch := &pgx.Batch{}
		for i := range rng.IntN(40) {
			state, visible, lease := "pending", now.Add(-time.Minute), any(nil)
			switch rng.IntN(7) {
			case 6:
				state = "claimed" // lease NULL
			case 2:
				visible = now.Add(time.Duration(rng.IntN(3)) * time.Hour) // 0: due exactly now
			case 3:
				state, lease = "claimed", now.Add(time.Minute)
			case 4:
				state, lease = "claimed", now.Add(-time.Duration(rng.IntN(2))*time.Minute) // expired, or expiring exactly now
			case 5:
				state = "settled"
			}
			var claimedAt, settledAt any
			if state == "claimed" {
				claimedAt = now
			}
			if state == "settled" {
				settledAt = now
			}
			batch.Queue(`INSERT INTO `+table+` (dispatch_key, namespace, task_queue, shard, payload, state, enqueued_at, visible_at, lease_expires_at, claimed_at, finished_at)
VALUES ($1, $2, $3, $4, '\x', $5, $6, $7, $8, $9, $10)`,
				fmt.Sprint("k", i), names[rng.IntN(len(names))], fmt.Sprint("q", rng.IntN(3)), rng.IntN(shards), state, now.Add(-time.Hour), visible, lease, claimedAt, settledAt)
		}
		if err := adminPool.SendBatch(ctx, batch).Close(); err != nil {
			t.Fatal(err)
		}
		owned := []int{0, 1, 2, 3}
		if rng.IntN(3) > 0 {
			owned = slices.DeleteFunc(owned, func(int) bool { return rng.IntN(3) == 0 })
		}
		f, err := backpressure.NewOwnedShardFraction(owned, shards)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int32, len(owned))
		for i, o := range owned {
			ids[i] = int32(o)
		}
		rows, err := adminPool.Query(ctx, `SELECT namespace, count(*) FROM `+table+`
WHERE state = 'claimed' AND lease_expires_at > $1 AND shard = ANY ($2) GROUP BY 1`, now, ids)
		// (A lease with no end is neither live nor due.)
		if err != nil {
			t.Fatal(err)
		}
		claimedRef := map[string]int{}
		var (
			namespace string
			n         int
		)
		if _, err := pgx.ForEachRow(rows, []any{&namespace, &n}, func() error {
			claimedRef[namespace] = n
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, capPerRoute := range []int{1, 2, 5} {
			rows, err := adminPool.Query(ctx, `SELECT namespace, task_queue, least(count(*), $3) FROM `+table+`
WHERE ((state = 'pending' AND visible_at <= $1) OR (state = 'claimed' AND lease_expires_at <= $1)) AND shard = ANY ($2)
GROUP BY 1, 2 ORDER BY 1, 2`, now, ids, capPerRoute)
			if err != nil {
				t.Fatal(err)
			}
			full, err := pgx.CollectRows(rows, scanReference)
			if err != nil {
				t.Fatal(err)
			}
			where := fmt.Sprintf("trial %d, shards %v, cap %d", trial, owned, capPerRoute)
			got, err := claimerOf(s).CountPendingOutboxRows(ctx, f, capPerRoute)
			if err != nil || !slices.Equal(got, full) {
				t.Fatalf("%s: CountPendingOutboxRows = %v, %v; want %v", where, got, err, full)
			}
			claimed, pending, err := claimerOf(s).CountOutboxRows(ctx, f, withClaimed(backpressure.CountParams{CapPerRoute: capPerRoute}))
			if err != nil || !slices.Equal(pending, full) || !maps.Equal(claimed, claimedRef) {
				t.Fatalf("%s: CountOutboxRows(claimed) = %v, %v, %v; want %v, %v", where, claimed, pending, err, claimedRef, full)
			}
			for _, after := range afters {
				for n := 1; n <= len(names)+1; n++ {
					w := backpressure.CountParams{CapPerRoute: capPerRoute, After: after, Namespaces: n}
					want := windowReference(full, after, n)
					got, err := pendingOf(claimerOf(s).CountOutboxRows(ctx, f, w))
					if err != nil || !slices.Equal(got, want) {
						t.Fatalf("%s: CountOutboxRows(%+v) = %v, %v; want %v (full %v)", where, w, got, err, want, full)
					}
					claimed, pending, err := claimerOf(s).CountOutboxRows(ctx, f, withClaimed(w))
					if err != nil || !slices.Equal(pending, want) || !maps.Equal(claimed, claimedRef) {
						t.Fatalf("%s: CountOutboxRows(claimed, %+v) = %v, %v, %v; want %v, %v", where, w, claimed, pending, err, claimedRef, want)
					}
				}
			}
		}
	}
}

// scanReference scans a (namespace, task queue, count) row of the
// reference query.
func scanReference(row pgx.CollectableRow) (backpressure.RouteCount, error) {
	var rc backpressure.RouteCount
	err := row.Scan(&rc.Route.Namespace, &rc.Route.TaskQueue, &rc.Count)
	return rc, err
}
