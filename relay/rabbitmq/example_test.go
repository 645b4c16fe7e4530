package rabbitmq_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/relay/rabbitmq"
)

// relayToRabbitMQ is the README's example ("Relay to a broker"): every
// row of the task queue "events" is published, confirmed and mandatory,
// to the exchange "outbox" with the routing key
// "outbox.<namespace>.events".
func relayToRabbitMQ(ctx context.Context, bp *backpressure.Backpressure, store dispatch.Store) error {
	// README: relay begins
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		return err
	}
	defer conn.Close()
	relay, err := rabbitmq.New(ctx, conn, rabbitmq.Options{Exchange: "outbox", Channels: 64})
	if err != nil {
		return err // the exchange must exist
	}
	defer relay.Close()
	var mux dispatch.Mux
	mux.Handle("events", relay.Handle) // unroutable rows dead-letter with the broker's NO_ROUTE
	d, err := dispatch.New(bp, store, mux.HandleRow, dispatch.Options{Workers: 64})
	// README: relay ends
	if err != nil {
		return err
	}
	return d.Run(ctx) // a row settles once the broker confirmed its message
}

// The relay is a dispatch.Handler: route a task queue to it.
func Example() {
	_ = relayToRabbitMQ // needs an exchange, a store and a Backpressure: see the function
}

// TestREADMERelay: the README's rabbitmq example ("Relay to a broker") is
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
	block, _, _ := strings.Cut(blocks[2], "\n```\n")
	if strings.TrimSpace(block) != strings.TrimSpace(code) {
		t.Errorf("the README's rabbitmq example differs from example_test.go's; copy it into the README:\n%s", strings.TrimSpace(code))
	}
}
