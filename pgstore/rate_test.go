package pgstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestRateBoundAcrossNodes: three nodes with their own buckets and disjoint
// shard sets claim one rate-limited namespace's backlog from PostgreSQL,
// handing shards to each other (released by one before the other takes
// them) at random moments, on a simulated clock passed to PlanAt,
// SpendTokensAt and SetOwnedShardsAt. Counting the rows the store's claims
// returned, over every window of length T the cluster starts at most
// r·T + b + (k − 1) rows, k the nodes owning shards; and it does start
// rows at about the rate over the whole run (see the lower bound below), so
// the bound is not met by starving the namespace.
func TestRateBoundAcrossNodes(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	start := time.Now() // buckets start empty when New builds them: the simulated clock runs from here
	now := start
	s, err := pgstore.New(ctx, newPool(t, nil, 4), pgstore.Options{Schema: schema, ShardCount: 8, Lease: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	const rows = 2000
	var msgs []outbox.Message
	for i := range rows {
		msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("r%05d", i), Namespace: "a", TaskQueue: fmt.Sprintf("q%d", i%3)})
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	rate := backpressure.Rate{PerSecond: 6, Burst: 7}
	cfg := backpressure.Config{BatchSize: 25, DefaultQuota: backpressure.Unlimited, DefaultRate: rate}
	owned := [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7}}
	bps := make([]*backpressure.Backpressure, len(owned))
	frac := func(o []int) backpressure.OwnedShardFraction {
		f, err := backpressure.NewOwnedShardFraction(o, 8)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for i := range bps {
		if bps[i], err = backpressure.New(cfg, frac(owned[i])); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type event struct {
		at      time.Time
		k       int
		started int
	}
	var events []event
	handoffs := 0
	for step := 0; step < 60; step++ {
		now = now.Add(time.Duration(1+rng.IntN(3)) * (time.Second / 8))
		if rng.IntN(4) == 0 { // hand a shard from i to j: released, then taken
			i, j := rng.IntN(len(bps)), rng.IntN(len(bps))
			if i != j && len(owned[i]) > 0 {
				sh := owned[i][rng.IntN(len(owned[i]))]
				owned[i] = slices.DeleteFunc(owned[i], func(x int) bool { return x == sh })
				if err := bps[i].SetOwnedShardsAt(frac(owned[i]), now); err != nil {
					t.Fatal(err)
				}
				owned[j] = append(owned[j], sh)
				if err := bps[j].SetOwnedShardsAt(frac(owned[j]), now); err != nil {
					t.Fatal(err)
				}
				handoffs++
			}
		}
		k := 0
		for _, o := range owned {
			if len(o) > 0 {
				k++
			}
		}
		for _, bp := range bps { // every node sweeps, greedily
			f := bp.OwnedShards()
			pending, err := claimerOf(s).CountPendingOutboxRows(ctx, f, 100)
			if err != nil {
				t.Fatal(err)
			}
			claimed, err := claimerOf(s).CountClaimedOutboxRows(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := bp.PlanAt(backpressure.Snapshot{Claimed: claimed, Pending: pending}, now)
			if err != nil {
				t.Fatal(err)
			}
			var got []outbox.Row
			if len(p.Claims) > 0 {
				if got, err = claimerOf(s).ClaimOutboxRowsScoped(ctx, f, p.Claims); err != nil {
					t.Fatal(err)
				}
			}
			if err := bp.SpendTokensAt(map[string]int{"a": len(got)}, now); err != nil {
				t.Fatal(err)
			}
			events = append(events, event{now, k, len(got)})
		}
	}
	total := 0
	for i := range events {
		sum := 0
		for j := i; j < len(events); j++ {
			sum += events[j].started
			T := events[j].at.Sub(events[i].at).Seconds()
			if bound := rate.PerSecond*T + float64(rate.Burst+events[i].k-1); float64(sum) > bound {
				t.Fatalf("%d rows started in [%v, %v], over r·T + b + k − 1 = %v", sum, events[i].at.Sub(start), events[j].at.Sub(start), bound)
			}
		}
		total += events[i].started
	}
	// Every shard is owned throughout, so the buckets refill r·T in all;
	// every node sweeps greedily at every step (a step is shorter than a
	// bucket takes to fill, so no refill is lost to a full bucket), leaving
	// less than one token; a hand-off drops at most the giver's tokens above
	// its new burst, under 2. So at least r·T − k − 2·hand-offs rows start.
	T := now.Sub(start).Seconds()
	if low := rate.PerSecond*T - float64(len(bps)) - 2*float64(handoffs); float64(total) < low {
		t.Fatalf("%d rows started in %vs at %v/s with %d hand-offs: fewer than %v", total, T, rate.PerSecond, handoffs, low)
	}
	t.Logf("%d rows started in %.1fs of simulated time at a rate of %v/s, burst %d, %d hand-offs", total, T, rate.PerSecond, rate.Burst, handoffs)
}
