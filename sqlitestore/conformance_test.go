package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the storetest suite on a file database and on an
// in-memory one.
func TestConformance(t *testing.T) {
	for _, kind := range []string{"File", "Memory"} {
		t.Run(kind, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) *storetest.Harness[Row] {
				path := ":memory:"
				if kind == "File" {
					path = filepath.Join(t.TempDir(), "outbox.db")
				}
				return newHarness(t, path, Options{SyncNormal: true})
			})
		})
	}
}

// newHarness opens a store at path with a manual clock and adapts it to
// storetest.
func newHarness(t *testing.T, path string, opts Options) *storetest.Harness[Row] {
	t.Helper()
	clock := storetest.NewClock()
	opts.Now = clock.Now
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &storetest.Harness[Row]{
		Store:      s,
		ShardCount: s.ShardCount(),
		Lease:      s.Lease(),
		Enqueue: func(ctx context.Context, msgs []storetest.Message) (int, error) {
			ms := make([]Message, len(msgs))
			for i, m := range msgs {
				ms[i] = Message(m)
			}
			return s.Enqueue(ctx, ms)
		},
		Settle: func(ctx context.Context, r Row) error { return s.Settle(ctx, r.DispatchKey, r.Token) },
		Retry: func(ctx context.Context, r Row, d time.Duration) error {
			return s.Retry(ctx, r.DispatchKey, r.Token, d)
		},
		Inspect:      func(ctx context.Context, key string) (storetest.RowState, error) { return inspect(ctx, s, key) },
		Key:          func(r Row) string { return r.DispatchKey },
		Now:          clock.Now,
		Advance:      clock.Advance,
		RoundTrips:   s.RoundTrips,
		FailNth:      func(n int) { s.failNth.Store(int64(n)) },
		ErrLeaseLost: ErrLeaseLost,
	}
}

// inspect reads every column of a row, bypassing the round-trip counter.
func inspect(ctx context.Context, s *Store, key string) (storetest.RowState, error) {
	var r storetest.RowState
	var state State
	var id, enqueued, visible, claimed, leaseEnd, settled, ready int64
	err := s.reader.QueryRowContext(ctx, `
SELECT id, dispatch_key, namespace, task_queue, shard, payload, state, attempts, token,
       enqueued_at, visible_at, claimed_at, lease_expires_at, settled_at, ready_at
FROM outbox WHERE dispatch_key = ?`, key).Scan(&id, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &r.Shard,
		&r.Payload, &state, &r.Attempts, &r.Token, &enqueued, &visible, &claimed, &leaseEnd, &settled, &ready)
	if err != nil {
		return r, err
	}
	r.State = storetest.State(state.String())
	r.EnqueuedAt, r.VisibleAt, r.ClaimedAt, r.LeaseExpiresAt = fromNanos(enqueued), fromNanos(visible), fromNanos(claimed), fromNanos(leaseEnd)
	r.Extra = [3]int64{id, settled, ready}
	return r, nil
}
