package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// The quick start: a node owning every shard runs a handler over its outbox
// with 8 workers, fair across tenants and capped at 10 running rows per
// tenant. Here the handler stops the dispatcher once it has seen every row;
// a service would stop it on SIGTERM.
func Example() {
	store, _ := memstore.New(memstore.Options{}) // or sqlitestore, pgstore
	defer store.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	_, _ = store.Enqueue(ctx, []outbox.Message{
		{DispatchKey: "order-1", Namespace: "acme", TaskQueue: "email"},
		{DispatchKey: "order-2", Namespace: "acme", TaskQueue: "email"},
		{DispatchKey: "invoice-7", Namespace: "globex", TaskQueue: "billing"},
	})

	owned, _ := backpressure.NewOwnedShardFraction(everyShard(store.ShardCount()), store.ShardCount())
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: 10}, owned)

	var mu sync.Mutex
	var ran []string
	handle := func(ctx context.Context, row outbox.Row) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, row.Namespace+"/"+row.DispatchKey)
		if len(ran) == 3 {
			stop()
		}
		return nil // settle; an error retries, dispatch.Permanent(err) dead-letters
	}
	d, err := dispatch.New(bp, store, handle, dispatch.Options{Workers: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := d.Run(ctx); err != nil { // returns once ctx is done and the shutdown is clean
		fmt.Println(err)
	}

	slices.Sort(ran)
	fmt.Println(ran)
	st, _ := store.Stats(context.Background())
	fmt.Println("settled:", st.Settled, "pending:", st.Pending)
	// Output:
	// [acme/order-1 acme/order-2 globex/invoice-7]
	// settled: 3 pending: 0
}

func everyShard(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
