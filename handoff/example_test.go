package handoff_test

import (
	"fmt"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/handoff"
)

// Where each gate stands on the seed's decision boundary, and so what its
// protection rests on.
func ExampleClassify() {
	gates := []backpressure.BackpressureGate{
		{Enforced: true, QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
		{ProducerComplianceVerified: true, QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
		{QueueCapacity: 12_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
		{QueueCapacity: 11_999, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
	}
	for _, g := range gates {
		class, _ := handoff.Classify(g)
		fmt.Printf("%-17s → %v (assumes cooperation: %v)\n", class, class.Mode(), class.AssumesCooperation())
	}
	// Output:
	// enforced          → backpressure-protective (assumes cooperation: false)
	// advisory-verified → backpressure-protective (assumes cooperation: true)
	// advisory-headroom → backpressure-protective (assumes cooperation: false)
	// advisory-overflow → add-enforced-credit (assumes cooperation: false)
}

// A producer asked for 100 messages/s, allowed 10% over, that ignores the
// request for a while. Times are injected; in production, call Record and
// Check.
func ExampleComplianceMonitor() {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	m, err := handoff.NewComplianceMonitor(handoff.ComplianceMonitorConfig{
		RequestedRate:     100,
		Window:            time.Second,
		Tolerance:         0.1,
		RecoveryTolerance: 0,
		Grace:             time.Second,
		OnAlert: func(a handoff.ComplianceAlert) {
			fmt.Printf("ALERT episode %d at +%v: %v\n", a.Episode, a.Signature.At.Sub(start), a.Signature)
		},
		OnRecover: func(a handoff.ComplianceAlert) {
			fmt.Printf("recovered from episode %d at +%v: %v\n", a.Episode, a.Signature.At.Sub(start), a.Signature)
		},
	})
	if err != nil {
		panic(err)
	}
	// Every 100ms for 6s: 100/s, then 200/s from +2s, then 100/s from +4s.
	// The window slides a 100ms bucket at a time: at +2s it holds 110/s,
	// within tolerance; at +2.1s, 120/s. Recovery to 100/s waits until the
	// last 200/s bucket has left the window.
	for i := range 60 {
		rate := 100
		if i >= 20 && i < 40 {
			rate = 200
		}
		m.RecordAt(start.Add(time.Duration(i)*100*time.Millisecond), rate/10)
	}
	fmt.Println(m.CheckAt(start.Add(5900 * time.Millisecond)))
	// Output:
	// ALERT episode 1 at +2.1s: non-compliant: observed 120/s, requested 100/s, tolerance 10% over 1s
	// recovered from episode 1 at +4.9s: compliant: observed 100/s, requested 100/s, tolerance 10% over 1s
	// compliant: observed 100/s, requested 100/s, tolerance 10% over 1s
}

// A 10,000-message queue signalling at 7,000, filled at 5,000/s and drained
// at 3,000/s: it signals 3.5s after starting empty, is full 5s after, and
// has 1.5s from the signal to the first dropped message.
func ExampleQueueModel() {
	q := handoff.QueueModel{Capacity: 10_000, HighWatermark: 7_000, ProduceRate: 5_000, DrainRate: 3_000}
	toWatermark, _ := q.UntilHighWatermark(0)
	toFull, _ := q.UntilFull(0)
	fromWatermark, _ := q.UntilFull(q.HighWatermark)
	fmt.Println("empty → watermark:", toWatermark)
	fmt.Println("empty → full:", toFull)
	fmt.Println("watermark → full:", fromWatermark)

	// Doubling the queue only postpones the overflow.
	q.Capacity, q.HighWatermark = 20_000, 14_000
	fromWatermark, _ = q.UntilFull(q.HighWatermark)
	fmt.Println("twice the queue, watermark → full:", fromWatermark)

	// Only a drain that keeps up stops it.
	q.DrainRate = 5_000
	never, _ := q.UntilFull(0)
	fmt.Println("drain 5,000/s:", never)
	// Output:
	// empty → watermark: 3.5s
	// empty → full: 5s
	// watermark → full: 1.5s
	// twice the queue, watermark → full: 3s
	// drain 5,000/s: never
}

// A verdict carries the records behind the class, so that "protective" can
// be checked rather than believed.
func ExampleNewVerdict() {
	g := backpressure.BackpressureGate{ProducerComplianceVerified: true, QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}
	signal := handoff.SignalReceipt{Kind: handoff.SignalRetryAfter, Acknowledged: true}

	v, _ := handoff.NewVerdict(g, signal, handoff.ComplianceSignature{Verdict: handoff.ComplianceBreached}, handoff.EnforcedBoundReceipt{})
	fmt.Println(v.Class, v.Protective(), v.Checkable(), v.Gaps())

	v, _ = handoff.NewVerdict(g, signal, handoff.ComplianceSignature{Verdict: handoff.ComplianceMet}, handoff.EnforcedBoundReceipt{})
	fmt.Println(v.Class, v.Protective(), v.Checkable(), v.Gaps())
	// Output:
	// advisory-verified true false [producer-compliance signature: want compliant, have non-compliant]
	// advisory-verified true true []
}

// A dispatcher claims at most BatchSize rows per sweep and hands them to a
// worker queue. At start-up it refuses a queue that could not absorb a
// sweep's batch above the watermark.
func ExampleWorkerQueueGate() {
	shards, _ := backpressure.AllShards(64)
	b, _ := backpressure.New(backpressure.Config{BatchSize: 500, DefaultQuota: 1_000}, shards)

	if _, err := handoff.WorkerQueueGate(b, 1_000, 700); err != nil {
		fmt.Println("refusing to start:", err)
	}
	g, err := handoff.WorkerQueueGate(b, 1_200, 700)
	fmt.Printf("%+v %v\n", g, err)
	// Output:
	// refusing to start: backpressure: queue capacity 1000 < required 1200 (watermark 700 + inflight 500): advisory signal cannot prevent overflow
	// {Enforced:false QueueCapacity:1200 HighWatermark:700 ProducerMaxInflight:500 ProducerComplianceVerified:false} <nil>
}
