package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// amqpURL is the broker the tests use: RABBITMQ_URL, or the local one.
func amqpURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// brokerErr is why the broker was not reachable when the tests started;
// nil when it was.
var brokerErr error

// TestMain probes the broker once. Without it the tests that need it skip,
// after one line saying how to run them, unless RELAY_REQUIRE=1 (set by
// .ci/run), which makes the same condition a failure.
func TestMain(m *testing.M) {
	conn, err := dial()
	if err == nil {
		_ = conn.Close()
	} else {
		if os.Getenv("RELAY_REQUIRE") == "1" {
			fmt.Fprintf(os.Stderr, "relay/rabbitmq: RabbitMQ is required (RELAY_REQUIRE=1) but not reachable at %s: %v\n", redact(amqpURL()), err)
			os.Exit(1)
		}
		fmt.Printf("relay/rabbitmq: RabbitMQ not reachable at %s (%v); skipping the broker tests: start rabbitmq-server (or set RABBITMQ_URL) to run them, RELAY_REQUIRE=1 to fail instead\n", redact(amqpURL()), err)
		brokerErr = err
	}
	os.Exit(m.Run())
}

func dial() (*amqp.Connection, error) {
	return amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
}

// redact hides a password in a URL, so that it can be printed.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return s
}

// connect returns a connection to the broker, closed at tb's end, or
// skips tb when the broker was not reachable (TestMain said so).
func connect(tb testing.TB) *amqp.Connection {
	tb.Helper()
	if brokerErr != nil {
		tb.Skipf("RabbitMQ not reachable: %v", brokerErr)
	}
	conn, err := dial()
	if err != nil {
		tb.Fatalf("RabbitMQ at %s: %v", redact(amqpURL()), err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// unique returns a name no other test (or run) uses.
func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// topology is a fresh topic exchange and a queue bound to it for the
// routing keys under a fresh prefix ("<prefix>.#"), deleted at the test's
// end, with a channel of its own to inspect the queue.
type topology struct {
	exchange, queue, prefix string
	ch                      *amqp.Channel
}

func newTopology(tb testing.TB, conn *amqp.Connection, queueArgs amqp.Table) topology {
	tb.Helper()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	top := topology{exchange: unique("relay-x"), queue: unique("relay-q"), prefix: unique("p"), ch: ch}
	if err := ch.ExchangeDeclare(top.exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		tb.Fatal(err)
	}
	if _, err := ch.QueueDeclare(top.queue, false, false, false, false, queueArgs); err != nil {
		tb.Fatal(err)
	}
	if err := ch.QueueBind(top.queue, top.prefix+".#", top.exchange, false, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_, _ = ch.QueueDelete(top.queue, false, false, false)
		_ = ch.ExchangeDelete(top.exchange, false, false)
		_ = ch.Close()
	})
	return top
}

// consume takes every message of the queue: exactly its count of them,
// and checks there is no more.
func (top topology) consume(tb testing.TB) []amqp.Delivery {
	tb.Helper()
	q, err := top.ch.QueueDeclarePassive(top.queue, false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var got []amqp.Delivery
	for range q.Messages {
		d, ok, err := top.ch.Get(top.queue, true)
		if err != nil || !ok {
			tb.Fatalf("get %d of %d: %v, %v", len(got)+1, q.Messages, ok, err)
		}
		got = append(got, d)
	}
	if d, ok, err := top.ch.Get(top.queue, true); err != nil || ok {
		tb.Fatalf("a message past the queue's count: %q, %v", d.MessageId, err)
	}
	return got
}

// messages returns n messages over three namespaces and two task queues.
func messages(n int, key string) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{
			DispatchKey: key + "-" + strconv.Itoa(i),
			Namespace:   []string{"acme", "globex", "initech"}[i%3],
			TaskQueue:   []string{"", "orders"}[i%2],
			Payload:     []byte("payload " + strconv.Itoa(i)),
		}
	}
	return msgs
}

// drain runs a dispatcher with handle over store until every one of its
// total rows is settled or dead, and returns the store's stats.
func drain(tb testing.TB, store outbox.Store, handle dispatch.Handler, total int) outbox.Stats {
	tb.Helper()
	return runUntil(tb, store, handle, func(st outbox.Stats) bool { return st.Settled+st.Dead == total })
}

// runUntil runs a dispatcher with handle over store until done reports
// true of the store's stats (and of whatever else it reads), and returns
// the last stats.
func runUntil(tb testing.TB, store outbox.Store, handle dispatch.Handler, done func(outbox.Stats) bool) outbox.Stats {
	tb.Helper()
	return runQuota(tb, store, handle, 20, done)
}

// runQuota is runUntil with quota as every namespace's quota: the most
// rows of a namespace claimed at once.
func runQuota(tb testing.TB, store outbox.Store, handle dispatch.Handler, quota int, done func(outbox.Stats) bool) outbox.Stats {
	tb.Helper()
	shards, err := backpressure.AllShards(store.ShardCount())
	if err != nil {
		tb.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 50, DefaultQuota: quota}, shards)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := dispatch.New(bp, store, handle, dispatch.Options{
		Workers: 8, PollInterval: 5 * time.Millisecond, FlushInterval: time.Millisecond,
		Backoff: dispatch.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	var st outbox.Stats
	for {
		st, err = store.Stats(context.Background())
		if err != nil {
			cancel()
			tb.Fatal(err)
		}
		if done(st) {
			break
		}
		select {
		case err := <-ran:
			tb.Fatalf("Run returned early: %v (stats %+v)", err, st)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-ran; err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return st
}
