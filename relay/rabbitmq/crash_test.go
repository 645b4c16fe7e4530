package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/relay/rabbitmq"
)

// crashEnv passes the parent's exchange and routing-key prefix to the
// children.
const (
	crashStoreEnv    = "RELAY_CRASH_STORE" // the SQLite file or PostgreSQL schema
	crashExchangeEnv = "RELAY_CRASH_EXCHANGE"
	crashPrefixEnv   = "RELAY_CRASH_PREFIX"
)

// TestCrash SIGKILLs dispatchers that relay rows to an exchange,
// mid-publish, while rows arrive (dispatchtest.Crash, on each store):
// every row is settled and its message reached the queue; the duplicates
// a consumer sees (same message_id) are counted, and are at most the
// handler runs repeated after the kills.
func TestCrash(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		storeName := os.Getenv(crashStoreEnv)
		if !dispatchtest.IsChild() {
			storeName = ts.fresh(t)
			t.Setenv(crashStoreEnv, storeName)
		}
		conn := connect(t)
		exchange, prefix := os.Getenv(crashExchangeEnv), os.Getenv(crashPrefixEnv)
		var top topology
		if !dispatchtest.IsChild() {
			top = newTopology(t, conn, nil)
			exchange, prefix = top.exchange, top.prefix
			t.Setenv(crashExchangeEnv, exchange)
			t.Setenv(crashPrefixEnv, prefix)
		}
		res := dispatchtest.Crash{
			Rows: 1500, Kills: 5,
			Open: func(ctx context.Context, _ string) (outbox.Store, error) {
				return ts.open(ctx, storeName, time.Second)
			},
			Handler: func(ctx context.Context) (dispatch.Handler, error) {
				conn, err := amqp.Dial(amqpURL())
				if err != nil {
					return nil, err
				}
				r, err := rabbitmq.New(ctx, conn, rabbitmq.Options{Exchange: exchange, Prefix: prefix, Channels: 16})
				if err != nil {
					return nil, err
				}
				return r.Handle, nil
			},
		}.Run(t)
		if dispatchtest.IsChild() {
			return
		}
		got := top.consume(t)
		seen := make(map[string]int, len(got))
		for _, d := range got {
			seen[d.MessageId]++
		}
		lost, dups := 0, len(got)-len(seen)
		for k := range res.Rows {
			if seen[fmt.Sprintf("crash-%06d", k)] == 0 {
				lost++
			}
		}
		t.Logf("consumer saw %d messages for %d rows: %d lost, %d duplicates (same message_id), through %d kills and %d handler re-runs",
			len(got), res.Rows, lost, dups, res.Kills, res.Reruns)
		if lost != 0 || len(seen) != res.Rows || dups > res.Reruns {
			t.Fatalf("%d lost, %d distinct ids, %d duplicates; want every row, and at most %d duplicates", lost, len(seen), dups, res.Reruns)
		}
	})
}
