package backpressure_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/backpressure"
)

// memStore is a small in-memory outbox for the examples and tests: the real
// stores live in the sqlitestore and pgstore modules.
type memStore struct {
	mu     sync.Mutex
	shards int
	now    time.Time
	lease  time.Duration
	seq    int
	token  int64
	rows   []*memRow
	calls  int   // round trips
	fail   error // when set, every call fails with it
}

type memRow struct {
	Key, Namespace, TaskQueue string
	Shard, Seq                int
	Token                     int64
	LeaseUntil                time.Time // zero: pending
	Settled                   bool
}

func newMemStore(shards int) *memStore {
	return &memStore{shards: shards, now: time.Unix(0, 0), lease: time.Minute}
}

func (s *memStore) enqueue(ns, tq string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		s.seq++
		key := fmt.Sprintf("%s/%s/%d", ns, tq, s.seq)
		s.rows = append(s.rows, &memRow{Key: key, Namespace: ns, TaskQueue: tq, Shard: backpressure.ShardFor(key, s.shards), Seq: s.seq})
	}
}

// settleNamespace settles every claimed row of ns, as its workers would.
func (s *memStore) settleNamespace(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		if r.Namespace == ns && s.now.Before(r.LeaseUntil) {
			r.Settled = true
		}
	}
}

func (s *memStore) begin(ctx context.Context, f backpressure.OwnedShardFraction) error {
	s.calls++
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.fail != nil {
		return s.fail
	}
	if f.ShardCount() != s.shards {
		return fmt.Errorf("memstore: fraction has %d shards, store has %d", f.ShardCount(), s.shards)
	}
	return nil
}

func (s *memStore) claimable(r *memRow, f backpressure.OwnedShardFraction) bool {
	return !r.Settled && f.Owns(r.Shard) && !s.now.Before(r.LeaseUntil)
}

func (s *memStore) CountClaimedOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction) (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, f); err != nil {
		return nil, err
	}
	m := map[string]int{}
	for _, r := range s.rows {
		if !r.Settled && f.Owns(r.Shard) && s.now.Before(r.LeaseUntil) {
			m[r.Namespace]++
		}
	}
	return m, nil
}

func (s *memStore) CountPendingOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, f); err != nil {
		return nil, err
	}
	m := map[backpressure.Route]int{}
	for _, r := range s.rows {
		if rt := (backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}); s.claimable(r, f) && m[rt] < capPerRoute {
			m[rt]++
		}
	}
	var out []backpressure.RouteCount
	for rt, n := range m {
		out = append(out, backpressure.RouteCount{Route: rt, Count: n})
	}
	slices.SortFunc(out, func(a, b backpressure.RouteCount) int {
		return cmp.Or(cmp.Compare(a.Route.Namespace, b.Route.Namespace), cmp.Compare(a.Route.TaskQueue, b.Route.TaskQueue))
	})
	return out, nil
}

func (s *memStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]memRow, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(ctx, f); err != nil {
		return nil, err
	}
	var out []memRow
	for _, c := range claims {
		n := 0
		for _, r := range s.rows { // rows are in enqueue order: oldest first
			if n < c.Limit && r.Namespace == c.Route.Namespace && r.TaskQueue == c.Route.TaskQueue && s.claimable(r, f) {
				s.token++
				r.Token, r.LeaseUntil = s.token, s.now.Add(s.lease)
				out = append(out, *r)
				n++
			}
		}
	}
	return out, nil
}

// New and Plan: B = 11 over three tenants. The bursty tenant spread over
// four task queues gets the same share as quiet-a on one (quiet-b needs only
// 2); the odd unit rotates between them from sweep to sweep, and inside
// bursty over its queues.
func ExampleBackpressure_Plan() {
	shards, _ := backpressure.AllShards(64)
	b, err := backpressure.New(backpressure.Config{BatchSize: 11, DefaultQuota: backpressure.Unlimited}, shards)
	if err != nil {
		panic(err)
	}
	snap := backpressure.Snapshot{Pending: []backpressure.RouteCount{
		{Route: backpressure.Route{Namespace: "bursty", TaskQueue: "q1"}, Count: 500},
		{Route: backpressure.Route{Namespace: "bursty", TaskQueue: "q2"}, Count: 500},
		{Route: backpressure.Route{Namespace: "bursty", TaskQueue: "q3"}, Count: 500},
		{Route: backpressure.Route{Namespace: "bursty", TaskQueue: "q4"}, Count: 500},
		{Route: backpressure.Route{Namespace: "quiet-a", TaskQueue: "default"}, Count: 7},
		{Route: backpressure.Route{Namespace: "quiet-b", TaskQueue: "default"}, Count: 2},
	}}
	for sweep := 1; sweep <= 3; sweep++ {
		plan, err := b.Plan(snap)
		if err != nil {
			panic(err)
		}
		fmt.Printf("sweep %d:", sweep)
		for _, c := range plan.Claims {
			fmt.Printf(" %v=%d", c.Route, c.Limit)
		}
		fmt.Println()
	}
	// Output:
	// sweep 1: bursty/q1=2 bursty/q2=1 bursty/q3=1 bursty/q4=1 quiet-a/default=4 quiet-b/default=2
	// sweep 2: bursty/q1=1 bursty/q2=1 bursty/q3=1 bursty/q4=1 quiet-a/default=5 quiet-b/default=2
	// sweep 3: bursty/q1=1 bursty/q2=2 bursty/q3=1 bursty/q4=1 quiet-a/default=4 quiet-b/default=2
}

// Per-node ceilings: a cluster-wide quota of 100 over three nodes that split
// 256 shards. Each node enforces its own ceiling with no central counter;
// the ceilings sum to between the quota and quota + nodes − 1.
func ExampleOwnedShardFraction_Ceiling() {
	owned := [][]int{{}, {}, {}}
	for shard := 0; shard < 256; shard++ {
		owned[shard%3] = append(owned[shard%3], shard)
	}
	sum := 0
	for node, ids := range owned {
		f, err := backpressure.NewOwnedShardFraction(ids, 256)
		if err != nil {
			panic(err)
		}
		fmt.Printf("node %d owns %v: ceiling %d\n", node, f, f.Ceiling(100))
		sum += f.Ceiling(100)
	}
	fmt.Println("sum:", sum)
	// Output:
	// node 0 owns 86/256: ceiling 34
	// node 1 owns 85/256: ceiling 34
	// node 2 owns 85/256: ceiling 34
	// sum: 102
}

// Sweep: one node, a tenant with quota 3 and a backlog, another with quota
// 20. The first sweep claims up to each ceiling; the second finds tenant-a
// still at its ceiling and holds its rows, Pending, until some settle.
// Sweep counts each queue's rows only as deep as its plan can use, so a
// report marked Capped counts at least its Held rows, not all of them.
func ExampleSweep() {
	ctx := context.Background()
	store := newMemStore(16)
	store.enqueue("tenant-a", "emails", 20)
	store.enqueue("tenant-b", "reports", 4)

	shards, _ := backpressure.AllShards(16)
	b, err := backpressure.New(backpressure.Config{
		BatchSize:    20,
		DefaultQuota: 20,
		Quotas:       map[string]int{"tenant-a": 3},
	}, shards)
	if err != nil {
		panic(err)
	}
	for sweep := 1; sweep <= 3; sweep++ {
		rows, plan, err := backpressure.Sweep(ctx, b, store)
		if err != nil {
			panic(err)
		}
		fmt.Printf("sweep %d: claimed %d\n", sweep, len(rows))
		for _, r := range plan.Namespaces {
			atLeast := ""
			if r.Capped {
				atLeast = "≥"
			}
			fmt.Printf("  %s: ceiling %d, claimed %d, granted %d, held %s%d",
				r.Namespace, r.Ceiling, r.Claimed, r.Granted, atLeast, r.Held)
			if r.Held > 0 {
				fmt.Printf(" (%s)", r.Reason)
			}
			fmt.Println()
		}
		if sweep == 2 {
			store.settleNamespace("tenant-a") // its workers finish
		}
	}
	// Output:
	// sweep 1: claimed 7
	//   tenant-a: ceiling 3, claimed 0, granted 3, held ≥17 (at-ceiling)
	//   tenant-b: ceiling 20, claimed 0, granted 4, held 0
	// sweep 2: claimed 0
	//   tenant-a: ceiling 3, claimed 3, granted 0, held ≥9 (at-ceiling)
	//   tenant-b: ceiling 20, claimed 4, granted 0, held 0
	// sweep 3: claimed 3
	//   tenant-a: ceiling 3, claimed 0, granted 3, held ≥2 (at-ceiling)
	//   tenant-b: ceiling 20, claimed 4, granted 0, held 0
}

// SetConfig: pausing a tenant (quota 0) and resuming it, on a running node.
// Pausing revokes nothing: acme's 4 claimed rows keep running, and its
// pending rows stay Pending, held "paused", while globex gets the whole
// batch. Resuming picks the rotation up where it stood.
func ExampleBackpressure_SetConfig() {
	shards, _ := backpressure.AllShards(16)
	cfg := backpressure.Config{BatchSize: 6, DefaultQuota: 10}
	b, err := backpressure.New(cfg, shards)
	if err != nil {
		panic(err)
	}
	snap := backpressure.Snapshot{
		Claimed: map[string]int{"acme": 4},
		Pending: []backpressure.RouteCount{
			{Route: backpressure.Route{Namespace: "acme", TaskQueue: "emails"}, Count: 20},
			{Route: backpressure.Route{Namespace: "globex", TaskQueue: "reports"}, Count: 20},
		},
	}
	sweep := func(label string) {
		plan, err := b.Plan(snap)
		if err != nil {
			panic(err)
		}
		fmt.Println(label)
		for _, r := range plan.Namespaces {
			fmt.Printf("  %s: quota %d, claimed %d, granted %d, held %d %s\n", r.Namespace, r.Quota, r.Claimed, r.Granted, r.Held, r.Reason)
		}
	}
	sweep("running:")

	paused := b.Config()
	paused.Quotas = map[string]int{"acme": 0}
	if err := b.SetConfig(paused); err != nil {
		panic(err)
	}
	sweep("acme paused:")

	if err := b.SetConfig(cfg); err != nil {
		panic(err)
	}
	sweep("acme resumed:")
	// Output:
	// running:
	//   acme: quota 10, claimed 4, granted 3, held 17 budget
	//   globex: quota 10, claimed 0, granted 3, held 17 budget
	// acme paused:
	//   acme: quota 0, claimed 4, granted 0, held 20 paused
	//   globex: quota 10, claimed 0, granted 6, held 14 budget
	// acme resumed:
	//   acme: quota 10, claimed 4, granted 3, held 17 budget
	//   globex: quota 10, claimed 0, granted 3, held 17 budget
}

// Weights: acme pays for three times globex's share. With B = 5 each sweep
// grants 4:1 or 3:2, as the rotation's rounds fall (a round has acme's three
// turns and globex's one), and the cumulative grants follow the weights.
func ExampleConfig_weights() {
	shards, _ := backpressure.AllShards(16)
	b, err := backpressure.New(backpressure.Config{
		BatchSize:    5,
		DefaultQuota: backpressure.Unlimited,
		Weights:      map[string]int{"acme": 3},
	}, shards)
	if err != nil {
		panic(err)
	}
	snap := backpressure.Snapshot{Pending: []backpressure.RouteCount{
		{Route: backpressure.Route{Namespace: "acme", TaskQueue: "emails"}, Count: 100},
		{Route: backpressure.Route{Namespace: "globex", TaskQueue: "reports"}, Count: 100},
	}}
	total := map[string]int{}
	for sweep := 1; sweep <= 4; sweep++ {
		plan, err := b.Plan(snap)
		if err != nil {
			panic(err)
		}
		acme, _ := plan.Namespace("acme")
		globex, _ := plan.Namespace("globex")
		total["acme"] += acme.Granted
		total["globex"] += globex.Granted
		fmt.Printf("sweep %d: acme %d, globex %d; in all %d:%d\n", sweep, acme.Granted, globex.Granted, total["acme"], total["globex"])
	}
	// Output:
	// sweep 1: acme 4, globex 1; in all 4:1
	// sweep 2: acme 3, globex 2; in all 7:3
	// sweep 3: acme 4, globex 1; in all 11:4
	// sweep 4: acme 4, globex 1; in all 15:5
}
