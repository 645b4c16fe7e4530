package storetest

import (
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// setupOperator is setupStore for a store that also implements
// [outbox.Operator]; it skips the test otherwise.
func setupOperator[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) (*ox, outbox.Operator) {
	t.Helper()
	o := setupStore(t, newHarness)
	op, ok := o.s.(outbox.Operator)
	if !ok {
		t.Skipf("the store (%T) does not implement outbox.Operator: its namespace state, shared settings and node reports are not checked", o.s)
	}
	return o, op
}

// deref is *p, or nil for a nil p.
func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
