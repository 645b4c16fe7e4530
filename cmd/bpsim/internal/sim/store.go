package sim

import (
	"context"
	"errors"
	"time"

	"github.com/outboxkit/backpressure"
)

// row is a claimed outbox row, whichever store claimed it.
type row struct {
	Key        string
	Token      int64
	EnqueuedAt time.Time
	ClaimedAt  time.Time
}

// message is one row to enqueue.
type message struct {
	Key       string
	Namespace string
	TaskQueue string
}

// rowState is what the audit reads back of one dispatch key.
type rowState struct {
	Found    bool
	Settled  bool // the stored state is settled
	State    string
	Attempts int // claims of the row, 1 when it ran exactly once
}

// errLeaseLost is what an adapter's Settle returns when the store says the
// token no longer holds the row: the row was claimed again while a worker
// was still running it.
var errLeaseLost = errors.New("lease lost")

// outbox is what the simulator needs of a store: the planner's
// OutboxStore plus enqueue, the unscoped claim, settle and a read-back for
// the audit. One adapter per store package implements it.
type outbox interface {
	backpressure.OutboxStore[row]
	// Name names the database (and schema or file) in errors.
	Name() string
	Enqueue(ctx context.Context, msgs []message) (inserted int, err error)
	ClaimUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]row, error)
	// Settle settles the row; it returns an error matching errLeaseLost
	// when token is no longer the row's live claim.
	Settle(ctx context.Context, key string, token int64) error
	Inspect(ctx context.Context, key string) (rowState, error)
	Close() error
}

// storeOptions are what every store is opened with.
type storeOptions struct {
	ShardCount int
	Lease      time.Duration
	Now        func() time.Time
}

// database makes one fresh, empty outbox per policy run, and cleans up
// after them.
type database interface {
	// Name names the database in errors and in the report, with no secret.
	Name() string
	// Open returns a fresh, empty outbox named after the policy.
	Open(ctx context.Context, policy string, opts storeOptions) (outbox, error)
	// ReportName is what the report says the policy ran on, once Close
	// has removed it: "" when there is nothing left worth naming.
	ReportName(policy string) string
	// Close releases what Open made (files, schemas, connections).
	Close() error
}
