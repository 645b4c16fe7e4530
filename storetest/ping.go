package storetest

import (
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// testPinger checks the optional [outbox.Pinger]: Ping answers nil on an
// open store, empty or not, and changes nothing. (The Closed and Context
// areas check that it refuses on a closed store and honours ctx.)
func testPinger[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("OpenStore", func(t *testing.T) {
		o := setupStore(t, newHarness)
		p, ok := o.s.(outbox.Pinger)
		if !ok {
			t.Skipf("the store (%T) does not implement the optional outbox.Pinger", o.s)
		}
		if err := p.Ping(o.ctx); err != nil {
			t.Fatalf("Ping on an empty open store = %v, want nil", err)
		}
		keys, _ := o.seedEveryState()
		before := o.snapshot(keys)
		stats := o.stats()
		if err := p.Ping(o.ctx); err != nil {
			t.Fatalf("Ping on an open store with rows = %v, want nil", err)
		}
		o.unchanged("Ping", before, nil)
		if got := o.stats(); got != stats {
			t.Errorf("Stats after Ping = %+v, before %+v", got, stats)
		}
	})
}
