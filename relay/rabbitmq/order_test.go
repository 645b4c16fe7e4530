package rabbitmq_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/relay/rabbitmq"
)

// orderedMessages returns perNamespace rows for each of namespaces
// namespaces, one task queue each, interleaved, keyed "<ns>-<round>-<000i>".
func orderedMessages(round, namespaces, perNamespace int) []outbox.Message {
	var msgs []outbox.Message
	for i := range perNamespace {
		for n := range namespaces {
			ns := "ns" + strconv.Itoa(n)
			msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("%s-%d-%04d", ns, round, i), Namespace: ns, TaskQueue: "orders"})
		}
	}
	return msgs
}

// With a quota of 1 a namespace has one row in flight at a time, held
// until its settle is written, so the queue holds each namespace's rows in
// claim order, which is enqueue order within a route: strict order per
// namespace (while no row fails: a retried row comes after the rows
// published while it waited).
func TestQuotaOneKeepsOrderPerNamespace(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		conn := connect(t)
		top := newTopology(t, conn, nil)
		r := newRelay(t, conn, top, rabbitmq.Options{Channels: 8})
		store := ts.openStore(t)
		const namespaces, per = 4, 40
		if _, err := store.Enqueue(context.Background(), orderedMessages(0, namespaces, per)); err != nil {
			t.Fatal(err)
		}
		runQuota(t, store, r.Handle, 1, func(st outbox.Stats) bool { return st.Settled == namespaces*per })
		last := map[string]string{}
		got := top.consume(t)
		for _, d := range got {
			ns, _, _ := strings.Cut(d.MessageId, "-")
			if prev := last[ns]; prev >= d.MessageId {
				t.Fatalf("namespace %s: %s after %s; want enqueue order", ns, d.MessageId, prev)
			}
			last[ns] = d.MessageId
		}
		if len(got) != namespaces*per || len(last) != namespaces {
			t.Fatalf("saw %d messages of %d namespaces, want %d of %d", len(got), len(last), namespaces*per, namespaces)
		}
	})
}

// BenchmarkDrainOrder measures what strict order per namespace costs: a
// backlog of 8 namespaces' rows drained through dispatch (16 workers, on
// sqlitestore) and the relay, with a quota of 1 (one row of a namespace
// in flight: strict order) against 16 (up to 16 in flight per namespace:
// claim order up to a reordering among them). It reports rows/s.
//
//	cd relay/rabbitmq && go test -run '^$' -bench DrainOrder -benchtime=5x
func BenchmarkDrainOrder(b *testing.B) {
	for _, quota := range []int{1, 16} {
		b.Run("quota="+strconv.Itoa(quota), func(b *testing.B) {
			conn := connect(b)
			top := newTopology(b, conn, nil)
			r := newRelay(b, conn, top, rabbitmq.Options{Channels: 16})
			store := stores[0].openStore(b)
			const per = 100
			b.ReportAllocs()
			var elapsed time.Duration
			for round := 0; b.Loop(); round++ {
				if _, err := store.Enqueue(context.Background(), orderedMessages(round, 8, per)); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				runQuota(b, store, r.Handle, quota, func(st outbox.Stats) bool { return st.Settled == (round+1)*8*per })
				elapsed += time.Since(start)
				if _, err := top.ch.QueuePurge(top.queue, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*8*per)/elapsed.Seconds(), "rows/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
