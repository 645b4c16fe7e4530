package backpressure_test

import (
	"errors"
	"fmt"

	"github.com/outboxkit/backpressure"
)

// A 10,000-message queue that signals at 7,000, fed by a
// producer with 5,000 messages in flight. The advisory signal cannot save
// it; an enforced bound can, and so can headroom.
func ExampleBackpressureGate_Verify() {
	g := backpressure.BackpressureGate{QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}
	err := g.Verify()
	fmt.Println(err)

	var overflow *backpressure.AdvisoryOverflowError
	if errors.As(err, &overflow) {
		fmt.Println("short by", overflow.Required-overflow.QueueCapacity)
	}

	g.Enforced = true
	fmt.Println("enforced:", g.Verify())

	g = backpressure.BackpressureGate{QueueCapacity: 12_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000}
	fmt.Println("with headroom:", g.Verify())

	g = backpressure.BackpressureGate{QueueCapacity: 10_000, HighWatermark: 12_000}
	fmt.Println(errors.Is(g.Verify(), backpressure.ErrInvalidConfig), g.Verify())
	// Output:
	// backpressure: queue capacity 10000 < required 12000 (watermark 7000 + inflight 5000): advisory signal cannot prevent overflow
	// short by 2000
	// enforced: <nil>
	// with headroom: <nil>
	// true backpressure: invalid config: BackpressureGate.HighWatermark = 12000: above QueueCapacity 10000
}

func ExampleBackpressureGate_Mode() {
	gates := []backpressure.BackpressureGate{
		{Enforced: true, QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
		{ProducerComplianceVerified: true, QueueCapacity: 10_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
		{QueueCapacity: 12_000, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
		{QueueCapacity: 11_999, HighWatermark: 7_000, ProducerMaxInflight: 5_000},
	}
	for _, g := range gates {
		mode, err := g.Mode()
		fmt.Printf("%v (err %v)\n", mode, err)
	}
	_, err := backpressure.BackpressureGate{QueueCapacity: -1}.Mode()
	fmt.Println(err)
	// Output:
	// backpressure-protective (err <nil>)
	// backpressure-protective (err <nil>)
	// backpressure-protective (err <nil>)
	// add-enforced-credit (err <nil>)
	// backpressure: invalid config: BackpressureGate.QueueCapacity = -1: must not be negative
}
