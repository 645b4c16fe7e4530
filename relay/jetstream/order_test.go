package jetstream_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure/outbox"
	jsrelay "github.com/outboxkit/backpressure/relay/jetstream"
)

// orderedMessages returns perNamespace rows for each of namespaces
// namespaces, one task queue each, interleaved, keyed "<ns>-<000i>".
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
// until its settle is written, so the stream holds each namespace's rows
// in claim order, which is enqueue order within a route: strict order per
// namespace (while no row fails: a retried row comes after the rows
// published while it waited).
func TestQuotaOneKeepsOrderPerNamespace(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		_, js := connect(t)
		s, prefix := newStream(t, js, jetstream.StreamConfig{})
		r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Prefix: prefix, Horizon: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		store := ts.openStore(t)
		const namespaces, per = 4, 40
		if _, err := store.Enqueue(context.Background(), orderedMessages(0, namespaces, per)); err != nil {
			t.Fatal(err)
		}
		runQuota(t, store, r.Handle, 1, func(st outbox.Stats) bool { return st.Settled == namespaces*per })
		last := map[string]string{}
		for _, m := range consume(t, s) {
			key := m.Headers().Get(jetstream.MsgIDHeader)
			ns, _, _ := strings.Cut(key, "-")
			if prev := last[ns]; prev >= key {
				t.Fatalf("namespace %s: %s after %s; want enqueue order", ns, key, prev)
			}
			last[ns] = key
		}
		if len(last) != namespaces {
			t.Fatalf("saw %d namespaces, want %d", len(last), namespaces)
		}
	})
}

// BenchmarkDrainOrder measures what strict order per namespace costs: a
// backlog of 8 namespaces' rows drained through dispatch (16 workers, on
// sqlitestore) and the relay, with a quota of 1 (one row of a namespace
// in flight: strict order) against 16 (up to 16 in flight per namespace:
// claim order up to a reordering among them). It reports rows/s.
//
//	cd relay/jetstream && go test -run '^$' -bench DrainOrder -benchtime=5x
func BenchmarkDrainOrder(b *testing.B) {
	for _, quota := range []int{1, 16} {
		b.Run("quota="+strconv.Itoa(quota), func(b *testing.B) {
			_, js := connect(b)
			s, prefix := newStream(b, js, jetstream.StreamConfig{})
			r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Prefix: prefix, Horizon: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
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
			}
			b.ReportMetric(float64(b.N*8*per)/elapsed.Seconds(), "rows/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
