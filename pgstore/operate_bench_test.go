package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// BenchmarkNamespaceIndexCost measures what outbox_namespace_state_idx
// (the index Namespaces reads) costs the engine: each iteration enqueues
// 2,000 rows over 10 namespaces, claims them in sweeps of 500 and settles
// each sweep with one Complete, on a schema with the index and on one with
// it dropped, side by side, alternating which goes first. It reports rows
// per second of each and their ratio, and the index's size per row of the
// table. (WAL bytes would be the sharper measure, but the server's WAL
// position counts every session's writes, so on a shared server it
// measures the neighbours.)
//
//	go test -run '^$' -bench NamespaceIndexCost -benchtime 5x ./pgstore
func BenchmarkNamespaceIndexCost(b *testing.B) {
	ctx := context.Background()
	type variant struct {
		s    *pgstore.Store
		d    time.Duration
		rows int
	}
	newVariant := func(index bool) *variant {
		s, err := pgstore.New(ctx, newPool(b, nil, 2), pgstore.Options{Schema: testSchema(b)})
		if err != nil {
			b.Fatal(err)
		}
		if !index {
			if _, err := adminPool.Exec(ctx, "DROP INDEX "+pgx.Identifier{s.Schema()}.Sanitize()+".outbox_namespace_state_idx"); err != nil {
				b.Fatal(err)
			}
		}
		return &variant{s: s}
	}
	with, without := newVariant(true), newVariant(false)
	all, _ := backpressure.AllShards(pgstore.DefaultShardCount)
	next := 0
	round := func(v *variant) {
		var ms []outbox.Message
		for i := range 2000 {
			ms = append(ms, outbox.Message{DispatchKey: fmt.Sprintf("k%09d", next), Namespace: fmt.Sprintf("ns%02d", i%10), TaskQueue: "q", Payload: []byte("payload")})
			next++
		}
		began := time.Now()
		if _, err := v.s.Enqueue(ctx, ms); err != nil {
			b.Fatal(err)
		}
		for claimed := 0; claimed < len(ms); {
			rows, err := claimerOf(v.s).ClaimOutboxRowsUnscoped(ctx, all, 500)
			if err != nil || len(rows) == 0 {
				b.Fatalf("claim: %d rows, %v", len(rows), err)
			}
			cs := make([]outbox.Completion, len(rows))
			for i, r := range rows {
				cs[i] = outbox.SettleRow(r)
			}
			if _, err := v.s.Complete(ctx, cs); err != nil {
				b.Fatal(err)
			}
			claimed += len(rows)
		}
		v.d += time.Since(began)
		v.rows += len(ms)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// Alternate which goes first, so neither always runs on a warmer
		// cache or a quieter moment.
		if i%2 == 0 {
			round(with)
			round(without)
		} else {
			round(without)
			round(with)
		}
	}
	var size int64
	if err := adminPool.QueryRow(ctx, "SELECT pg_relation_size($1::regclass)", pgx.Identifier{with.s.Schema()}.Sanitize()+".outbox_namespace_state_idx").Scan(&size); err != nil {
		b.Fatal(err)
	}
	wr, or := float64(with.rows)/with.d.Seconds(), float64(without.rows)/without.d.Seconds()
	b.ReportMetric(float64(size)/float64(with.rows), "index-bytes/row")
	b.ReportMetric(wr, "rows/s")
	b.ReportMetric(or, "noindex-rows/s")
	b.ReportMetric(wr/or, "rows/s-ratio")
}
