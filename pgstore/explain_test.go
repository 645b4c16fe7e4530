package pgstore_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

var updateExplain = flag.Bool("update-explain", false, "write the plans TestExplainUsesIndexes sees to EXPLAIN.md")

// TestExplainUsesIndexes fills an outbox with a backlog in every state,
// ANALYZEs it, and checks with EXPLAIN that every statement is served by
// its index and never reads the table sequentially — under both custom
// plans and the generic plans PostgreSQL may switch a prepared statement to
// (pgx prepares and caches every statement). -update-explain writes the
// plans to EXPLAIN.md.
func TestExplainUsesIndexes(t *testing.T) {
	f := newFixture(t)
	const namespaces, queues, perRoute = 40, 3, 200 // 24,000 rows
	for ns := 0; ns < namespaces; ns++ {
		var batch []outbox.Message
		for q := 0; q < queues; q++ {
			for i := 0; i < perRoute; i++ {
				batch = append(batch, message(fmt.Sprintf("ns%03d", ns), fmt.Sprintf("q%d", q), fmt.Sprintf("ns%03d/q%d/%d", ns, q, i)))
			}
		}
		f.enqueue(batch...)
	}
	// One more route whose backlog is mostly in retry back-off (a
	// downstream outage): 20,000 rows, enqueued after the others, all but
	// the newest 20 delayed for an hour.
	const delayedRows, visibleRows = 20000, 20
	var delayed []outbox.Message
	for i := 0; i < delayedRows; i++ {
		delayed = append(delayed, message("outage", "q0", fmt.Sprintf("outage/%05d", i)))
	}
	f.enqueue(delayed...)
	// Every state: claim half of the rows, oldest first, then settle 80% of
	// those (dead-letter 10% of them), put 10% back with a delay, and leave
	// 10% claimed. (Set in bulk here; the store's own completions are
	// tested elsewhere.)
	for sweep := 0; sweep < 3; sweep++ {
		if _, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, f.all, 4000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adminPool.Exec(f.ctx, `
UPDATE `+pgx.Identifier{f.schema}.Sanitize()+`.outbox SET
	state = CASE id % 10 WHEN 0 THEN 'pending' WHEN 1 THEN 'claimed' WHEN 2 THEN 'dead' ELSE 'settled' END,
	visible_at = CASE id % 10 WHEN 0 THEN $1::timestamptz + interval '1 minute' ELSE visible_at END,
	finished_at = CASE WHEN id % 10 > 1 THEN $1::timestamptz END
WHERE state = 'claimed'`, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, `
UPDATE `+pgx.Identifier{f.schema}.Sanitize()+`.outbox SET attempts = 1, visible_at = $1::timestamptz + interval '1 hour'
WHERE namespace = 'outage' AND dispatch_key < $2`, f.now, fmt.Sprintf("outage/%05d", delayedRows-visibleRows)); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+pgx.Identifier{f.schema}.Sanitize()+".outbox"); err != nil {
		t.Fatal(err)
	}

	quarter := make([]int32, 0, 16)
	for s := 0; s < f.s.ShardCount(); s += 4 {
		quarter = append(quarter, int32(s))
	}
	var claimNS, claimQ []string
	var claimLim []int64
	for ns := 0; ns < 25; ns++ {
		claimNS, claimQ, claimLim = append(claimNS, fmt.Sprintf("ns%03d", ns)), append(claimQ, "q1"), append(claimLim, 4)
	}
	lease := outbox.DefaultLease.Microseconds()
	someKeys, someTokens := []string{"ns050/q1/7", "ns051/q1/3", "ns052/q0/1"}, []int64{1, 2, 3}
	sql := pgstore.Statements(f.s)
	for _, c := range []struct {
		name    string
		args    []any
		indexes []string
		forbid  []string // plan nodes that would read a whole route or backlog
		bound   string   // a condition that must be an Index Cond, not a Filter
	}{
		{"countClaimed", []any{f.now, quarter, false}, []string{"outbox_live_lease_idx"}, nil, ""},
		// With a cap well below a route's size the count must stop at the
		// cap: an index scan in the index's order under the LIMIT.
		// Rows in retry back-off or under a live lease are outside the
		// range the count walks: claimable_at is an index bound.
		{"countPending", []any{f.now, quarter, int64(10), false}, []string{"outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o"}, "claimable_at <="},
		// With a cap above what a route holds on the node's shards, every
		// entry of the route is read whatever the plan, and the planner
		// may prefer a bitmap scan of the route: still one route, never the
		// backlog.
		{"countPending (cap above route size)", []any{f.now, quarter, int64(100), false}, []string{"outbox_route_claimable_idx"}, nil, ""},
		// The window of 5 namespaces from ns020: the same counts, over
		// the namespaces walked only, whose routes it walks over the
		// counts' own index.
		// The next due row: per route one seek of the counts' index for
		// its first entry after now, bounded by the index, never a walk
		// of the route's claimable rows.
		{"nextDue", []any{f.now, quarter, false}, []string{"outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o"}, "claimable_at >"},
		{"countPendingWindow", []any{f.now, quarter, int64(10), "ns020", int64(5), false}, []string{"outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o", "Parallel"}, "claimable_at <="},
		// Both counts in one statement: the live-lease range and the
		// pending counts, each over its index as above.
		{"sweepCount", []any{f.now, quarter, int64(10), false}, []string{"outbox_live_lease_idx", "outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o"}, "claimable_at <="},
		{"sweepCountWindow", []any{f.now, quarter, int64(10), "ns020", int64(5), false}, []string{"outbox_live_lease_idx", "outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o", "Parallel"}, "claimable_at <="},
		// The kept counts' reads (kept_sql.go): both counts, and per
		// route the next due entry, as nextDue seeks it; of every
		// namespace, or of those a notification named, walked from each.
		{"keptAll", []any{f.now, quarter, int64(10), false}, []string{"outbox_live_lease_idx", "outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o"}, "claimable_at <="},
		{"keptNamespaces", []any{f.now, quarter, int64(10), false, []string{"ns001", "ns017", "outage"}}, []string{"outbox_live_lease_idx", "outbox_route_claimable_idx"}, []string{"Bitmap", "Sort Key: o", "Seq Scan"}, "claimable_at >"},
		// The claims walk the pending rows in order (no sort of a
		// route's backlog: checked by sortsOnlyLeases below) and the
		// expired leases by a range of outbox_live_lease_idx, sorted;
		// the locked rows are updated by ctid.
		{"claimScoped", []any{f.now, lease, quarter, claimNS, claimQ, claimLim, false}, []string{"outbox_route_oldest_idx", "outbox_live_lease_idx", "Tid Scan"}, []string{"Bitmap", "Hash"}, ""},
		{"claimUnscoped", []any{f.now, lease, quarter, int64(100), false}, []string{"outbox_oldest_idx", "outbox_live_lease_idx", "Tid Scan"}, []string{"Bitmap", "Hash"}, ""},
		// Completions and extensions find each row through the unique
		// dispatch key, whatever the batch's size.
		{"complete", []any{f.now, someKeys, someTokens, []int32{1, 2, 3}, []int64{0, 1000, 0}, []string{"", "e", "e"}}, []string{"outbox_key"}, nil, ""},
		{"extend", []any{f.now, lease, someKeys, someTokens}, []string{"outbox_key"}, nil, ""},
		// A page of dead rows reads dead rows only, in key order over
		// outbox_dead_key_idx or, with few dead rows, sorted.
		{"listDead", []any{"", "", int64(100)}, nil, nil, ""},
		{"requeue", []any{f.now, someKeys, "channel"}, []string{"outbox_key"}, nil, ""},
		{"purgeSettled", []any{f.now, int64(1000)}, []string{"outbox_settled_idx", "Tid Scan"}, nil, ""},
		{"purgeDead", []any{f.now, int64(1000)}, []string{"outbox_finished_dead_idx", "Tid Scan"}, nil, ""},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			stmt, _, _ := strings.Cut(c.name, " ")
			plan := explain(t, f, mode, sql[stmt], c.args)
			if strings.Contains(plan, "Seq Scan on outbox") {
				t.Errorf("%s (%s) reads the outbox sequentially:\n%s", c.name, mode, plan)
			}
			for _, node := range c.forbid {
				if strings.Contains(plan, node) {
					t.Errorf("%s (%s) has a %q node, which could not stop at its LIMIT or keep its order:\n%s", c.name, mode, node, plan)
				}
			}
			if strings.HasPrefix(c.name, "claim") && !sortsOnlyLeases(plan) {
				t.Errorf("%s (%s) sorts rows other than the expired leases (a route's backlog?):\n%s", c.name, mode, plan)
			}
			if c.bound != "" && !indexBound(plan, c.bound) {
				t.Errorf("%s (%s) does not bound its index scan by %q (a Filter reads what it rejects):\n%s", c.name, mode, c.bound, plan)
			}
			for _, idx := range c.indexes {
				if !strings.Contains(plan, " using "+idx+" ") && !strings.Contains(plan, " on "+idx) && !strings.Contains(plan, idx+" on outbox") {
					t.Errorf("%s (%s) does not use %s:\n%s", c.name, mode, idx, plan)
				}
			}
			explained = append(explained, explainedPlan{c.name, mode, sql[stmt], plan})
		}
	}
	if *updateExplain {
		writeExplainDoc(t, f.schema)
	}
}

// sortsOnlyLeases reports whether every sort of outbox rows in plan (a
// Sort Key on a column of the outbox, aliased o…) sorts the output of a
// scan of outbox_live_lease_idx, the claims' range of expired leases: the
// pending rows must come in the index's order.
func sortsOnlyLeases(plan string) bool {
	lines := strings.Split(plan, "\n")
	for i, line := range lines {
		if !strings.Contains(line, "Sort Key: o") {
			continue
		}
		if i+1 >= len(lines) || !strings.Contains(lines[i+1], "Index Scan using outbox_live_lease_idx on outbox") {
			return false
		}
	}
	return true
}

// indexBound reports whether cond appears in an Index Cond of plan.
func indexBound(plan, cond string) bool {
	for _, line := range strings.Split(plan, "\n") {
		if _, after, ok := strings.Cut(line, "Index Cond: "); ok && strings.Contains(after, cond) {
			return true
		}
	}
	return false
}

type explainedPlan struct{ name, mode, sql, plan string }

// measuredHeading starts EXPLAIN.md's measured sections, which
// -update-explain keeps.
const measuredHeading = "## Database work per row"

var explained []explainedPlan

// explain returns the plan of sql with args under plan_cache_mode mode. It
// PREPAREs sql as pgx does (a named prepared statement), so plan_cache_mode
// decides between the custom and the generic plan, and EXPLAINs an EXECUTE
// of it. EXPLAIN EXECUTE takes no protocol parameters, so the arguments are
// rendered as literals here: test values only, never the store's way.
func explain(t *testing.T, f *fixture, mode, sql string, args []any) string {
	t.Helper()
	return explainWith(t, f, mode, "COSTS OFF", sql, args)
}

// explainWith is explain with EXPLAIN options of its own (ANALYZE runs the
// statement).
func explainWith(t *testing.T, f *fixture, mode, options, sql string, args []any) string {
	t.Helper()
	return explainAfter(t, f, "", mode, options, sql, args)
}

// explainAfter is explainWith in a transaction that first runs setup (as
// the store runs a statement after its own settings), unless setup is "".
func explainAfter(t *testing.T, f *fixture, setup, mode, options, sql string, args []any) string {
	t.Helper()
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(f.ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	if setup != "" {
		if _, err := conn.Exec(f.ctx, "BEGIN READ ONLY"); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(context.Background(), "ROLLBACK")
		if _, err := conn.Exec(f.ctx, setup); err != nil {
			t.Fatalf("%s: %v", setup, err)
		}
	}
	defer conn.Exec(context.Background(), "RESET plan_cache_mode; DEALLOCATE ALL")
	if _, err := conn.Exec(f.ctx, "PREPARE explained AS "+sql); err != nil {
		t.Fatalf("PREPARE: %v\n%s", err, sql)
	}
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = literal(t, a)
	}
	rows, err := conn.Query(f.ctx, "EXPLAIN ("+options+") EXECUTE explained("+strings.Join(lits, ", ")+")", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, sql)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, sql)
	}
	return strings.Join(lines, "\n")
}

// literal renders a test argument as an SQL literal.
func literal(t *testing.T, a any) string {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := a.(type) {
	case time.Time:
		return quote(v.Format(time.RFC3339Nano))
	case int64, bool:
		return fmt.Sprint(v)
	case string:
		return quote(v)
	case []int32, []int64:
		return quote(strings.NewReplacer("[", "{", "]", "}", " ", ",").Replace(fmt.Sprint(v)))
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = quote(s)
		}
		return "ARRAY[" + strings.Join(q, ", ") + "]"
	}
	t.Fatalf("literal: unsupported %T", a)
	return ""
}

func writeExplainDoc(t *testing.T, schema string) {
	var b strings.Builder
	b.WriteString("# pgstore: the plans of its statements\n\n")
	b.WriteString("Written by `go test -run TestExplainUsesIndexes -update-explain` on an outbox of 44,000 rows\n")
	b.WriteString("(40 namespaces × 3 task queues × 200 rows; the oldest 12,000 claimed once: 10% retried with a delay,\n10% left claimed, ")
	b.WriteString("the rest settled; then one more route, outage/q0, of 20,000 rows, all but the newest 20 in\nretry back-off for an hour), ANALYZEd, on PostgreSQL ")
	var version string
	_ = adminPool.QueryRow(t.Context(), "SHOW server_version").Scan(&version)
	b.WriteString(version + ". The node owns a quarter of the 64 shards; the scoped claim has 25 scopes.\n")
	b.WriteString("Pending counts are shown with a cap of 10, below what a route holds on the node's shards, where the\n")
	b.WriteString("scan must stop at the cap, and with a cap of 100, above it, where every entry of each route is read\n")
	b.WriteString("whatever the plan and PostgreSQL may pick a bitmap scan of the route. Either way the count's range is\n")
	b.WriteString("bounded by claimable_at <= now (an Index Cond), so rows in retry back-off or under a live lease are not read.\n")
	b.WriteString("The claims walk a route oldest first and filter visible_at (a pending row's claimable_at): they read the older rows they skip.\n")
	b.WriteString("The test fails if a statement stops using its index or reads the table sequentially,\n")
	b.WriteString("under custom plans and under the generic plans a cached prepared statement may switch to.\n")
	b.WriteString("The test schema's name is shown as `{schema}`.\n")
	for _, e := range explained {
		if e.mode == "force_custom_plan" {
			fmt.Fprintf(&b, "\n## %s\n", e.name)
			if !strings.Contains(e.name, " ") {
				fmt.Fprintf(&b, "\n```sql%s\n```\n", strings.ReplaceAll(e.sql, pgx.Identifier{schema}.Sanitize(), "{schema}"))
			}
		}
		fmt.Fprintf(&b, "\n%s:\n\n```\n%s\n```\n", map[string]string{"force_custom_plan": "Custom plan", "force_generic_plan": "Generic plan"}[e.mode], e.plan)
	}
	// The measured sections after the plans ("## Database work per row"
	// on) come from benchmarks, not from this test: kept as they are.
	if old, err := os.ReadFile("EXPLAIN.md"); err == nil {
		if i := strings.Index(string(old), "\n"+measuredHeading); i >= 0 {
			b.WriteString(string(old[i:]))
		}
	}
	if err := os.WriteFile("EXPLAIN.md", []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestExplainNothingClaimed checks the statements that find claimed rows
// by dispatch key (Complete, ExtendLeases) and the claims on an outbox
// ANALYZEd while no row was claimed, as after a restart or a quiet spell:
// the statistics then say outbox_live_lease_idx is empty, and a generic
// plan that trusted them could walk that index, every claimed row, for each
// entry. Each must still find its rows through the key, and the claims walk
// their pending index, under custom and generic plans.
func TestExplainNothingClaimed(t *testing.T) {
	f := newFixture(t)
	var batch []outbox.Message
	for i := range 5000 {
		batch = append(batch, message(fmt.Sprintf("ns%02d", i%10), "q", fmt.Sprintf("k%05d", i)))
	}
	f.enqueue(batch...)
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+pgx.Identifier{f.schema}.Sanitize()+".outbox"); err != nil {
		t.Fatal(err)
	}
	// Then a claim of 1,000 rows the statistics do not know of.
	if _, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, f.all, 1000); err != nil {
		t.Fatal(err)
	}
	lease := outbox.DefaultLease.Microseconds()
	keys, tokens := []string{"k00001", "k00002", "k00003"}, []int64{1, 2, 3}
	sql := pgstore.Statements(f.s)
	for _, c := range []struct {
		name    string
		args    []any
		indexes []string
	}{
		{"complete", []any{f.now, keys, tokens, []int32{1, 2, 3}, []int64{0, 1000, 0}, []string{"", "e", "e"}}, []string{"outbox_key"}},
		{"extend", []any{f.now, lease, keys, tokens}, []string{"outbox_key"}},
		{"get", []any{"k00001"}, []string{"outbox_key"}},
		{"claimScoped", []any{f.now, lease, []int32{0}, []string{"ns01"}, []string{"q"}, []int64{10}, true}, []string{"outbox_route_oldest_idx"}},
		{"claimUnscoped", []any{f.now, lease, []int32{0}, int64(100), true}, []string{"outbox_oldest_idx"}},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, f, mode, sql[c.name], c.args)
			if strings.Contains(plan, "Seq Scan on outbox") || strings.Contains(plan, "Bitmap") {
				t.Errorf("%s (%s) reads the outbox beyond an index range:\n%s", c.name, mode, plan)
			}
			for _, idx := range c.indexes {
				if !strings.Contains(plan, " using "+idx+" ") {
					t.Errorf("%s (%s) does not use %s:\n%s", c.name, mode, idx, plan)
				}
			}
			if !strings.HasPrefix(c.name, "claim") && strings.Contains(plan, "outbox_live_lease_idx") {
				t.Errorf("%s (%s) walks outbox_live_lease_idx rather than the key:\n%s", c.name, mode, plan)
			}
		}
	}
}
