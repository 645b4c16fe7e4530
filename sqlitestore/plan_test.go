package sqlitestore

import (
	"database/sql"
	"strings"
	"testing"
)

// TestQueryPlansUseIndexes checks, with EXPLAIN QUERY PLAN, that every count
// and claim reads its index (covering, never the table), and that none sorts
// its output in a temporary b-tree (the window walk relies on reading routes
// in primary-key order, counting each as it is stepped to), both when the node
// owns every shard and when it owns part of them.
func TestQueryPlansUseIndexes(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	for _, cond := range []string{"", ownedCond(7)} {
		for _, c := range []struct {
			name string
			sql  string
			args int
			want []string
		}{
			{"CountClaimedOutboxRows", countClaimedSQL(strings.ReplaceAll(cond, "?7", "?2")), 2,
				[]string{"SCAN outbox USING COVERING INDEX outbox_leased"}},
			{"CountPendingOutboxRows", countPendingSQL(strings.ReplaceAll(cond, "?7", "?3")), 3,
				[]string{"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"ClaimOutboxRowsScoped", scopedClaimSQL(cond), 7, []string{
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=? AND claim_rank=? AND id>?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=? AND claim_rank>?)",
				"SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)"}},
			{"ClaimOutboxRowsUnscoped", unscopedClaimSQL(cond), 7, []string{
				"SCAN outbox USING COVERING INDEX outbox_claimable",
				"SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)"}},
			{"CountOutboxRows's window (after)", countPendingWindowSQL(strings.ReplaceAll(cond, "?7", "?3"), windowAfter, countOnly), 4, []string{
				"SEARCH r USING PRIMARY KEY (namespace>?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"CountOutboxRows's window (up to)", countPendingWindowSQL(strings.ReplaceAll(cond, "?7", "?3"), windowUpTo, countOnly), 4, []string{
				"SEARCH r USING PRIMARY KEY (namespace<?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"CountOutboxRows's window (rest of a namespace)", countPendingWindowSQL(strings.ReplaceAll(cond, "?7", "?3"), windowRestOf, countOnly), 5, []string{
				"SEARCH r USING PRIMARY KEY (namespace=? AND task_queue>?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"InSweepTx's pending count", routeCountsSQL(strings.ReplaceAll(cond, "?7", "?3"), "", countIDs), 3,
				[]string{"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"InSweepTx's pending count to 1", routeCountsSQL(strings.ReplaceAll(cond, "?7", "?3"), "", countFirstID), 3,
				[]string{"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"InSweepTx's window count", countPendingWindowSQL(strings.ReplaceAll(cond, "?7", "?3"), windowAfter, countFirstID), 4, []string{
				"SEARCH r USING PRIMARY KEY (namespace>?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"InSweepTx's claim by ID", claimByIDSQL(cond), 7, []string{
				"SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)"}},
			{"Complete's route pruning", pruneRoutesSQL, 1, []string{
				"SEARCH outbox_routes USING PRIMARY KEY (namespace=? AND task_queue=?)",
				"SEARCH o USING COVERING INDEX outbox_route_claimable (namespace=? AND task_queue=?)"}},
			{"Complete", completeSQL, 2, []string{
				"SEARCH o USING INDEX sqlite_autoindex_outbox_1 (dispatch_key=?)",
				"SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)"}},
			{"ExtendLeases", extendSQL, 3, []string{
				"SEARCH outbox USING INDEX sqlite_autoindex_outbox_1 (dispatch_key=?)"}},
		} {
			if cond == "" {
				c.args = min(c.args, 6)
			}
			plan := explain(t, s.reader, c.sql, c.args)
			for _, w := range c.want {
				if !strings.Contains(plan, "\n"+w+"\n") {
					t.Errorf("%s (shard filter %q): plan lacks %q:\n%s", c.name, cond, w, plan)
				}
			}
			for _, line := range strings.Split(plan, "\n") {
				if strings.Contains(line, "TEMP B-TREE FOR ORDER BY") {
					t.Errorf("%s (shard filter %q): plan sorts: %q", c.name, cond, line)
				}
				if (strings.HasPrefix(line, "SCAN outbox") || strings.HasPrefix(line, "SCAN o")) && !strings.Contains(line, "INDEX") {
					t.Errorf("%s (shard filter %q): plan scans the table: %q", c.name, cond, line)
				}
			}
		}
	}
}

// explain returns the EXPLAIN QUERY PLAN details of q, one per line, with
// args zero arguments bound.
func explain(t *testing.T, db *sql.DB, q string, args int) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, make([]any, args)...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN: %v\n%s", err, q)
	}
	defer rows.Close()
	plan := "\n"
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan += detail + "\n"
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
