package jetstream_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	jsrelay "github.com/outboxkit/backpressure/relay/jetstream"
)

// relayToJetStream is the README's example ("Relay to a broker"): every
// row of the task queue "events" is published to the stream OUTBOX on
// "outbox.<namespace>.events", exactly once within the stream's window.
func relayToJetStream(ctx context.Context, bp *backpressure.Backpressure, store dispatch.Store) error {
	// README: relay begins
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Horizon: the lease plus the retries' delays. A shorter duplicate window is refused.
	relay, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: "OUTBOX", Horizon: 2 * time.Hour})
	if err != nil {
		return err // jsrelay.ErrWindowTooShort: raise the stream's Duplicates
	}
	var mux dispatch.Mux
	mux.Handle("events", relay.Handle)
	d, err := dispatch.New(bp, store, mux.HandleRow, dispatch.Options{Workers: 64})
	// README: relay ends
	if err != nil {
		return err
	}
	return d.Run(ctx) // a row settles once the stream acked its message
}

// The relay is a dispatch.Handler: route a task queue to it.
func Example() {
	_ = relayToJetStream // needs a stream, a store and a Backpressure: see the function
}

// TestREADMERelay: the README's jetstream example ("Relay to a broker") is
// the lines of the function above between its README markers, byte for
// byte but for their indentation, so the example compiles.
func TestREADMERelay(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(string(src), "\t// README: relay begins\n")
	code, _, ok2 := strings.Cut(code, "\t// README: relay ends\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go lost its README markers")
	}
	code = strings.ReplaceAll("\n"+code, "\n\t", "\n")
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatalf("reading the repository's README (this test runs inside a checkout): %v", err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Relay to a broker\n")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := strings.Split(section, "```go\n")
	if !ok || len(blocks) != 3 {
		t.Fatal(`README.md has no "## Relay to a broker" section with two go blocks`)
	}
	block, _, _ := strings.Cut(blocks[1], "\n```\n")
	if strings.TrimSpace(block) != strings.TrimSpace(code) {
		t.Errorf("the README's jetstream example differs from example_test.go's; copy it into the README:\n%s", strings.TrimSpace(code))
	}
}
