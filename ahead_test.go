package backpressure_test

import (
	"context"
	"slices"
	"testing"

	"github.com/outboxkit/backpressure"
)

// valueStore is a store passed by value whose type is comparable but whose
// value need not be: an interface field may hold a slice, and == on two
// such values panics.
type valueStore struct {
	c   *memFullCounter
	tag any
}

func (v valueStore) CountClaimedOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction) (map[string]int, error) {
	return v.c.CountClaimedOutboxRows(ctx, f)
}

func (v valueStore) CountPendingOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	return v.c.CountPendingOutboxRows(ctx, f, capPerRoute)
}

func (v valueStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]memRow, error) {
	return v.c.ClaimOutboxRowsScoped(ctx, f, claims)
}

func (v valueStore) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	return v.c.CountOutboxRows(ctx, f, p)
}

// TestSweepAheadUncomparableStore: SweepAhead on a store whose type is
// comparable but whose value is not (a slice in an interface field) must
// not panic comparing it with the store its counts were read ahead on; it
// never uses such counts, so it claims exactly what SweepN claims.
func TestSweepAheadUncomparableStore(t *testing.T) {
	ctx := context.Background()
	all, err := backpressure.AllShards(4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}
	stores := [2]*memStore{newMemStore(4), newMemStore(4)}
	bps := [2]*backpressure.Backpressure{}
	for i, s := range stores {
		s.enqueue("a", "q", 10)
		s.enqueue("b", "q", 7)
		if bps[i], err = backpressure.New(cfg, all); err != nil {
			t.Fatal(err)
		}
	}
	ahead := valueStore{c: &memFullCounter{memWindowStore: &memWindowStore{memStore: stores[0]}}, tag: []int{1}}
	plain := &memFullCounter{memWindowStore: &memWindowStore{memStore: stores[1]}}
	for sweep := 0; sweep < 6; sweep++ {
		got, _, err1 := backpressure.SweepAhead(ctx, bps[0], ahead, 4)
		backpressure.WaitAhead(bps[0])
		want, _, err2 := backpressure.SweepN(ctx, bps[1], plain, 4)
		if err1 != nil || err2 != nil {
			t.Fatalf("sweep %d: SweepAhead: %v; SweepN: %v", sweep, err1, err2)
		}
		if !slices.Equal(keysOf(got), keysOf(want)) {
			t.Fatalf("sweep %d: SweepAhead claimed %v, SweepN %v", sweep, keysOf(got), keysOf(want))
		}
	}
}

func keysOf(rows []memRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key
	}
	return out
}
