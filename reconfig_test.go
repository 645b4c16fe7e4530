package backpressure_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
)

// SetConfig while sweeps run (run with -race): every sweep runs with one
// config from start to end, so its plan's budget is one of the batch sizes
// and its reports carry one config's quotas and weights, and no namespace
// ever has more claimed rows than the largest of its ceilings.
func TestSetConfigConcurrentWithSweeps(t *testing.T) {
	store := newMemStore(8)
	for i := 0; i < 12; i++ {
		store.enqueue(fmt.Sprint("ns", i), "q", 40)
	}
	configs := []backpressure.Config{
		{BatchSize: 7, DefaultQuota: 4},
		{BatchSize: 3, DefaultQuota: 6, Quotas: map[string]int{"ns0": 0, "ns1": 2}, Weights: map[string]int{"ns2": 3}},
		{BatchSize: 11, DefaultQuota: 5, Weights: map[string]int{"ns0": 2, "ns3": 7}},
	}
	batches := map[int]int{} // batch size → config
	for i, c := range configs {
		batches[c.BatchSize] = i
	}
	b := newTestBP(t, configs[0], 8)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				rows, p, err := backpressure.Sweep(ctx, b, store)
				if err != nil {
					t.Error(err)
					return
				}
				k, ok := batches[p.Budget]
				if !ok || len(rows) > p.Budget {
					t.Errorf("sweep planned budget %d and claimed %d rows: no config has that batch size", p.Budget, len(rows))
					return
				}
				for _, r := range p.Namespaces {
					want := configs[k].DefaultQuota
					if q, ok := configs[k].Quotas[r.Namespace]; ok {
						want = q
					}
					wantW := 1
					if w, ok := configs[k].Weights[r.Namespace]; ok {
						wantW = w
					}
					if r.Quota != want || r.Weight != wantW {
						t.Errorf("budget %d (config %d): report %+v, want quota %d, weight %d", p.Budget, k, r, want, wantW)
					}
				}
				store.settleNamespace(fmt.Sprint("ns", i%12))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 60; i++ {
			if err := b.SetConfig(configs[i%len(configs)]); err != nil {
				t.Error(err)
				return
			}
			_ = b.Config()
			_ = b.Quota("ns1") + b.Weight("ns2") + b.BatchSize() + b.Ceiling("ns3")
		}
	}()
	wg.Wait()
	claimed, err := store.CountClaimedOutboxRows(ctx, b.OwnedShards())
	require.NoError(t, err)
	for ns, n := range claimed {
		require.LessOrEqual(t, n, 6, "namespace %s: claimed beyond every ceiling", ns)
	}
}
