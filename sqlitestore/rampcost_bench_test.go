package sqlitestore

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// rampNamespaces and rampSteps shape BenchmarkRampCost's backlog.
const (
	rampNamespaces = 10
	rampSteps      = 10
)

// BenchmarkRampCost is BenchmarkDrainCost's fair drain on a backlog that
// ramps up, the case where a sweep's first count, capped from the last
// sweep's largest grant (see backpressure's sweepHints.firstCountCap), most
// often falls short and counts again: each iteration opens a fresh file
// store over rampNamespaces namespaces and, for step i = 1 … rampSteps,
// enqueues i rows on each namespace's route, sweeps once (batch benchBatch,
// enough for every row) and completes the sweep's rows in one Complete, so
// each sweep grants every route one row more than the last. Count its
// instructions under callgrind as BenchmarkDrainCost's doc says, with
// -test.bench 'RampCost', and compare builds; rows/s is only indicative.
func BenchmarkRampCost(b *testing.B) {
	b.ReportAllocs()
	ctx := b.Context()
	template := costTemplate(b, 0, rampNamespaces)
	drained, key := 0, 0
	for b.Loop() {
		s := drainStore(b, template)
		shards, err := backpressure.AllShards(s.ShardCount())
		if err != nil {
			b.Fatal(err)
		}
		bp, err := backpressure.New(backpressure.Config{BatchSize: benchBatch, DefaultQuota: backpressure.Unlimited}, shards)
		if err != nil {
			b.Fatal(err)
		}
		for step := 1; step <= rampSteps; step++ {
			msgs := make([]outbox.Message, 0, step*rampNamespaces)
			for range step {
				for ns := range rampNamespaces {
					msgs = append(msgs, outbox.Message{DispatchKey: "k" + strconv.Itoa(key), Namespace: "ns" + strconv.Itoa(ns), TaskQueue: "q", Payload: []byte("payload")})
					key++
				}
			}
			if _, err := s.Enqueue(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			rows, _, err := backpressure.Sweep(ctx, bp, s.Claimer())
			if err != nil {
				b.Fatal(err)
			}
			if len(rows) != len(msgs) {
				b.Fatal(fmt.Errorf("step %d: swept %d rows, want %d", step, len(rows), len(msgs)))
			}
			completions := make([]outbox.Completion, len(rows))
			for i, r := range rows {
				completions[i] = outbox.SettleRow(r)
			}
			if _, err := s.Complete(ctx, completions); err != nil {
				b.Fatal(err)
			}
			drained += len(rows)
		}
		_ = s.Close()
	}
	b.ReportMetric(float64(drained)/float64(b.N), "rows/op")
}
