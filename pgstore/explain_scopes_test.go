package pgstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestExplainClaimManyScopes checks the scoped claim of a fair sweep over
// 1,000 namespaces (one row from each, as BenchmarkDrain's fair-1000 arms
// claim) on an outbox of 1,000 namespaces × 2 task queues × 10 rows,
// ANALYZEd: under custom and generic plans, each scope walks
// outbox_route_oldest_idx in its order and stops at its limit. With the
// claimable time bounded on claimable_at, the generic plan took a bitmap
// of the whole route from outbox_route_claimable_idx and sorted it for
// every scope instead, about three times the cost.
func TestExplainClaimManyScopes(t *testing.T) {
	f := newFixture(t)
	const namespaces, queues, perRoute = 1000, 2, 10
	batch := make([]outbox.Message, 0, namespaces*queues)
	for i := range perRoute {
		batch = batch[:0]
		for ns := range namespaces {
			for q := range queues {
				batch = append(batch, message(fmt.Sprintf("ns%04d", ns), fmt.Sprintf("q%d", q), fmt.Sprintf("ns%04d/q%d/%d", ns, q, i)))
			}
		}
		f.enqueue(batch...)
	}
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+pgx.Identifier{f.schema}.Sanitize()+".outbox"); err != nil {
		t.Fatal(err)
	}
	var scopeNS, scopeQ []string
	var scopeLim []int64
	for ns := range namespaces {
		scopeNS, scopeQ, scopeLim = append(scopeNS, fmt.Sprintf("ns%04d", ns)), append(scopeQ, fmt.Sprintf("q%d", ns%queues)), append(scopeLim, 1)
	}
	args := []any{f.now, outbox.DefaultLease.Microseconds(), []int32{0}, scopeNS, scopeQ, scopeLim, true}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explain(t, f, mode, pgstore.Statements(f.s)["claimScoped"], args)
		if !strings.Contains(plan, "Index Scan using outbox_route_oldest_idx on outbox") {
			t.Errorf("%s: the scopes do not walk outbox_route_oldest_idx:\n%s", mode, plan)
		}
		if strings.Contains(plan, "Bitmap") || !sortsOnlyLeases(plan) {
			t.Errorf("%s: a scope reads or sorts its whole route:\n%s", mode, plan)
		}
	}
}
