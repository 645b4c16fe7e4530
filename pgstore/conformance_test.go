package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the shared outbox.Store suite, each subtest on a
// fresh store in a schema of its own, with a manual clock and a pool whose
// tracer counts round trips and injects faults. The store implements
// outbox.Store, so the suite defaults everything else from it, reading rows
// back through Get. The WindowClaim area's stores have Options.WindowClaims,
// so that it checks the window claim; every other area runs the default.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
		clock := storetest.NewClock()
		tr := &tracer{}
		pool := newPool(t, tr, 12)
		schema := testSchema(t)
		const lease = 30 * time.Second
		s, err := pgstore.New(t.Context(), pool, pgstore.Options{Schema: schema, Lease: lease, Now: clock.Now,
			WindowClaims: strings.HasPrefix(t.Name(), "TestConformance/WindowClaim/")})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return &storetest.Harness[outbox.Row]{
			Outbox:      s,
			Now:         clock.Now,
			Advance:     clock.Advance,
			RoundTrips:  tr.queries.Load,
			FailNth:     tr.arm,
			ErrorPrefix: "pgstore",
		}
	})
}
