package storetest_test

import (
	"testing"
	"time"

	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestMemstore runs the whole suite against the reference store, the naive
// in-memory outbox.Store the suite is checked against.
func TestMemstore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
		clock := storetest.NewClock()
		s, err := memstore.New(memstore.Options{Now: clock.Now, ShardCount: 16, Lease: 30 * time.Second, MaxAttempts: 5})
		if err != nil {
			t.Fatalf("memstore.New: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return &storetest.Harness[outbox.Row]{
			Outbox:      s,
			MaxAttempts: s.MaxAttempts(),
			Now:         clock.Now,
			Advance:     clock.Advance,
			RoundTrips:  s.RoundTrips,
			FailNth:     s.FailNth,
			ErrorPrefix: "memstore",
		}
	})
}
