package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestManyNodes runs a cluster for real: 4 dispatcher nodes on one database,
// owning disjoint quarters of 64 shards, each sweeping with its own
// Backpressure and settling what it claims with a pool of workers, over
// 20,000 rows from 10 tenants, one of them bursty on 50 task queues and
// enqueued first. It shows that every row is settled exactly once and none
// is lost, and that at every sample — a sampler goroutine calling
// CountClaimedOutboxRows per node and over all shards, plus a sample after
// every sweep — each node holds at most its per-node ceiling of each
// tenant's rows, and the cluster at most the sum of the per-node ceilings.
func TestManyNodes(t *testing.T) {
	const (
		nodes, shardCount   = 4, 64
		workersPerNode      = 4
		quietTenants        = 9
		quietRows, burstRow = 1000, 11000 // 9 × 1,000 + 11,000 = 20,000
		burstQueues         = 50
		total               = quietTenants*quietRows + burstRow
	)
	cfg := backpressure.Config{BatchSize: 100, DefaultQuota: 10, Quotas: map[string]int{"bursty": 50}}
	ctx := t.Context()
	schema := testSchema(t)

	// The backlog: the bursty tenant's burst first, then the quiet tenants,
	// so an oldest-first dispatcher would serve nobody else for a while.
	producer, err := pgstore.New(ctx, adminPool, pgstore.Options{Schema: schema, ShardCount: shardCount})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := 0; i < burstRow; i++ {
		msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("bursty/%d", i), Namespace: "bursty", TaskQueue: fmt.Sprintf("q%02d", i%burstQueues)})
	}
	for q := 0; q < quietTenants; q++ {
		ns := fmt.Sprintf("quiet%d", q)
		for i := 0; i < quietRows; i++ {
			msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("%s/%d", ns, i), Namespace: ns, TaskQueue: fmt.Sprintf("q%d", i%(q%3+1))})
		}
	}
	for lo := 0; lo < len(msgs); lo += 1000 {
		if n, err := producer.Enqueue(ctx, msgs[lo:lo+1000]); err != nil || n != 1000 {
			t.Fatalf("Enqueue rows %d..: %d, %v", lo, n, err)
		}
	}
	tenants := []string{"bursty"}
	for q := 0; q < quietTenants; q++ {
		tenants = append(tenants, fmt.Sprintf("quiet%d", q))
	}

	type node struct {
		store  *pgstore.Store
		bp     *backpressure.Backpressure
		shards backpressure.OwnedShardFraction
	}
	cluster := make([]node, nodes)
	sumCeilings := map[string]int{}
	for i := range cluster {
		var owned []int
		for s := i; s < shardCount; s += nodes {
			owned = append(owned, s)
		}
		shards, err := backpressure.NewOwnedShardFraction(owned, shardCount)
		if err != nil {
			t.Fatal(err)
		}
		// synchronous_commit=off: commits need not wait for the WAL flush.
		// Durability across a server crash is not what this test is about,
		// and 20,000 one-row settles would otherwise wait on fsync.
		pool := newPool(t, nil, workersPerNode+2, "synchronous_commit", "off")
		store, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, ShardCount: shardCount})
		if err != nil {
			t.Fatal(err)
		}
		bp, err := backpressure.New(cfg, shards)
		if err != nil {
			t.Fatal(err)
		}
		cluster[i] = node{store, bp, shards}
		for _, ns := range tenants {
			sumCeilings[ns] += bp.Ceiling(ns)
		}
	}
	allShards, _ := backpressure.AllShards(shardCount)

	var (
		mu         sync.Mutex
		violations []string
		settledBy  = map[string]int{} // dispatch key → settles
		order      []string           // tenants, in settle order
		samples    int
		maxCluster = map[string]int{}
		settled    atomic.Int64
		failures   []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, err)
	}
	// check samples one node's claimed rows against its ceilings.
	check := func(where string, n int) {
		claimed, err := claimerOf(cluster[n].store).CountClaimedOutboxRows(ctx, cluster[n].shards)
		if err != nil {
			if ctx.Err() == nil {
				fail(fmt.Errorf("%s: node %d: CountClaimedOutboxRows: %w", where, n, err))
			}
			return
		}
		mu.Lock()
		defer mu.Unlock()
		samples++
		for ns, k := range claimed {
			if c := cluster[n].bp.Ceiling(ns); k > c {
				violations = append(violations, fmt.Sprintf("%s: node %d holds %d rows of %s, ceiling %d", where, n, k, ns, c))
			}
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup

	// The sampler: every node, then the whole cluster in one statement.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			for n := range cluster {
				check("sampler", n)
			}
			claimed, err := claimerOf(producer).CountClaimedOutboxRows(runCtx, allShards)
			if err != nil {
				if runCtx.Err() == nil {
					fail(fmt.Errorf("sampler: cluster CountClaimedOutboxRows: %w", err))
				}
				return
			}
			mu.Lock()
			samples++
			for ns, k := range claimed {
				maxCluster[ns] = max(maxCluster[ns], k)
				if k > sumCeilings[ns] {
					violations = append(violations, fmt.Sprintf("sampler: cluster holds %d rows of %s, sum of ceilings %d", k, ns, sumCeilings[ns]))
				}
			}
			mu.Unlock()
			select {
			case <-runCtx.Done():
			case <-time.After(2 * time.Millisecond): // pacing only, not an assertion
			}
		}
	}()

	for n := range cluster {
		work := make(chan outbox.Row, cfg.BatchSize)
		freed := make(chan struct{}, 1) // a worker settled a row: headroom may be back
		var workers sync.WaitGroup
		for w := 0; w < workersPerNode; w++ {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for r := range work {
					if err := cluster[n].store.Settle(ctx, r.Lease()); err != nil {
						fail(fmt.Errorf("node %d: Settle(%q): %w", n, r.DispatchKey, err))
						continue
					}
					mu.Lock()
					settledBy[r.DispatchKey]++
					order = append(order, r.Namespace)
					mu.Unlock()
					if settled.Add(1) == total {
						stop()
					}
					select {
					case freed <- struct{}{}:
					default:
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { close(work); workers.Wait() }()
			for runCtx.Err() == nil {
				rows, _, err := backpressure.Sweep(runCtx, cluster[n].bp, cluster[n].store.Claimer())
				if err != nil {
					if runCtx.Err() == nil {
						fail(fmt.Errorf("node %d: Sweep: %w", n, err))
					}
					return
				}
				check("after sweep", n)
				for _, r := range rows {
					if !cluster[n].shards.Owns(r.Shard) {
						fail(fmt.Errorf("node %d claimed %q on shard %d, which it does not own", n, r.DispatchKey, r.Shard))
					}
					work <- r
				}
				if len(rows) == 0 { // at its ceilings or out of rows: wait for a settle
					select {
					case <-freed:
					case <-runCtx.Done():
					case <-time.After(20 * time.Millisecond): // pacing only
					}
				}
			}
		}()
	}
	wg.Wait()

	for _, err := range failures {
		t.Error(err)
	}
	for i, v := range violations {
		if i == 20 {
			t.Errorf("… %d violations in all", len(violations))
			break
		}
		t.Error(v)
	}
	if ctx.Err() != nil {
		t.Fatalf("test context ended before every row was settled: %d of %d", settled.Load(), total)
	}

	// Exactly once, none lost: in the workers' records and in the table.
	if len(settledBy) != total {
		t.Errorf("%d distinct rows settled, want %d", len(settledBy), total)
	}
	for key, n := range settledBy {
		if n != 1 {
			t.Errorf("row %q settled %d times", key, n)
		}
	}
	var rows, settledRows, onceClaimed int
	if err := adminPool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'settled'), count(*) FILTER (WHERE attempts = 1)
FROM `+pgx.Identifier{schema}.Sanitize()+`.outbox`).Scan(&rows, &settledRows, &onceClaimed); err != nil {
		t.Fatal(err)
	}
	if rows != total || settledRows != total || onceClaimed != total {
		t.Errorf("outbox: %d rows, %d settled, %d claimed exactly once; want %d of each", rows, settledRows, onceClaimed, total)
	}

	// Fairness, as a consequence of the plan: every tenant was being served
	// from the first sweeps on, though the burst was enqueued first.
	early := map[string]bool{}
	for _, ns := range order[:total/20] {
		early[ns] = true
	}
	for _, ns := range tenants {
		if !early[ns] {
			t.Errorf("tenant %s got nothing in the first %d settles", ns, total/20)
		}
	}
	if samples < 4*nodes {
		t.Errorf("only %d samples taken", samples)
	}
	t.Logf("%d samples; sum of per-node ceilings %v; most claimed at once cluster-wide %v", samples, sumCeilings, maxCluster)
}
