package outbox

import (
	"context"
	"time"
)

// Defaults and floors every store applies to its options.
const (
	// DefaultLease is the lease a store gives a claim when its options
	// leave it 0.
	DefaultLease = 30 * time.Second
	// MinLease is the shortest lease a store accepts: below it a claim
	// could expire before its rows reach a worker, so no completion could
	// ever take effect.
	MinLease = 100 * time.Millisecond
	// DefaultMaxAttempts is the most claims a row gets when neither the
	// store's options nor the message set it.
	DefaultMaxAttempts = 25
)

// Store is the whole contract of an outbox store: enqueueing, batched
// completion and lease extension, dead letters, retention and inspection,
// and, through Claimer, the planner's counts and claim. sqlitestore and
// pgstore implement it; the storetest suite checks an implementation
// against it.
//
// Every method honours ctx (when ctx is done it returns ctx's error, wrapped
// is fine, and changes nothing), and returns an error matching [ErrClosed]
// on a closed or zero store. A method that returns an error other than a
// per-row [Result] changed nothing.
type Store interface {
	// Claimer returns the store's planner-facing calls: the counts and the
	// claim that [backpressure.Sweep] makes, and any of the optional
	// extensions ([Counter], [TxSweeper]) the
	// store implements, found on the returned value by type assertion. It
	// never fails and makes no call to the database: on a closed or zero
	// store the returned value's calls return an error matching
	// [ErrClosed]. Every call returns an equivalent value, so a caller may
	// keep one. A store of one's own may return itself.
	//
	// The planner's calls live behind Claimer, not on the Store, because
	// an application enqueues and inspects rows while only the planner and
	// the dispatcher count and claim them.
	Claimer() OutboxStore[Row]

	Completer

	// Enqueue inserts msgs in one transaction and returns how many rows it
	// inserted: a message whose dispatch key the outbox already holds is
	// skipped (dedup). A batch with any invalid message returns a
	// [*MessageError] and inserts nothing.
	Enqueue(ctx context.Context, msgs []Message) (inserted int, err error)

	// Settle and Retry complete one row: Complete with one entry, its
	// [Result.Err] returned as the error.
	Settle(ctx context.Context, lease Lease) error
	Retry(ctx context.Context, lease Lease, delay time.Duration, cause error) error

	// Get returns the row with dispatchKey whatever its state and shard
	// (for inspection, not claiming), or an error matching [ErrNotFound].
	Get(ctx context.Context, dispatchKey string) (Row, error)

	// Stats counts every row by state.
	Stats(ctx context.Context) (Stats, error)

	// ListDead returns dead rows in dispatch-key order, per p.
	ListDead(ctx context.Context, p ListDeadParams) ([]Row, error)

	// Requeue moves the dead rows among dispatchKeys back to pending,
	// claimable at once with Attempts reset to 0, and returns how many it
	// moved; keys that are not dead are left alone.
	Requeue(ctx context.Context, dispatchKeys []string) (int, error)

	// PurgeSettled deletes up to limit rows settled before before, oldest
	// first, and returns how many; PurgeDead likewise for dead rows. Each
	// call is one short transaction: call it until it returns less than
	// limit. A limit of 0 purges nothing; a negative one is an
	// [ErrInvalidArgument]. A purged key may be enqueued again.
	PurgeSettled(ctx context.Context, before time.Time, limit int) (int, error)
	PurgeDead(ctx context.Context, before time.Time, limit int) (int, error)

	// Lease returns the duration of a claim's lease (and of an extension).
	Lease() time.Duration

	// ShardCount returns the shard count the store's rows are placed with.
	ShardCount() int

	// Close releases the store; every later call but Close returns
	// [ErrClosed]. Closing a closed store returns nil.
	Close() error
}

// Completer is the part of a [Store] a dispatcher needs beyond the
// planner's calls ([Store.Claimer]).
type Completer interface {
	// Complete applies each completion to its row, fenced by its lease,
	// in one statement and one transaction, and returns one [Result] per
	// completion at the same index. Completions are applied row by row: a
	// lost lease is reported in its Result and does not stop the others.
	// An error (a bad argument, the database, ctx) means nothing was
	// applied. Each dispatch key appears at most once per call. An empty
	// call returns an empty, non-nil slice and no error.
	Complete(ctx context.Context, completions []Completion) ([]Result, error)

	// ExtendLeases extends each live lease to Lease() from now (the
	// store's clock), in one statement, and returns one [Result] per lease:
	// a lease already lost is reported, never revived. Each dispatch key
	// appears at most once per call.
	ExtendLeases(ctx context.Context, leases []Lease) ([]Result, error)
}

// Notifier is an optional extension of [Store] that tells a dispatcher
// when rows may have become claimable, so it need not wait a poll
// interval. A notification only says "look": the claim stays the source of
// truth, and polling stays the fallback for a lost notification.
type Notifier interface {
	// Subscribe returns a channel that receives a value soon after any
	// Enqueue or EnqueueTx commits rows (from any process sharing the
	// store, where the store can tell). Notifications are coalesced: the
	// channel holds at most one. It is closed when ctx is done or the
	// store is closed.
	Subscribe(ctx context.Context) (<-chan struct{}, error)
}

// Stats counts rows by state, as [Store.Stats] returns it.
type Stats struct {
	Pending   int // pending and claimable now
	Scheduled int // pending, not claimable until its RunAt (a schedule or a retry delay)
	Claimed   int // claimed with a live lease
	Expired   int // claimed, lease expired: claimable now
	Settled   int
	Dead      int
	Total     int // every row: the sum of the six above
}

// ListDeadParams selects dead rows for [Store.ListDead].
type ListDeadParams struct {
	Namespace string // only this namespace; "" for every namespace
	After     string // only dispatch keys greater than After: the last key of the previous page
	Limit     int    // the most rows returned, 1 to 10,000; 0 means 100
}
