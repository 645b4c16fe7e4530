package pgstore_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

var updateOperateExplain = flag.Bool("update-operate-explain", false, "write the plans TestNamespacesUseIndexes sees to ../docs/operate-explain.md")

// TestNamespacesUseIndexes fills an outbox of 30,000 rows over 30
// namespaces in every state, ANALYZEs it, and checks with EXPLAIN ANALYZE
// that Namespaces (one namespace, and a page of 10) reads
// outbox_namespace_state_idx (and outbox_live_lease_idx for its claimed
// counts, outbox_route_claimable_idx for its page of names), and Routes (one namespace's three
// routes) outbox_route_claimable_idx, never the table sequentially, under
// custom and generic plans, and that with a cap of 50 no index scan
// returns more than 51 rows: the cost is bounded by the cap, not by the
// outbox. -update-operate-explain writes the plans to
// docs/operate-explain.md.
func TestNamespacesUseIndexes(t *testing.T) {
	f := newFixture(t)
	const namespaces, perNamespace = 30, 1000
	for ns := range namespaces {
		var batch []outbox.Message
		for i := range perNamespace {
			batch = append(batch, message(fmt.Sprintf("ns%03d", ns), fmt.Sprintf("q%d", i%3), fmt.Sprintf("ns%03d/%d", ns, i)))
		}
		f.enqueue(batch...)
	}
	q := pgx.Identifier{f.schema}.Sanitize()
	// A transaction elsewhere in the cluster whose snapshot predates the
	// UPDATE (another test, a long report) keeps VACUUM from marking the
	// updated pages all visible: the planner then prices an index-only
	// scan as an index scan with heap fetches and, without the store's
	// settings, picked a bitmap scan of the whole range. The bound must
	// hold then too.
	holder, err := adminPool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(f.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(f.ctx, "SELECT count(*) FROM "+q+".outbox"); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, `
UPDATE `+q+`.outbox SET
	state = CASE id % 10 WHEN 0 THEN 'pending' WHEN 2 THEN 'claimed' WHEN 4 THEN 'dead' ELSE 'settled' END,
	visible_at = CASE id % 10 WHEN 0 THEN $1::timestamptz + interval '1 minute' ELSE visible_at END,
	lease_expires_at = CASE id % 10 WHEN 2 THEN $1::timestamptz + interval '1 minute' END,
	finished_at = CASE WHEN id % 10 > 2 THEN $1::timestamptz END
WHERE id % 2 = 0`, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, "VACUUM ANALYZE "+q+".outbox"); err != nil {
		t.Fatal(err)
	}
	sql := pgstore.OperateStatements(f.s)
	const capN = 50
	var doc strings.Builder
	for _, c := range []struct {
		name, index string
		args        []any
	}{
		{"namespacesOne", "outbox_namespace_state_idx", []any{f.now, int64(capN), "ns007"}},
		{"namespacesPage", "outbox_namespace_state_idx", []any{f.now, int64(capN), "ns010", int64(10)}},
		{"routes", "outbox_route_claimable_idx", []any{"ns007", "", int64(10), int64(capN), f.now}},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainAfter(t, f, pgstore.IndexRangesOnlySQL, mode, "ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF", sql[c.name], c.args)
			if strings.Contains(plan, "Seq Scan on outbox") || strings.Contains(plan, "Bitmap Heap Scan on outbox") {
				t.Errorf("%s (%s) reads the outbox beyond an index range:\n%s", c.name, mode, plan)
			}
			if !strings.Contains(plan, c.index) {
				t.Errorf("%s (%s) does not use %s:\n%s", c.name, mode, c.index, plan)
			}
			for _, line := range strings.Split(plan, "\n") {
				if !strings.Contains(line, "Index") || !strings.Contains(line, c.index) {
					continue
				}
				var rows, loops int
				if _, after, ok := strings.Cut(line, "(actual rows="); ok {
					fmt.Sscanf(after, "%d loops=%d", &rows, &loops)
				}
				if rows > capN+1 {
					t.Errorf("%s (%s): an index scan returned %d rows per loop, above the cap %d:\n%s", c.name, mode, rows, capN, plan)
				}
			}
			if mode == "force_custom_plan" {
				fmt.Fprintf(&doc, "\n## %s\n\n```sql%s\n```\n", c.name, strings.ReplaceAll(sql[c.name], q, "{schema}"))
			}
			fmt.Fprintf(&doc, "\n%s, EXPLAIN ANALYZE:\n\n```\n%s\n```\n", map[string]string{"force_custom_plan": "Custom plan", "force_generic_plan": "Generic plan"}[mode], plan)
		}
	}
	if *updateOperateExplain {
		var version string
		_ = adminPool.QueryRow(t.Context(), "SHOW server_version").Scan(&version)
		head := "# pgstore: the plans of Namespaces and Routes\n\n" +
			"Written by `go test -run TestNamespacesUseIndexes -update-operate-explain` (pgstore) on an outbox of 30,000 rows\n" +
			"(30 namespaces × 1,000 rows; half of them moved to pending-scheduled, claimed, dead and settled), VACUUM ANALYZEd,\n" +
			"on PostgreSQL " + version + ", with a cap of 50. Every count of pending, dead and settled rows is a range of\n" +
			"outbox_namespace_state_idx (Routes: of outbox_route_claimable_idx, with a heap fetch per row read for its state)\n" +
			"under a LIMIT of the cap, so no such index scan returns more than cap rows. The claimed counts are ranges of\n" +
			"outbox_live_lease_idx (lease_expires_at, over claimed rows only: since schema version 13 a claim adds no entry to\n" +
			"outbox_namespace_state_idx) with the namespace checked in the index entry: each reads at most the claimed rows\n" +
			"of every namespace, which the ceilings bound. The cost of a call is O(namespaces × (log n + cap + claimed)),\n" +
			"whatever the outbox holds. The test fails if a count of outbox_namespace_state_idx reads more than the cap.\n"
		if err := os.WriteFile("../docs/operate-explain.md", []byte(head+doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
