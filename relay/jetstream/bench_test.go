package jetstream_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure/outbox"
	jsrelay "github.com/outboxkit/backpressure/relay/jetstream"
)

// BenchmarkPublish measures rows published and acked per second, side by
// side in one run: each iteration publishes a round of rows through the
// relay's Handle, then as many through a hand-written loop over the same
// client (the same subject, id, headers and payload, PublishMsg waiting
// for each ack), each from the same number of goroutines (a dispatcher's
// workers), then as many with PublishMsgAsync and one wait for every ack:
// the client's ceiling, which a handler that must settle each row after
// its own ack cannot reach. B/op and allocs/op count the three arms'
// rounds together (3 × 256 rows). It reports relay-rows/s, hand-rows/s,
// async-rows/s and relay/hand, the ratio the relay keeps of the hand loop.
//
//	cd relay/jetstream && go test -run '^$' -bench Publish -benchtime=20x
func BenchmarkPublish(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) { benchPublish(b, workers) })
	}
}

func benchPublish(b *testing.B, workers int) {
	_, js := connect(b)
	s, prefix := newStream(b, js, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	stream := s.CachedInfo().Config.Name
	r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: stream, Prefix: prefix, Horizon: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	const round = 256
	payload := make([]byte, 256)
	row := func(arm string, iter, i int) outbox.Row {
		return outbox.Row{DispatchKey: arm + "-" + strconv.Itoa(iter) + "-" + strconv.Itoa(i),
			Namespace: "ns" + strconv.Itoa(i%8), TaskQueue: "orders", Payload: payload, Attempts: 1}
	}
	hand := func(ctx context.Context, row outbox.Row) error {
		h := nats.Header{}
		h.Set(jetstream.MsgIDHeader, row.DispatchKey)
		h.Set(jetstream.ExpectedStreamHeader, stream)
		h.Set(jsrelay.HeaderNamespace, row.Namespace)
		h.Set(jsrelay.HeaderTaskQueue, row.TaskQueue)
		h.Set(jsrelay.HeaderDispatchKey, row.DispatchKey)
		h.Set(jsrelay.HeaderAttempt, strconv.Itoa(row.Attempts))
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: prefix + "." + row.Namespace + "." + row.TaskQueue, Header: h, Data: row.Payload})
		return err
	}
	// parallel runs handle over round rows from workers goroutines.
	parallel := func(arm string, iter int, handle func(context.Context, outbox.Row) error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < round; i = int(next.Add(1)) - 1 {
					if err := handle(context.Background(), row(arm, iter, i)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	async := func(iter int) time.Duration {
		start := time.Now()
		for i := range round {
			m, err := r.Message(row("async", iter, i))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		return time.Since(start)
	}
	b.ReportAllocs()
	var relayT, handT, asyncT time.Duration
	for iter := 0; b.Loop(); iter++ {
		if iter%2 == 0 { // alternate which arm goes first, so neither always meets a warmer broker
			relayT += parallel("relay", iter, r.Handle)
			handT += parallel("hand", iter, hand)
		} else {
			handT += parallel("hand", iter, hand)
			relayT += parallel("relay", iter, r.Handle)
		}
		asyncT += async(iter)
	}
	rows := float64(b.N * round)
	b.ReportMetric(rows/relayT.Seconds(), "relay-rows/s")
	b.ReportMetric(rows/handT.Seconds(), "hand-rows/s")
	b.ReportMetric(rows/asyncT.Seconds(), "async-rows/s")
	b.ReportMetric(handT.Seconds()/relayT.Seconds(), "relay/hand")
	b.ReportMetric(0, "ns/op")
}
