package sqlitestore

import (
	"strings"
	"testing"
)

// TestNamespacesPlansUseIndexes checks with EXPLAIN QUERY PLAN that every
// count of Namespaces and its page of namespaces is a SEARCH (a range or a
// probe) of the covering index of one state (outbox_pending, outbox_leased,
// outbox_settled, outbox_dead), never a SCAN of the outbox, and that each
// of the four is used: with each count under a LIMIT of the cap, a call
// reads O(namespaces × (log rows + cap)) entries. Routes' probe for the
// next route and its capped count are SEARCHes of the covering
// outbox_route_claimable likewise.
func TestNamespacesPlansUseIndexes(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	for name, q := range map[string]string{"counts": namespaceCounts, "page": namespacePage} {
		plan := explain(t, s.writer, q, 3)
		if strings.Contains(plan, "SCAN outbox") {
			t.Errorf("Namespaces' %s scans the outbox:%s", name, plan)
		}
		for _, ix := range []string{"outbox_pending", "outbox_leased", "outbox_settled", "outbox_dead"} {
			if !strings.Contains(plan, "SEARCH outbox USING COVERING INDEX "+ix+" (namespace") {
				t.Errorf("Namespaces' %s does not search %s by namespace:%s", name, ix, plan)
			}
		}
		t.Logf("Namespaces' %s:%s", name, plan)
	}
	for name, q := range map[string]string{"next": strings.Replace(routeNext, "{cmp}", ">", 1), "counts": routeCounts} {
		plan := explain(t, s.writer, q, 4)
		if strings.Contains(plan, "SCAN outbox") || !strings.Contains(plan, "SEARCH outbox USING COVERING INDEX outbox_route_claimable (") {
			t.Errorf("Routes' %s does not search outbox_route_claimable alone:%s", name, plan)
		}
		t.Logf("Routes' %s:%s", name, plan)
	}
}
