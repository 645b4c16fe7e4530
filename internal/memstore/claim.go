package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// CountClaimedOutboxRows returns, per namespace, the rows on the owned
// shards that hold a live lease now.
func (s *Store) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	const op = "CountClaimedOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := s.checkShards(shards); err != nil {
		return nil, fmt.Errorf("memstore: %s: %w", op, err)
	}
	now := s.now()
	out := map[string]int{}
	for _, r := range s.st.rows {
		if shards.Owns(r.Shard) && live(&r, now) {
			out[r.Namespace]++
		}
	}
	return out, nil
}

// CountPendingOutboxRows returns, per route with claimable rows on the
// owned shards, their number capped at capPerRoute, sorted by route.
func (s *Store) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	const op = "CountPendingOutboxRows"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := s.checkShards(shards); err != nil {
		return nil, fmt.Errorf("memstore: %s: %w", op, err)
	}
	if err := call(op).Positive("capPerRoute", capPerRoute); err != nil {
		return nil, err
	}
	now := s.now()
	counts := map[backpressure.Route]int{}
	for _, r := range s.st.rows {
		if shards.Owns(r.Shard) && claimable(&r, now) {
			counts[r.Route()] = min(counts[r.Route()]+1, capPerRoute)
		}
	}
	out := make([]backpressure.RouteCount, 0, len(counts))
	for r, n := range counts {
		out = append(out, backpressure.RouteCount{Route: r, Count: n})
	}
	slices.SortFunc(out, func(a, b backpressure.RouteCount) int { return a.Route.Compare(b.Route) })
	return out, nil
}

// ClaimOutboxRowsScoped claims, all or nothing, at most Limit claimable
// rows of each claim's route on the owned shards, highest priority first,
// then oldest (first enqueued), each with a fresh token and a lease of Lease() from now. A claim
// with a Limit below 1, a route [outbox.Route.Validate] rejects, or a
// route named twice is an [*outbox.ArgumentError] and claims nothing.
func (s *Store) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	const op = "ClaimOutboxRowsScoped"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := s.checkShards(shards); err != nil {
		return nil, fmt.Errorf("memstore: %s: %w", op, err)
	}
	if err := call(op).Claims(claims); err != nil {
		return nil, err
	}
	now := s.now()
	next := s.st.clone()
	out := []outbox.Row{}
	for _, c := range claims {
		rows := next.byID(func(r *outbox.Row) bool {
			return r.Route() == c.Route && shards.Owns(r.Shard) && claimable(r, now)
		})
		// Highest priority first, then oldest (byID's order, kept by a
		// stable sort).
		slices.SortStableFunc(rows, func(a, b outbox.Row) int { return b.Priority - a.Priority })
		for _, r := range rows[:min(len(rows), c.Limit)] {
			if err := s.step(op); err != nil {
				return nil, err
			}
			out = append(out, next.claim(r, now, s.lease))
		}
	}
	s.st = next
	return out, nil
}
