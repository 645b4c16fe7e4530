package pgstore_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/pgstore"
)

var loopsRE = regexp.MustCompile(`loops=(\d+)`)

// maxLoops returns the most loops any plan node using index reports in an
// EXPLAIN ANALYZE plan, and whether such a node was found.
func maxLoops(plan, index string) (int, bool) {
	most, found := 0, false
	for _, line := range strings.Split(plan, "\n") {
		if !strings.Contains(line, " using "+index+" ") {
			continue
		}
		m := loopsRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		most, found = max(most, n), true
	}
	return most, found
}

// TestExplainPendingWindowIsLazy runs the window statement under EXPLAIN
// ANALYZE over 1,000 namespaces and checks, from the loops PostgreSQL
// reports, that it reads only the routes of the window and of the
// namespaces it walks to fill it: the recursive route walk stops once the
// window is full, never walking all 1,000 namespaces. Both with
// the window inside the namespaces above After and wrapping around past
// the largest, under custom and generic plans.
func TestExplainPendingWindowIsLazy(t *testing.T) {
	f := newFixture(t)
	const namespaces, queues = 1000, 2
	var batch []pgstore.Message
	for ns := 0; ns < namespaces; ns++ {
		for q := 0; q < queues; q++ {
			for i := 0; i < 3; i++ {
				batch = append(batch, message(fmt.Sprintf("ns%04d", ns), fmt.Sprintf("q%d", q), fmt.Sprintf("ns%04d/q%d/%d", ns, q, i)))
			}
		}
	}
	f.enqueue(batch...)
	// Ten namespaces with nothing claimable inside the first window: the
	// walk must step over them, and no further.
	if _, err := adminPool.Exec(f.ctx, `UPDATE `+pgx.Identifier{f.schema}.Sanitize()+`.outbox
SET visible_at = $1::timestamptz + interval '1 hour' WHERE namespace BETWEEN 'ns0501' AND 'ns0510'`, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+pgx.Identifier{f.schema}.Sanitize()+".outbox"); err != nil {
		t.Fatal(err)
	}
	sql := pgstore.Statements(f.s)["countPendingWindow"]
	const window = 20
	for _, c := range []struct {
		name   string
		after  string
		walked int // namespaces whose routes the statement may read
	}{
		{"inside", "ns0500", window + 10},
		{"wrapping", "ns0990", window},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			args := []any{f.now, allShards(f), int64(5), c.after, int64(window), false}
			plan := explainWith(t, f, mode, "ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF", sql, args)
			if strings.Contains(plan, "Seq Scan on outbox") {
				t.Errorf("%s (%s) reads the outbox sequentially:\n%s", c.name, mode, plan)
			}
			// One step of the walk per route of the namespaces walked (and
			// one more that finds the walk's end), one capped count per
			// route with a claimable row: every index scan runs at most
			// once per route walked, not once per route of all 1,000
			// namespaces.
			loops, ok := maxLoops(plan, "outbox_route_claimable_idx")
			if !ok || loops > c.walked*queues+1 {
				t.Errorf("%s (%s): an index scan ran %d times (found %v), want at most %d (%d namespaces × %d routes, and the end), not once per route of all %d namespaces:\n%s",
					c.name, mode, loops, ok, c.walked*queues+1, c.walked, queues, namespaces, plan)
			}
			if mode == "force_custom_plan" {
				lazyPlans = append(lazyPlans, fmt.Sprintf("After %q, a window of %d namespaces (%s):\n\n```\n%s\n```\n", c.after, window, c.name, plan))
			}
		}
	}
	if *updateExplain {
		writeLazyWindowDoc(t, lazyPlans)
	}
}

const lazyHeading = "\n## countPendingWindow: EXPLAIN ANALYZE over 1,000 namespaces\n"

// writeLazyWindowDoc replaces, or appends, EXPLAIN.md's section of the
// window's EXPLAIN ANALYZE plans.
func writeLazyWindowDoc(t *testing.T, plans []string) {
	doc, err := os.ReadFile("EXPLAIN.md")
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := strings.Cut(string(doc), lazyHeading)
	var b strings.Builder
	b.WriteString(strings.TrimRight(text, "\n") + "\n" + lazyHeading)
	b.WriteString("\nWritten by `go test -run TestExplainPendingWindowIsLazy -update-explain`: 1,000 namespaces × 2 task\n")
	b.WriteString("queues × 3 rows, the ten namespaces ns0501..ns0510 all in retry back-off, ANALYZEd; all shards owned,\n")
	b.WriteString("cap 5, custom plans. The recursive route walk runs only as far as the window needs: each step is one\n")
	b.WriteString("descent of outbox_route_claimable_idx to the next route's first entry, and the capped count runs\n")
	b.WriteString("only for a route whose first entry is due but cannot decide it (the ten namespaces in back-off are\n")
	b.WriteString("stepped over without one). Its loops are the routes of the namespaces walked — the window's 20 and, from\n")
	b.WriteString("ns0500, the ten with nothing claimable — not the 2,000 routes of the table; the walk wraps around to the\n")
	b.WriteString("smallest namespace only when the namespaces above After do not fill the window. The test fails if the\n")
	b.WriteString("loops exceed that, under custom and generic plans. With a cap of 1 and every shard owned, as a sweep's\n")
	b.WriteString("window asks, the count is not run at all: the step's first entry decides.\n")
	for _, p := range plans {
		b.WriteString("\n" + p)
	}
	if err := os.WriteFile("EXPLAIN.md", []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lazyPlans are the custom plans TestExplainPendingWindowIsLazy saw.
var lazyPlans []string

func allShards(f *fixture) []int32 {
	ids := make([]int32, f.s.ShardCount())
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

// TestExplainFullCountOneDescentPerRoute runs the full pending count under
// EXPLAIN ANALYZE and checks, from the loops PostgreSQL reports, that on a
// node owning every shard each route costs one index descent: the step's
// chunk decides every count, for routes deeper than the cap, shallower
// than it, and in retry back-off, so the capped count subquery never runs.
// On a node owning some shards the subquery runs, once per route whose
// first entry is due: the case the chunk cannot decide.
func TestExplainFullCountOneDescentPerRoute(t *testing.T) {
	f := newFixture(t)
	const routes, cap = 12, 5
	var batch []pgstore.Message
	for r := 0; r < routes; r++ {
		for i := 0; i < r; i++ { // route r holds r rows: some below the cap, some above
			batch = append(batch, message(fmt.Sprintf("ns%02d", r/3), fmt.Sprintf("q%d", r%3), fmt.Sprintf("r%02d/%d", r, i)))
		}
	}
	f.enqueue(batch...)
	// One route's rows all in retry back-off, another's half.
	if _, err := adminPool.Exec(f.ctx, `UPDATE `+pgx.Identifier{f.schema}.Sanitize()+`.outbox
SET visible_at = $1::timestamptz + interval '1 hour'
WHERE (namespace, task_queue) = ('ns01', 'q0') OR ((namespace, task_queue) = ('ns03', 'q2') AND dispatch_key > 'r11/5')`, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+pgx.Identifier{f.schema}.Sanitize()+".outbox"); err != nil {
		t.Fatal(err)
	}
	sql := pgstore.Statements(f.s)["countPending"]
	half := allShards(f)[:f.s.ShardCount()/2]
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range []struct {
			name   string
			shards []int32
			all    bool
			counts int // the capped count subqueries the plan may run
		}{
			{"every shard", allShards(f), true, 0},
			{"half the shards", half, false, routes},
		} {
			plan := explainWith(t, f, mode, "ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF", sql, []any{f.now, c.shards, int64(cap), c.all})
			got := countSubqueryLoops(plan)
			if c.counts == 0 && got != 0 || c.counts > 0 && (got == 0 || got > c.counts) {
				t.Errorf("%s (%s): the capped count subquery ran %d times, want %s:\n%s", c.name, mode, got,
					map[bool]string{true: "none", false: fmt.Sprintf("1 to %d", c.counts)}[c.counts == 0], plan)
			}
		}
	}
}

// countSubqueryLoops returns how many times the plan ran the capped count
// subquery: countPending's only plain Aggregate node (the steps' chunks are
// GroupAggregates), whichever scan the planner chose below it; -1 if there
// is none.
func countSubqueryLoops(plan string) int {
	for _, line := range strings.Split(plan, "\n") {
		if !strings.Contains(line, "->  Aggregate (") {
			continue
		}
		if strings.Contains(line, "never executed") {
			return 0
		}
		if m := loopsRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return -1
}
