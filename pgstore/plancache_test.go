package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestCountsUseGenericPlans: pgx prepares every statement, and PostgreSQL
// re-plans a prepared statement on every call while its custom plans look
// cheaper than its generic one. The pending counts and the unscoped claim
// write their LIMIT (and the counts their shortcut) so that both plans
// carry the same estimate; after its
// five custom plans each must run on the generic one, or every sweep pays
// the planning again (about half the count's cost).
func TestCountsUseGenericPlans(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, nil, 1) // one connection: its prepared statements are the store's
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: testSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	// kept keeps its counts, and reads them with its own statements: of
	// every namespace, and of those a notification named.
	kept, err := pgstore.New(ctx, pool, pgstore.Options{Schema: s.Schema(), RecountInterval: pgstore.RecommendedRecountInterval})
	if err != nil {
		t.Fatal(err)
	}
	woken, err := kept.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// recount reads every namespace on every count.
	recount, err := pgstore.New(ctx, pool, pgstore.Options{Schema: s.Schema(), RecountInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	// A backlog deep enough (20,000 rows, 20 routes, analyzed) for the
	// planner's estimates to tell a LIMIT of 5 from an unknown one.
	for batch := 0; batch < 4; batch++ {
		var msgs []outbox.Message
		for i := batch * 5000; i < (batch+1)*5000; i++ {
			msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprint("k", i), Namespace: fmt.Sprint("ns", i%10), TaskQueue: fmt.Sprint("q", i/10%2), Payload: []byte("p")})
		}
		if _, err := s.Enqueue(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adminPool.Exec(ctx, "ANALYZE "+pgx.Identifier{s.Schema(), "outbox"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	for i := 0; i < 10; i++ {
		if _, err := claimerOf(s).CountPendingOutboxRows(ctx, all, 5+i); err != nil {
			t.Fatal(err)
		}
		if _, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, all, 1+i); err != nil {
			t.Fatal(err)
		}
		for _, capPerRoute := range []int{1, 5 + i} {
			w := backpressure.CountParams{CapPerRoute: capPerRoute, After: fmt.Sprint("ns", i%10), Namespaces: 3}
			if _, err := pendingOf(claimerOf(s).CountOutboxRows(ctx, all, w)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := claimerOf(s).CountOutboxRows(ctx, all, withClaimed(w)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := claimerOf(s).CountOutboxRows(ctx, all, withClaimed(backpressure.CountParams{CapPerRoute: 5 + i})); err != nil {
			t.Fatal(err)
		}
		keptCounts(t, kept, all, woken, i)
		if _, err := claimerOf(recount).CountPendingOutboxRows(ctx, all, 5+i); err != nil {
			t.Fatal(err)
		}
	}
	stmts := pgstore.Statements(s)
	for _, name := range []string{"countPending", "countPendingWindow", "sweepCount", "sweepCountWindow", "claimUnscoped", "keptAll", "keptNamespaces"} {
		var generic, custom int64
		err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE strpos(statement, $1) > 0`,
			strings.TrimSpace(stmts[name])).Scan(&generic, &custom)
		if err != nil {
			t.Fatalf("%s: not among the connection's prepared statements: %v", name, err)
		}
		if generic == 0 {
			t.Errorf("%s: %d custom plans and no generic plan in 10 calls; want PostgreSQL to settle on the generic plan", name, custom)
		}
	}
}

// keptCounts makes kept read its counts of every namespace (a cap it
// never read to) and then, after an enqueue it hears of, of one namespace.
func keptCounts(t *testing.T, kept *pgstore.Store, all backpressure.OwnedShardFraction, woken <-chan struct{}, i int) {
	t.Helper()
	ctx := context.Background()
	if _, err := claimerOf(kept).CountPendingOutboxRows(ctx, all, 100+i); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Enqueue(ctx, []outbox.Message{{DispatchKey: fmt.Sprint("kept", i), Namespace: "ns1", TaskQueue: "q0", Payload: []byte("p")}}); err != nil {
		t.Fatal(err)
	}
	<-woken
	if _, err := claimerOf(kept).CountPendingOutboxRows(ctx, all, 100+i); err != nil {
		t.Fatal(err)
	}
}

// TestShardFilterFailsClosed: the shard filter is ($all OR shard = ANY
// ($ids)). A NULL shard list, which a nil []int32 becomes, must match no
// row unless all is set: a bug that loses the owned shards claims nothing
// rather than every shard.
func TestShardFilterFailsClosed(t *testing.T) {
	ctx := context.Background()
	s, err := pgstore.New(ctx, newPool(t, nil, 1), pgstore.Options{Schema: testSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "n", TaskQueue: "q", Payload: []byte("p")}}); err != nil {
		t.Fatal(err)
	}
	count := pgstore.Statements(s)["countPending"]
	for _, all := range []bool{false, true} {
		rows, err := adminPool.Query(ctx, count, nil, []int32(nil), int64(10), all)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if want := map[bool]int{false: 0, true: 1}[all]; n != want {
			t.Errorf("countPending with a NULL shard list and all = %v: %d routes, want %d", all, n, want)
		}
	}
}
