package outbox

import (
	"context"
	"time"
)

// DueProber is an optional extension of [Store] that tells a dispatcher
// when the next row becomes claimable, so that an idle dispatcher sweeps
// then rather than at its next poll: a row retried after a short backoff,
// or enqueued with a RunAt a moment ahead, runs when it is due.
type DueProber interface {
	// NextDue returns how long after now (the store's clock) the earliest
	// pending row of the owned shards that is not claimable now becomes
	// claimable (its RunAt: a schedule or the end of a retry delay), and
	// ok true; ok false and 0 when no such row exists. The answer may be
	// early, never late: a store may also count a claimed row's lease
	// expiry, and rows enqueued, retried or requeued after the call are
	// not in it (a caller learns of those otherwise: a notification, its
	// own retries, the poll). It is one statement that reads an index,
	// never the rows; it honours ctx and fails as the store's other calls
	// do (a cancelled ctx, a closed store, shards of another shard count).
	NextDue(ctx context.Context, shards OwnedShardFraction) (wait time.Duration, ok bool, err error)
}
