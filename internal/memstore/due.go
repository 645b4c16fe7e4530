package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// NextDue returns how long until the earliest pending row of the owned
// shards that is not claimable now becomes claimable, and true; 0 and
// false when there is none (see [outbox.DueProber]). Claimed rows are not
// counted.
func (s *Store) NextDue(ctx context.Context, shards backpressure.OwnedShardFraction) (time.Duration, bool, error) {
	const op = "NextDue"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.mu.Unlock()
	if err := s.checkShards(shards); err != nil {
		return 0, false, fmt.Errorf("memstore: %s: %w", op, err)
	}
	now := s.now()
	var earliest time.Time
	for _, r := range s.st.rows {
		if r.State == outbox.StatePending && r.RunAt.After(now) && shards.Owns(r.Shard) && (earliest.IsZero() || r.RunAt.Before(earliest)) {
			earliest = r.RunAt
		}
	}
	if earliest.IsZero() {
		return 0, false, nil
	}
	return earliest.Sub(now), true, nil
}
