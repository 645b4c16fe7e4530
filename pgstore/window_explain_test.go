package pgstore_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
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
	var batch []outbox.Message
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
	b.WriteString("descent of outbox_route_claimable_idx to the next route and its earliest claimable_at, and the capped\n")
	b.WriteString("count runs only for a route whose earliest claimable_at has come (the ten namespaces in back-off are\n")
	b.WriteString("stepped over without one). Its loops are the routes of the namespaces walked — the window's 20 and, from\n")
	b.WriteString("ns0500, the ten with nothing claimable — not the 2,000 routes of the table; the walk wraps around to the\n")
	b.WriteString("smallest namespace only when the namespaces above After do not fill the window. The test fails if the\n")
	b.WriteString("loops exceed that, under custom and generic plans. With a cap of 1 and every shard owned, as a sweep's\n")
	b.WriteString("window asks, the count is not run at all: the step's earliest claimable_at decides.\n")
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

// TestExplainWindowShortcut runs the window statement at a cap of 1, as a
// sweep's window asks, under EXPLAIN ANALYZE and checks, from the loops
// PostgreSQL reports, when the capped count subquery runs: never on a node
// owning every shard (the step's first entry decides), and on a node owning
// half of them exactly once per route whose earliest row is due but on a
// shard it does not own. Each row's visible_at is distinct, so the earliest
// row of a route is known.
func TestExplainWindowShortcut(t *testing.T) {
	f := newFixture(t)
	const routes = 12
	var batch []outbox.Message
	for r := 0; r < routes; r++ {
		for i := 0; i < 1+r%4; i++ {
			batch = append(batch, message(fmt.Sprintf("ns%02d", r/3), fmt.Sprintf("q%d", r%3), fmt.Sprintf("r%02d/%d", r, i)))
		}
	}
	f.enqueue(batch...)
	schema := pgx.Identifier{f.schema}.Sanitize()
	// Distinct visible times, all due, and one route in retry back-off.
	if _, err := adminPool.Exec(f.ctx, `UPDATE `+schema+`.outbox
SET visible_at = $1::timestamptz - id * interval '1 second' + CASE WHEN namespace = 'ns01' AND task_queue = 'q0' THEN interval '1 hour' ELSE interval '0' END`, f.now); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(f.ctx, "ANALYZE "+schema+".outbox"); err != nil {
		t.Fatal(err)
	}
	half := allShards(f)[:f.s.ShardCount()/2]
	var unownedFirst int
	if err := adminPool.QueryRow(f.ctx, `SELECT count(*) FROM (
	SELECT DISTINCT ON (namespace, task_queue) shard, visible_at
	FROM `+schema+`.outbox ORDER BY namespace, task_queue, visible_at
) first WHERE visible_at <= $1 AND NOT shard = ANY ($2)`, f.now, half).Scan(&unownedFirst); err != nil {
		t.Fatal(err)
	}
	if unownedFirst == 0 || unownedFirst == routes-1 {
		t.Fatalf("%d of the %d due routes start on an unowned shard; the test needs some of each", unownedFirst, routes-1)
	}
	sql := pgstore.Statements(f.s)["countPendingWindow"]
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range []struct {
			name   string
			shards []int32
			all    bool
			want   int // runs of the capped count subquery
		}{
			{"every shard", allShards(f), true, 0},
			{"half the shards", half, false, unownedFirst},
		} {
			args := []any{f.now, c.shards, int64(1), "", int64(routes), c.all}
			plan := explainWith(t, f, mode, "ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF", sql, args)
			if got := countSubqueryLoops(plan); got != c.want {
				t.Errorf("%s (%s): the capped count subquery ran %d times, want %d:\n%s", c.name, mode, got, c.want, plan)
			}
		}
	}
}

// countSubqueryLoops returns how many times the plan ran the capped count
// subquery: the loops of the window statement's Aggregate nodes (one in
// each term of the walk), whichever scan the planner chose below them; -1
// if there is none.
func countSubqueryLoops(plan string) int {
	runs, found := 0, false
	for _, line := range strings.Split(plan, "\n") {
		if !strings.Contains(line, "->  Aggregate (") {
			continue
		}
		found = true
		if m := loopsRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			runs += n
		}
	}
	if !found {
		return -1
	}
	return runs
}
