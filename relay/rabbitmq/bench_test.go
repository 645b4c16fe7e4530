package rabbitmq_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/relay/rabbitmq"
)

// BenchmarkPublish measures rows published and confirmed per second, side
// by side in one run: each iteration publishes a round of rows through the
// relay's Handle, then as many through a hand-written loop over the same
// connection (the same message, mandatory, each worker on a channel of
// its own in confirm mode waiting for each confirm), each from the same
// number of goroutines (a dispatcher's workers), then as many on one
// channel with one wait for every confirm: the client's ceiling, which a
// handler that must settle each row after its own confirm cannot reach.
// B/op and allocs/op count the three arms' rounds together (3 × 256 rows).
// It reports relay-rows/s, hand-rows/s, batch-rows/s and relay/hand, the
// ratio the relay keeps of the hand loop.
//
//	cd relay/rabbitmq && go test -run '^$' -bench Publish -benchtime=20x
func BenchmarkPublish(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) { benchPublish(b, workers) })
	}
}

func benchPublish(b *testing.B, workers int) {
	conn := connect(b)
	top := newTopology(b, conn, nil)
	r := newRelay(b, conn, top, rabbitmq.Options{Channels: workers})
	const round = 256
	payload := make([]byte, 256)
	row := func(arm string, iter, i int) outbox.Row {
		return outbox.Row{DispatchKey: arm + "-" + strconv.Itoa(iter) + "-" + strconv.Itoa(i),
			Namespace: "ns" + strconv.Itoa(i%8), TaskQueue: "orders", Payload: payload, Attempts: 1}
	}
	msg := func(row outbox.Row) (string, amqp.Publishing) {
		return top.prefix + "." + row.Namespace + "." + row.TaskQueue, amqp.Publishing{
			Headers: amqp.Table{rabbitmq.HeaderNamespace: row.Namespace, rabbitmq.HeaderTaskQueue: row.TaskQueue,
				rabbitmq.HeaderDispatchKey: row.DispatchKey, rabbitmq.HeaderAttempt: int32(row.Attempts)},
			DeliveryMode: amqp.Persistent, MessageId: row.DispatchKey, Timestamp: row.EnqueuedAt, Body: row.Payload,
		}
	}
	confirmChannel := func() *amqp.Channel {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		ch.NotifyReturn(make(chan amqp.Return, 1))
		b.Cleanup(func() { _ = ch.Close() })
		return ch
	}
	handChannels := make([]*amqp.Channel, workers)
	for w := range handChannels {
		handChannels[w] = confirmChannel()
	}
	batchChannel := confirmChannel()
	// The queue is drained after each iteration, so that it stays small.
	drainQueue := func() {
		if _, err := top.ch.QueuePurge(top.queue, false); err != nil {
			b.Fatal(err)
		}
	}
	hand := func(w int) func(context.Context, outbox.Row) error {
		return func(ctx context.Context, row outbox.Row) error {
			key, m := msg(row)
			dc, err := handChannels[w].PublishWithDeferredConfirmWithContext(ctx, top.exchange, key, true, false, m)
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("hand publish: acked %v, %v", ok, err)
			}
			return nil
		}
	}
	parallel := func(arm string, iter int, handle func(w int) func(context.Context, outbox.Row) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			h := handle(w)
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < round; i = int(next.Add(1)) - 1 {
					if err := h(context.Background(), row(arm, iter, i)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	viaRelay := func(int) func(context.Context, outbox.Row) error { return r.Handle }
	batch := func(iter int) time.Duration {
		start := time.Now()
		var last *amqp.DeferredConfirmation
		for i := range round {
			key, m := msg(row("batch", iter, i))
			dc, err := batchChannel.PublishWithDeferredConfirmWithContext(context.Background(), top.exchange, key, true, false, m)
			if err != nil {
				b.Fatal(err)
			}
			last = dc
		}
		// Confirms of one channel come in order (or with multiple set):
		// the last one's confirm means every one's has come.
		if !last.Wait() {
			b.Fatal("batch publish nacked")
		}
		return time.Since(start)
	}
	b.ReportAllocs()
	var relayT, handT, batchT time.Duration
	for iter := 0; b.Loop(); iter++ {
		if iter%2 == 0 { // alternate which arm goes first, so neither always meets a warmer broker
			relayT += parallel("relay", iter, viaRelay)
			handT += parallel("hand", iter, hand)
		} else {
			handT += parallel("hand", iter, hand)
			relayT += parallel("relay", iter, viaRelay)
		}
		batchT += batch(iter)
		drainQueue()
	}
	rows := float64(b.N * round)
	b.ReportMetric(rows/relayT.Seconds(), "relay-rows/s")
	b.ReportMetric(rows/handT.Seconds(), "hand-rows/s")
	b.ReportMetric(rows/batchT.Seconds(), "batch-rows/s")
	b.ReportMetric(handT.Seconds()/relayT.Seconds(), "relay/hand")
	b.ReportMetric(0, "ns/op")
}
