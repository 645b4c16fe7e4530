package storetest

import (
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testRoundTrips checks that each OutboxStore call, and each Enqueue,
// Settle and Retry, is one round trip to the database, however many routes
// or rows it covers (a count at most one).
func testRoundTrips[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("OnePerCall", func(t *testing.T) {
		e := setup(t, newHarness)
		if e.h.RoundTrips == nil {
			t.Skip("Harness.RoundTrips is nil")
		}
		var ms []outbox.Message
		var claims []backpressure.ScopedClaim
		for i := 0; i < 50; i++ {
			ns := "ns" + strconv.Itoa(i)
			ms = append(ms, msgs(ns, "q", ns, 4)...)
			claims = append(claims, scope(ns, "q", 2))
		}
		var rows []R
		// A count is at most one: a store may answer it from counts it
		// keeps (pgstore's kept counts).
		calls := []struct {
			name  string
			call  func()
			least int64
		}{
			{"Enqueue(200 rows)", func() { e.enqueue(ms...) }, 1},
			{"CountClaimedOutboxRows", func() { e.countClaimed(e.all) }, 0},
			{"CountPendingOutboxRows(50 routes)", func() { e.countPending(e.all, 3) }, 0},
			{"ClaimOutboxRowsScoped(50 scopes)", func() { rows = e.need("claim(50 scopes)", e.claim(e.all, claims...), 2) }, 1},
			{"Settle", func() { e.settle(rows[0]) }, 1},
			{"Retry", func() { e.retry(rows[1], time.Second) }, 1},
			{"CountClaimedOutboxRows with claims", func() { e.countClaimed(e.all) }, 0},
		}
		for _, c := range calls {
			e.tripsBetween(c.name, c.call, c.least)
		}
	})
}
