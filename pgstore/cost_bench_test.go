package pgstore_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
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

// BenchmarkRowCost measures where the database work of a drained row goes:
// over a backlog of 20,000 rows in 10 namespaces × 2 task queues, one
// scoped claim of 1,000 rows (100 per namespace, the dispatcher's wide
// sweep) and one Complete of those 1,000 settles, each run under EXPLAIN
// (ANALYZE, BUFFERS, WAL), the store's own statements with the store's own
// parameters. It reports per row, for each: the execution time, shared
// buffers hit and dirtied, WAL records, full-page images and bytes. Every
// iteration measures a fresh pair on the same backlog. Per-node timing is
// off (TIMING OFF), so the execution time carries no clock reads per row:
// claim-µs/row + complete-µs/row is the backend's execution time of a
// drained row under this schema, before parsing, planning, the network and
// the commit's WAL flush, a floor under any drain's database CPU per row.
//
//	cd pgstore && go test -run '^$' -bench RowCost -benchtime 5x
func BenchmarkRowCost(b *testing.B) {
	ctx := b.Context()
	schema := testSchema(b)
	pool := newPool(b, nil, 4)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const namespaces, queues, perRoute = 10, 2, 1000
	for ns := range namespaces {
		var batch []outbox.Message
		for q := range queues {
			for i := range perRoute {
				batch = append(batch, message(fmt.Sprintf("ns%02d", ns), fmt.Sprint("q", q), fmt.Sprintf("ns%02d/q%d/%d", ns, q, i)))
			}
		}
		if _, err := s.Enqueue(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	table := pgx.Identifier{schema}.Sanitize() + ".outbox"
	if _, err := adminPool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
	sql := pgstore.Statements(s)
	shards := make([]int32, s.ShardCount())
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
	explain := func(q string, args ...any) explainCost {
		var out []explainCost
		var raw []byte
		if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, BUFFERS, WAL, FORMAT JSON) "+q, args...).Scan(&raw); err != nil {
			b.Fatalf("explain: %v", err)
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
			b.Fatalf("explain output %s: %v", raw, err)
		}
		return out[0]
	}
	var claim, complete [7]float64
	rows := 0
	add := func(acc *[7]float64, c explainCost) {
		p := c.Plan
		for i, v := range []float64{c.Execution, float64(p.SharedHit), float64(p.SharedDirtied), float64(p.WALRecords), float64(p.WALFPI), float64(p.WALBytes), float64(p.SharedRead)} {
			acc[i] += v
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		add(&claim, explain(sql["claimScoped"], nil, int64(30_000_000), shards, nss, tqs, lims, true))
		var keys []string
		var tokens []int64
		r, err := adminPool.Query(ctx, "SELECT dispatch_key, token FROM "+table+" WHERE state = 'claimed'")
		if err != nil {
			b.Fatal(err)
		}
		var k string
		var tok int64
		if _, err := pgx.ForEachRow(r, []any{&k, &tok}, func() error { keys, tokens = append(keys, k), append(tokens, tok); return nil }); err != nil {
			b.Fatal(err)
		}
		if len(keys) != 1000 {
			b.Fatalf("claimed %d rows, want 1000", len(keys))
		}
		outcomes, delays, errs := make([]int32, len(keys)), make([]int64, len(keys)), make([]string, len(keys))
		for i := range outcomes {
			outcomes[i] = 1
		}
		add(&complete, explain(sql["complete"], nil, keys, tokens, outcomes, delays, errs))
		rows += len(keys)
	}
	for _, m := range []struct {
		name string
		acc  *[7]float64
	}{{"claim", &claim}, {"complete", &complete}} {
		n := float64(rows)
		b.ReportMetric(m.acc[0]*1000/n, m.name+"-µs/row")
		b.ReportMetric(m.acc[1]/n, m.name+"-hit/row")
		b.ReportMetric(m.acc[2]/n, m.name+"-dirtied/row")
		b.ReportMetric(m.acc[3]/n, m.name+"-walrec/row")
		b.ReportMetric(m.acc[4]/n, m.name+"-fpi/row")
		b.ReportMetric(m.acc[5]/n, m.name+"-walB/row")
	}
}
