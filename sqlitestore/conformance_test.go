package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the storetest suite on a file database and on an
// in-memory one.
func TestConformance(t *testing.T) {
	for _, kind := range []string{"File", "Memory"} {
		t.Run(kind, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
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
func newHarness(t *testing.T, path string, opts Options) *storetest.Harness[outbox.Row] {
	t.Helper()
	clock := storetest.NewClock()
	opts.Now = clock.Now
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &storetest.Harness[outbox.Row]{
		Store:      s,
		ShardCount: s.ShardCount(),
		Lease:      s.Lease(),
		Enqueue: func(ctx context.Context, msgs []storetest.Message) (int, error) {
			ms := make([]outbox.Message, len(msgs))
			for i, m := range msgs {
				ms[i] = outbox.Message{DispatchKey: m.DispatchKey, Namespace: m.Namespace, TaskQueue: m.TaskQueue, Payload: m.Payload}
			}
			return s.Enqueue(ctx, ms)
		},
		Settle: func(ctx context.Context, r outbox.Row) error { return s.Settle(ctx, r.Lease()) },
		Retry: func(ctx context.Context, r outbox.Row, d time.Duration) error {
			return s.Retry(ctx, r.Lease(), d, nil)
		},
		Inspect:      func(ctx context.Context, key string) (storetest.RowState, error) { return inspect(ctx, s, key) },
		Key:          func(r outbox.Row) string { return r.DispatchKey },
		Now:          clock.Now,
		Advance:      clock.Advance,
		RoundTrips:   s.RoundTrips,
		FailNth:      func(n int) { s.failNth.Store(int64(n)) },
		ErrLeaseLost: outbox.ErrLeaseLost,
	}
}

// inspect reads every column of a row, bypassing the round-trip counter.
func inspect(ctx context.Context, s *Store, key string) (storetest.RowState, error) {
	var r storetest.RowState
	var state, maxAttempts int
	var id, enqueued, runAt, claimed, leaseEnd, finished, ready int64
	var lastError string
	err := s.reader.QueryRowContext(ctx, `
SELECT id, dispatch_key, namespace, task_queue, shard, payload, state, attempts, token,
       enqueued_at, run_at, claimed_at, lease_expires_at, finished_at, ready_at, max_attempts, last_error
FROM outbox WHERE dispatch_key = ?`, key).Scan(&id, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &r.Shard,
		&r.Payload, &state, &r.Attempts, &r.Token, &enqueued, &runAt, &claimed, &leaseEnd, &finished, &ready, &maxAttempts, &lastError)
	if err != nil {
		return r, err
	}
	r.State = storetest.State(stateOf(state))
	r.EnqueuedAt, r.VisibleAt, r.ClaimedAt, r.LeaseExpiresAt = fromNanos(enqueued), fromNanos(runAt), fromNanos(claimed), fromNanos(leaseEnd)
	r.Extra = fmt.Sprint(id, finished, ready, maxAttempts, lastError)
	return r, nil
}
