package jetstream_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	jsrelay "github.com/outboxkit/backpressure/relay/jetstream"
)

// crashStreamEnv passes the parent's stream to the children.
const (
	crashStreamEnv = "RELAY_CRASH_STREAM"
	crashStoreEnv  = "RELAY_CRASH_STORE" // the SQLite file or PostgreSQL schema
)

// TestCrash SIGKILLs dispatchers that relay rows to a stream, mid-publish,
// while rows arrive (dispatchtest.Crash, on each store): every row is
// settled and its message is in the stream exactly once, though handlers
// ran again after the kills: the stream dropped every re-publish by its
// Nats-Msg-Id.
func TestCrash(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		storeName := os.Getenv(crashStoreEnv)
		if !dispatchtest.IsChild() {
			storeName = ts.fresh(t)
			t.Setenv(crashStoreEnv, storeName)
		}
		_, js := connect(t)
		name := os.Getenv(crashStreamEnv)
		var s jetstream.Stream
		if !dispatchtest.IsChild() {
			s, _ = newStream(t, js, jetstream.StreamConfig{Duplicates: time.Hour})
			name = s.CachedInfo().Config.Name
			t.Setenv(crashStreamEnv, name)
		}
		res := dispatchtest.Crash{
			Rows: 1500, Kills: 5,
			Open: func(ctx context.Context, _ string) (outbox.Store, error) {
				return ts.open(ctx, storeName, time.Second)
			},
			Handler: func(ctx context.Context) (dispatch.Handler, error) {
				nc, err := nats.Connect(natsURL())
				if err != nil {
					return nil, err
				}
				js, err := jetstream.New(nc)
				if err != nil {
					return nil, err
				}
				r, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: name, Prefix: strings.ToLower(name), Horizon: time.Hour})
				if err != nil {
					return nil, err
				}
				return r.Handle, nil
			},
		}.Run(t)
		if dispatchtest.IsChild() {
			return
		}
		got := consume(t, s)
		seen := make(map[string]int, len(got))
		for _, m := range got {
			seen[m.Headers().Get(jetstream.MsgIDHeader)]++
		}
		lost, dups := 0, len(got)-len(seen)
		for k := range res.Rows {
			if seen[fmt.Sprintf("crash-%06d", k)] == 0 {
				lost++
			}
		}
		t.Logf("consumer saw %d messages for %d rows: %d lost, %d duplicates, through %d kills and %d handler re-runs",
			len(got), res.Rows, lost, dups, res.Kills, res.Reruns)
		if lost != 0 || dups != 0 || len(got) != res.Rows {
			t.Fatalf("%d lost, %d duplicates, %d messages; want every row once", lost, dups, len(got))
		}
	})
}
