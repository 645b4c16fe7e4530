package pgstore

import (
	"context"
	"fmt"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// The steps every method's call shares: begin, the statement clock and the
// owned shards' parameters.

// begin is called first by every method: it refuses a closed store (a
// fenced view whose parent store is closed included) and a done context,
// so neither reaches the database.
func (s *Store) begin(ctx context.Context, op string) error {
	if s == nil || s.pool == nil || s.closed.Load() || s.fence != nil && s.fence.store.closed.Load() {
		return closedError(op)
	}
	if ctx == nil {
		return argError(op, "ctx", "nil context")
	}
	if err := ctx.Err(); err != nil {
		return opError(op, err)
	}
	return nil
}

// clock returns the statement time parameter: the injected clock's time, or
// nil so that SQL's coalesce($n, now()) takes the database's clock.
func (s *Store) clock() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

// ownedShards checks the fraction against the store's shard count and
// returns the parameters of the statements' shard filter,
// ($all OR shard = ANY ($ids)): all is true when every shard is owned, so
// the filter costs one test per statement rather than an array search per
// row; else ids lists the owned shards. A filter given all = false and no
// ids matches nothing: it fails closed. none reports that no shard is
// owned.
func (s *Store) ownedShards(op string, shards backpressure.OwnedShardFraction) (ids []int32, all, none bool, err error) {
	if shards.ShardCount() != s.shardCount {
		return nil, false, false, fmt.Errorf("pgstore: %s: %w", op, &outbox.ShardCountError{Store: s.shardCount, Given: shards.ShardCount()})
	}
	owned := shards.Owned()
	if len(owned) == s.shardCount {
		return []int32{}, true, false, nil
	}
	ids = make([]int32, len(owned))
	for i, id := range owned {
		ids[i] = int32(id) // < ShardCount ≤ MaxShardCount, which New enforces
	}
	return ids, false, len(owned) == 0, nil
}
