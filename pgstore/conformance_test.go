package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the shared OutboxStore suite, each subtest on a fresh
// store in a schema of its own, with a manual clock, a pool whose tracer
// counts round trips and injects faults, and Inspect reading the table
// directly, so the suite sees every column as PostgreSQL holds it.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
		clock := storetest.NewClock()
		tr := &tracer{}
		pool := newPool(t, tr, 12)
		schema := testSchema(t)
		const lease = 30 * time.Second
		s, err := pgstore.New(t.Context(), pool, pgstore.Options{Schema: schema, Lease: lease, Now: clock.Now})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return &storetest.Harness[outbox.Row]{
			Store:      s,
			ShardCount: s.ShardCount(),
			Lease:      lease,
			Enqueue: func(ctx context.Context, msgs []storetest.Message) (int, error) {
				out := make([]outbox.Message, len(msgs))
				for i, m := range msgs {
					out[i] = outbox.Message{DispatchKey: m.DispatchKey, Namespace: m.Namespace, TaskQueue: m.TaskQueue, Payload: m.Payload}
				}
				return s.Enqueue(ctx, out)
			},
			Settle: func(ctx context.Context, r outbox.Row) error { return s.Settle(ctx, r.Lease()) },
			Retry: func(ctx context.Context, r outbox.Row, d time.Duration) error {
				return s.Retry(ctx, r.Lease(), d, nil)
			},
			Inspect:      func(ctx context.Context, key string) (storetest.RowState, error) { return inspect(ctx, schema, key) },
			Key:          func(r outbox.Row) string { return r.DispatchKey },
			Now:          clock.Now,
			Advance:      clock.Advance,
			RoundTrips:   tr.queries.Load,
			FailNth:      tr.arm,
			ErrLeaseLost: outbox.ErrLeaseLost,
		}
	})
}

// extraColumns are the outbox columns storetest.RowState does not name.
type extraColumns struct {
	ID          int64
	SettledAt   string // RFC 3339, "" when NULL
	ClaimableAt string // RFC 3339, "" when NULL
}

// inspect reads every column of one row straight from the table, through
// the untraced admin pool, so inspection never counts as a store round trip.
func inspect(ctx context.Context, schema, key string) (storetest.RowState, error) {
	var (
		rs                                     storetest.RowState
		state                                  string
		shard, attempts                        int32
		claimedAt, leaseAt, settledAt, claimAt *time.Time
		x                                      extraColumns
	)
	err := adminPool.QueryRow(ctx, `
SELECT dispatch_key, namespace, task_queue, shard, payload, state, attempts, token,
	enqueued_at, visible_at, claimed_at, lease_expires_at, id, finished_at, claimable_at
FROM `+pgx.Identifier{schema}.Sanitize()+`.outbox WHERE dispatch_key = $1`, key).Scan(
		&rs.DispatchKey, &rs.Namespace, &rs.TaskQueue, &shard, &rs.Payload, &state, &attempts, &rs.Token,
		&rs.EnqueuedAt, &rs.VisibleAt, &claimedAt, &leaseAt, &x.ID, &settledAt, &claimAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return rs, outbox.ErrNotFound
	}
	if err != nil {
		return rs, err
	}
	rs.Shard, rs.Attempts, rs.State = int(shard), int(attempts), storetest.State(state)
	if claimedAt != nil {
		rs.ClaimedAt = *claimedAt
	}
	if leaseAt != nil {
		rs.LeaseExpiresAt = *leaseAt
	}
	x.SettledAt, x.ClaimableAt = rfc3339(settledAt), rfc3339(claimAt)
	rs.Extra = x
	return rs, nil
}

func rfc3339(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
