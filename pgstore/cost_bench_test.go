package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// explainCost is what EXPLAIN (ANALYZE, BUFFERS, WAL) reports of one
// statement's top plan node.
type explainCost struct {
	Plan struct {
		SharedHit     int64   `json:"Shared Hit Blocks"`
		SharedRead    int64   `json:"Shared Read Blocks"`
		SharedDirtied int64   `json:"Shared Dirtied Blocks"`
		WALRecords    int64   `json:"WAL Records"`
		WALFPI        int64   `json:"WAL FPI"`
		WALBytes      int64   `json:"WAL Bytes"`
		TotalTime     float64 `json:"Actual Total Time"`
	} `json:"Plan"`
	Execution float64 `json:"Execution Time"`
}

// costArm is one schema BenchmarkRowCost measures: its outbox table, its
// claim and Complete statements, and the sums of what EXPLAIN reported of
// them (execution ms, shared hit, dirtied, WAL records, FPI, WAL bytes,
// shared read).
type costArm struct {
	name, table, claim, complete string
	enqueue                      string // the store's Enqueue statement ("" for v12)
	acc                          [2][7]float64
}

// BenchmarkRowCost measures where the database work of a drained row goes,
// before and after migration 13, side by side in one run: five outboxes,
// one at schema version 12 (built by migrations 1 to 12, claimed and
// completed with version 12's statements, testdata/v12) and four at this
// package's version (the store's own statements), two of them with their
// pages filled whole (fillfactor 100, as before) or to 70%, one completed
// with version 13's first Complete (testdata/v13, v13-complete: the
// statement that put the results in order in the database), each with the same
// backlog of 20,000 rows in 10 namespaces × 2 task queues. Each iteration
// runs, on each outbox in turn, one scoped claim of 1,000 rows (50 per
// route, the dispatcher's wide sweep) and one Complete of those 1,000
// settles, each under EXPLAIN (ANALYZE, BUFFERS, WAL), with the store's
// parameters. It reports per row, for each arm and statement: the
// execution time, shared buffers hit and dirtied, WAL records, full-page
// images and bytes; the after/before ratios of WAL records and of
// execution time of claim + complete; and complete-µs/v13-complete, the
// store's Complete over version 13's first. Per-node timing is off (TIMING
// OFF), so the execution time carries no clock reads per row:
// claim-µs/row + complete-µs/row is the backend's execution time of a
// drained row, before parsing, planning, the network and the commit's WAL
// flush, a floor under any drain's database CPU per row. Both statements'
// writes are in their top node (the claim's and the Complete's UPDATE is
// the statement; v12's and v13-complete's data-modifying CTE is referenced
// by their final join), so the WAL counts are whole.
//
//	cd pgstore && go test -run '^$' -bench RowCost -benchtime 5x
func BenchmarkRowCost(b *testing.B) {
	pool := newPool(b, nil, 4)
	before := costSchemaV12(b, pool)
	v13Complete := costSchema(b, pool, "v13-complete")
	v13Complete.complete = costStatement(b, "testdata/v13/complete.sql", strings.TrimSuffix(v13Complete.table, ".outbox"))
	arms := []*costArm{before, costSchema(b, pool, "v13-ff100"), costSchema(b, pool, "v13-ff70"), v13Complete, costSchema(b, pool, "v13")}
	const namespaces, queues, perRoute = 10, 2, 1000
	for _, a := range arms {
		costFill(b, a.table, namespaces, queues, perRoute)
	}
	shards := make([]int32, 64)
	for i := range shards {
		shards[i] = int32(i)
	}
	var nss, tqs []string
	var lims []int64
	for ns := range namespaces {
		for q := range queues {
			nss, tqs, lims = append(nss, fmt.Sprintf("ns%02d", ns)), append(tqs, fmt.Sprint("q", q)), append(lims, 50)
		}
	}
	rows := 0
	b.ReportAllocs()
	for b.Loop() {
		for _, a := range arms {
			costAdd(&a.acc[0], explainCost1(b, pool, a.claim, nil, int64(30_000_000), shards, nss, tqs, lims, true))
			keys, tokens := costClaimed(b, a.table)
			if len(keys) != 1000 {
				b.Fatalf("%s: claimed %d rows, want 1000", a.name, len(keys))
			}
			outcomes, delays, errs := make([]int32, len(keys)), make([]int64, len(keys)), make([]string, len(keys))
			for i := range outcomes {
				outcomes[i] = 1
			}
			costAdd(&a.acc[1], explainCost1(b, pool, a.complete, nil, keys, tokens, outcomes, delays, errs))
		}
		rows += 1000
	}
	costReport(b, arms, float64(rows))
}

// costSchema creates an outbox at this package's schema version with 64
// shards and returns it as an arm with the store's statements; an arm
// named …-ff100 has its pages filled whole, as before version 13 (the
// share of the saving that the half-filled pages make).
func costSchema(b *testing.B, pool *pgxpool.Pool, name string) *costArm {
	schema := testSchema(b)
	s, err := pgstore.New(b.Context(), pool, pgstore.Options{Schema: schema, ShardCount: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	table := pgx.Identifier{schema}.Sanitize() + ".outbox"
	if _, ff, ok := strings.Cut(name, "-ff"); ok {
		if _, err := adminPool.Exec(b.Context(), "ALTER TABLE "+table+" SET (fillfactor = "+ff+")"); err != nil {
			b.Fatal(err)
		}
	}
	sql := pgstore.Statements(s)
	return &costArm{name: name, table: table, claim: sql["claimScoped"], complete: sql["complete"], enqueue: sql["enqueue"]}
}

// costSchemaV12 builds an outbox at schema version 12 by its migrations,
// with 64 shards, and returns it as an arm with version 12's statements.
func costSchemaV12(b *testing.B, pool *pgxpool.Pool) *costArm {
	schema := testSchema(b)
	q := pgx.Identifier{schema}.Sanitize()
	ddl := "CREATE SCHEMA " + q + ";\n"
	for v := 1; v <= 12; v++ {
		ddl += pgstore.Migration(v, schema) + ";\n"
	}
	ddl += "INSERT INTO " + q + ".settings (shard_count) VALUES (64);"
	if _, err := pool.Exec(b.Context(), ddl); err != nil {
		b.Fatal(err)
	}
	return &costArm{name: "v12", table: q + ".outbox", claim: costStatement(b, "testdata/v12/claim_scoped.sql", q),
		complete: costStatement(b, "testdata/v12/complete.sql", q)}
}

// costStatement reads a statement of an earlier version from path (its
// first line says where it comes from) and puts the quoted schema q in it.
func costStatement(b *testing.B, path, q string) string {
	text, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	_, stmt, _ := strings.Cut(string(text), "\n") // the provenance line
	return strings.ReplaceAll(stmt, "{schema}", q)
}

// costFill inserts the backlog into table as Enqueue would (the shard of
// each key, ids in enqueue order), then VACUUM ANALYZEs it.
func costFill(b *testing.B, table string, namespaces, queues, perRoute int) {
	ctx := b.Context()
	var keys, nss, tqs []string
	var shards []int32
	for ns := range namespaces {
		for q := range queues {
			for i := range perRoute {
				k := fmt.Sprintf("ns%02d/q%d/%d", ns, q, i)
				keys, nss, tqs = append(keys, k), append(nss, fmt.Sprintf("ns%02d", ns)), append(tqs, fmt.Sprint("q", q))
				shards = append(shards, int32(outbox.ShardFor(k, 64)))
			}
		}
	}
	if _, err := adminPool.Exec(ctx, `
INSERT INTO `+table+` (dispatch_key, namespace, task_queue, shard, payload, enqueued_at, visible_at)
SELECT u.k, u.ns, u.tq, u.s, convert_to(u.k, 'UTF8'), t.at + u.n * interval '1 microsecond', t.at + u.n * interval '1 microsecond'
FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[]) WITH ORDINALITY AS u (k, ns, tq, s, n),
	(SELECT now() - interval '1 hour' AS at) t
ORDER BY u.n`, keys, nss, tqs, shards); err != nil {
		b.Fatal(err)
	}
	if _, err := adminPool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
}

// costClaimed returns the dispatch keys and tokens of table's claimed rows.
func costClaimed(b *testing.B, table string) (keys []string, tokens []int64) {
	r, err := adminPool.Query(b.Context(), "SELECT dispatch_key, token FROM "+table+" WHERE state = 'claimed'")
	if err != nil {
		b.Fatal(err)
	}
	var k string
	var tok int64
	if _, err := pgx.ForEachRow(r, []any{&k, &tok}, func() error { keys, tokens = append(keys, k), append(tokens, tok); return nil }); err != nil {
		b.Fatal(err)
	}
	return keys, tokens
}

// explainCost1 runs q under EXPLAIN (ANALYZE, TIMING OFF, BUFFERS, WAL).
func explainCost1(b *testing.B, pool *pgxpool.Pool, q string, args ...any) explainCost {
	var out []explainCost
	var raw []byte
	if err := pool.QueryRow(context.WithoutCancel(b.Context()), "EXPLAIN (ANALYZE, TIMING OFF, BUFFERS, WAL, FORMAT JSON) "+q, args...).Scan(&raw); err != nil {
		b.Fatalf("explain: %v", err)
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		b.Fatalf("explain output %s: %v", raw, err)
	}
	return out[0]
}

// costAdd adds one EXPLAIN's figures to acc.
func costAdd(acc *[7]float64, c explainCost) {
	p := c.Plan
	for i, v := range []float64{c.Execution, float64(p.SharedHit), float64(p.SharedDirtied), float64(p.WALRecords), float64(p.WALFPI), float64(p.WALBytes), float64(p.SharedRead)} {
		acc[i] += v
	}
}

// costReport reports each arm's figures per row, and the last arm's WAL
// records and execution time over the first's.
func costReport(b *testing.B, arms []*costArm, n float64) {
	for _, a := range arms {
		for j, stmt := range []string{"claim", "complete"} {
			m := a.acc[j]
			b.ReportMetric(m[0]*1000/n, a.name+"-"+stmt+"-µs/row")
			b.ReportMetric(m[1]/n, a.name+"-"+stmt+"-hit/row")
			b.ReportMetric(m[2]/n, a.name+"-"+stmt+"-dirtied/row")
			b.ReportMetric(m[3]/n, a.name+"-"+stmt+"-walrec/row")
			b.ReportMetric(m[4]/n, a.name+"-"+stmt+"-fpi/row")
			b.ReportMetric(m[5]/n, a.name+"-"+stmt+"-walB/row")
		}
	}
	first, last := arms[0].acc, arms[len(arms)-1].acc
	b.ReportMetric((last[0][3]+last[1][3])/(first[0][3]+first[1][3]), "walrec-ratio")
	b.ReportMetric((last[0][0]+last[1][0])/(first[0][0]+first[1][0]), "µs-ratio")
	if prev := arms[len(arms)-2]; prev.name == "v13-complete" {
		b.ReportMetric(last[1][0]/prev.acc[1][0], "complete-µs/v13-complete")
	}
}
