package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/relay/rabbitmq"
)

// While the connection is blocked, Handle publishes nothing: it waits for
// connection.unblocked, its ctx or BlockedWait, and the last two are
// errors the dispatcher retries.
func TestBlockedConnectionWaits(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, nil)
	row := outbox.Row{DispatchKey: "k", Namespace: "acme", Attempts: 1}

	short := newRelay(t, conn, top, rabbitmq.Options{BlockedWait: time.Millisecond})
	rabbitmq.SetBlocked(short, amqp.Blocking{Active: true, Reason: "low on memory"})
	err := short.Handle(context.Background(), row)
	var be *rabbitmq.BlockedError
	var oe *dispatch.OverloadedError
	if dispatch.IsPermanent(err) || !errors.Is(err, rabbitmq.ErrBlocked) || !errors.As(err, &be) || be.Reason != "low on memory" || be.Waited != time.Millisecond ||
		!errors.As(err, &oe) || oe.RetryAfter != rabbitmq.DefaultRefusedSnooze {
		t.Fatalf("Handle on a blocked connection: %v; want a *BlockedError, an Overloaded signal of DefaultRefusedSnooze", err)
	}

	long := newRelay(t, conn, top, rabbitmq.Options{BlockedWait: time.Hour})
	rabbitmq.SetBlocked(long, amqp.Blocking{Active: true, Reason: "low on disk"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := long.Handle(ctx, row); !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle with a done ctx on a blocked connection: %v; want context.Canceled", err)
	}
	if got := top.consume(t); len(got) != 0 {
		t.Fatalf("queue holds %d messages while blocked, want none", len(got))
	}

	done := make(chan error, 1)
	go func() { done <- long.Handle(context.Background(), row) }()
	rabbitmq.SetBlocked(long, amqp.Blocking{Active: false})
	if err := <-done; err != nil {
		t.Fatalf("Handle once unblocked: %v", err)
	}
	if got := top.consume(t); len(got) != 1 {
		t.Fatalf("queue holds %d messages once unblocked, want 1", len(got))
	}
}
