package pgstore_test

import (
	"bytes"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// lockedBuffer is a bytes.Buffer safe for the heartbeat loop's logger.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Closing the store stops a Membership's heartbeat loop: it does not go on
// failing, and logging, every heartbeat until Leave.
func TestMembershipLoopStopsWhenStoreCloses(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t, nil, 4)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: testSchema(t), Lease: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	m, err := s.Join(ctx, pgstore.MembershipOptions{Node: "a", Lease: time.Second, Heartbeat: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pgstore.MembershipDone(m):
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the heartbeat loop still runs 30s after the store closed")
	}
	if got := m.Owned(); got.OwnedCount() != 0 {
		t.Errorf("Owned after the store closed = %d shards, want none", got.OwnedCount())
	}
	if out := logs.String(); out != "" {
		t.Errorf("the loop logged after the store closed:\n%s", out)
	}
	if err := m.Leave(ctx); err != nil && !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Leave after Close = %v, want nil or ErrClosed", err)
	}
}

// Follow on a nil Membership returns ErrClosed rather than panicking.
func TestFollowNilMembership(t *testing.T) {
	var m *pgstore.Membership
	all, err := backpressure.AllShards(4)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 1, DefaultQuota: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Follow(t.Context(), bp); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Follow on a nil Membership = %v, want ErrClosed", err)
	}
}
