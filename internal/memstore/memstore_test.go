package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// The conformance suite (storetest/memstore_test.go) checks the contract;
// these tests check what it cannot: options and the zero Store.

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{ShardCount: -1},
		{ShardCount: backpressure.MaxShardCount + 1},
		{Lease: -time.Second},
		{Lease: outbox.MinLease - time.Millisecond},
		{MaxAttempts: -1},
	} {
		if _, err := New(o); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
	if s, err := New(Options{ShardCount: backpressure.MaxShardCount}); err != nil || s.ShardCount() != backpressure.MaxShardCount {
		t.Errorf("New(ShardCount: MaxShardCount) = %v, want the largest shard space accepted", err)
	}
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.ShardCount() != DefaultShardCount || s.Lease() != outbox.DefaultLease || s.MaxAttempts() != outbox.DefaultMaxAttempts {
		t.Errorf("New(Options{}) = %d shards, lease %v, %d attempts; want the defaults", s.ShardCount(), s.Lease(), s.MaxAttempts())
	}
}

func TestZeroStoreIsClosed(t *testing.T) {
	var s Store
	ctx := context.Background()
	all, err := backpressure.AllShards(1)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Enqueue": func() error {
			_, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "n"}})
			return err
		},
		"Claim":        func() error { _, err := s.ClaimOutboxRowsScoped(ctx, all, nil); return err },
		"Complete":     func() error { _, err := s.Complete(ctx, nil); return err },
		"Subscribe":    func() error { _, err := s.Subscribe(ctx); return err },
		"PurgeSettled": func() error { _, err := s.PurgeSettled(ctx, time.Now(), 1); return err },
		"Close":        s.Close,
	} {
		if err := call(); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s on a zero Store = %v, want ErrClosed", name, err)
		}
	}
}
