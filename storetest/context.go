package storetest

import (
	"context"
	"errors"
	"testing"
)

// testContext checks that a cancelled context fails every method with an
// error matching context.Canceled and changes nothing.
func testContext[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("CancelledFailsEveryMethod", func(t *testing.T) {
		o := setupStore(t, newHarness)
		keys, live := o.seedEveryState()
		before := o.snapshot(keys)
		stats := o.stats()
		ctx, cancel := context.WithCancel(o.ctx)
		cancel()
		for _, c := range o.everyCall(live) {
			if err := c.call(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context = %v, want an error matching context.Canceled", c.name, err)
			}
			o.unchanged(c.name+" with a cancelled context", before, nil)
		}
		if got := o.stats(); got != stats {
			t.Errorf("Stats after calls with a cancelled context = %+v, before %+v", got, stats)
		}
		o.gone("Enqueue with a cancelled context", "new-0")
	})
}
