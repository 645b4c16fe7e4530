package jetstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// natsURL is the broker the tests use: NATS_URL, or the local one.
func natsURL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// brokerErr is why the broker was not reachable when the tests started;
// nil when it was.
var brokerErr error

// TestMain probes the broker once. Without it the tests that need it skip,
// after one line saying how to run them, unless RELAY_REQUIRE=1 (set by
// .ci/run), which makes the same condition a failure.
func TestMain(m *testing.M) {
	nc, _, err := dial()
	if err == nil {
		nc.Close()
	} else {
		if os.Getenv("RELAY_REQUIRE") == "1" {
			fmt.Fprintf(os.Stderr, "relay/jetstream: NATS JetStream is required (RELAY_REQUIRE=1) but not reachable at %s: %v\n", natsURL(), err)
			os.Exit(1)
		}
		fmt.Printf("relay/jetstream: NATS JetStream not reachable at %s (%v); skipping the broker tests: start nats-server -js (or set NATS_URL) to run them, RELAY_REQUIRE=1 to fail instead\n", natsURL(), err)
		brokerErr = err
	}
	os.Exit(m.Run())
}

func dial() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// connect returns a JetStream client, closed at tb's end, or skips tb when
// the broker was not reachable (TestMain said so).
func connect(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	if brokerErr != nil {
		tb.Skipf("NATS JetStream not reachable: %v", brokerErr)
	}
	nc, js, err := dial()
	if err != nil {
		tb.Fatalf("NATS JetStream at %s: %v", natsURL(), err)
	}
	tb.Cleanup(nc.Close)
	return nc, js
}

// unique returns a name no other test (or run) uses: for streams and
// subject prefixes.
func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + strings.ToUpper(hex.EncodeToString(b[:]))
}

// newStream creates a stream named after the test on the subjects under
// a fresh prefix, deleted at the test's end, and returns it and the prefix.
func newStream(tb testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, string) {
	tb.Helper()
	ctx := context.Background()
	cfg.Name = unique("RELAY")
	prefix := strings.ToLower(cfg.Name)
	if cfg.Subjects == nil {
		cfg.Subjects = []string{prefix + ".>"}
	}
	s, err := js.CreateStream(ctx, cfg)
	if err != nil {
		tb.Fatalf("CreateStream(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
	return s, prefix
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

// consume reads every message of the stream through an ordered consumer:
// exactly the stream's count of them, and checks there is no more.
func consume(tb testing.TB, s jetstream.Stream) []jetstream.Msg {
	tb.Helper()
	ctx := context.Background()
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	n := int(info.State.Msgs)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	var got []jetstream.Msg
	for len(got) < n {
		batch, err := c.Fetch(n - len(got))
		if err != nil {
			tb.Fatal(err)
		}
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			tb.Fatal(err)
		}
	}
	rest, err := c.FetchNoWait(1)
	if err != nil {
		tb.Fatal(err)
	}
	for m := range rest.Messages() {
		tb.Fatalf("a message past the stream's count: %s", m.Subject())
	}
	return got
}
