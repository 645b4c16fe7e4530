package rabbitmq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/relay/rabbitmq"
)

func TestNewRefusesBadOptions(t *testing.T) {
	conn := connect(t)
	ctx := context.Background()
	for i, tc := range []struct {
		conn  *amqp.Connection
		opts  rabbitmq.Options
		field string
	}{
		{nil, rabbitmq.Options{}, "conn"},
		{conn, rabbitmq.Options{Channels: -1}, "Channels"},
		{conn, rabbitmq.Options{BlockedWait: -1}, "BlockedWait"},
		{conn, rabbitmq.Options{Timeout: -1}, "Timeout"},
	} {
		r, err := rabbitmq.New(ctx, tc.conn, tc.opts)
		var oe *rabbitmq.OptionError
		if r != nil || !errors.Is(err, rabbitmq.ErrInvalidOptions) || !errors.As(err, &oe) || oe.Field != tc.field {
			t.Errorf("step %d: New(%+v) = %v, %v; want an *OptionError for %s", i, tc.opts, r, err, tc.field)
		}
	}
	_, err := rabbitmq.New(ctx, conn, rabbitmq.Options{Exchange: unique("missing")})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("New on a missing exchange: %v, want the broker's 404", err)
	}
}

func newRelay(tb testing.TB, conn *amqp.Connection, top topology, opts rabbitmq.Options) *rabbitmq.Relay {
	tb.Helper()
	if opts.Exchange == "" {
		opts.Exchange = top.exchange
	}
	if opts.Prefix == "" && opts.RoutingKey == nil {
		opts.Prefix = top.prefix
	}
	r, err := rabbitmq.New(context.Background(), conn, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

// Rows enqueued on sqlitestore and dispatched through the relay reach a
// consumer once each, persistent, with their routing key, message_id,
// headers and payload.
func TestRelayThroughDispatch(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		conn := connect(t)
		top := newTopology(t, conn, nil)
		r := newRelay(t, conn, top, rabbitmq.Options{ContentType: "application/json", Channels: 4})
		store := ts.openStore(t)
		const n = 60
		msgs := messages(n, "order")
		for i := range msgs { // the row's own headers travel, under the relay's
			if i%2 == 0 {
				msgs[i].Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Outbox-Namespace": "spoofed"}
			}
		}
		if _, err := store.Enqueue(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
		if st := drain(t, store, r.Handle, n); st.Settled != n {
			t.Fatalf("stats after the drain: %+v, want %d settled", st, n)
		}
		got := top.consume(t)
		if len(got) != n {
			t.Fatalf("consumer saw %d messages, want %d", len(got), n)
		}
		want := make(map[string]outbox.Message, n)
		for _, m := range msgs {
			want[m.DispatchKey] = m
		}
		for _, d := range got {
			w, ok := want[d.MessageId]
			if !ok {
				t.Fatalf("message %q: not a row's key, or seen twice", d.MessageId)
			}
			delete(want, d.MessageId)
			tq := w.TaskQueue
			if tq == "" {
				tq = "_"
			}
			h := d.Headers
			if d.RoutingKey != top.prefix+"."+w.Namespace+"."+tq || string(d.Body) != string(w.Payload) ||
				d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" || d.Timestamp.IsZero() ||
				h[rabbitmq.HeaderNamespace] != w.Namespace || h[rabbitmq.HeaderTaskQueue] != w.TaskQueue ||
				h[rabbitmq.HeaderDispatchKey] != w.DispatchKey || h[rabbitmq.HeaderAttempt] != int32(1) {
				t.Errorf("message %q: key %q, body %q, mode %d, type %q, headers %v; want the row %+v on attempt 1",
					d.MessageId, d.RoutingKey, d.Body, d.DeliveryMode, d.ContentType, h, w)
			}
			if tp, _ := h["traceparent"].(string); tp != w.Headers["traceparent"] {
				t.Errorf("message %q: traceparent %q, want the row's %q", d.MessageId, tp, w.Headers["traceparent"])
			}
		}
	})
}

// A row published twice (a dispatcher that crashed after the confirm,
// before the settle) is delivered twice with the same message_id: the
// broker keeps no ids, consumers dedup.
func TestRepublishIsDeliveredWithTheSameID(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, nil)
	r := newRelay(t, conn, top, rabbitmq.Options{})
	row := outbox.Row{DispatchKey: "k1", Namespace: "acme", TaskQueue: "orders", Payload: []byte("x")}
	for attempt := 1; attempt <= 2; attempt++ {
		row.Attempts = attempt
		if err := r.Handle(context.Background(), row); err != nil {
			t.Fatalf("publish %d: %v", attempt, err)
		}
	}
	got := top.consume(t)
	ids := map[string]int{}
	for _, d := range got {
		ids[d.MessageId]++
	}
	if len(got) != 2 || ids["k1"] != 2 {
		t.Fatalf("consumer saw %d messages with ids %v, want k1 twice", len(got), ids)
	}
}

// An unroutable message (basic.return) dead-letters its row with the
// broker's reason, and the channel it came back on serves the next
// publish without taking the return for that one's.
func TestUnroutableDeadLetters(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, nil)
	r := newRelay(t, conn, top, rabbitmq.Options{Channels: 1, RoutingKey: func(row outbox.Row) (string, error) {
		if row.Namespace == "lost" {
			return "nowhere." + row.DispatchKey, nil
		}
		return top.prefix + "." + row.DispatchKey, nil
	}})
	ctx := context.Background()
	for i := range 6 {
		lost := i%2 == 0
		row := outbox.Row{DispatchKey: "k" + strconv.Itoa(i), Namespace: "fine", Attempts: 1}
		if lost {
			row.Namespace = "lost"
		}
		err := r.Handle(ctx, row)
		var re *rabbitmq.ReturnedError
		switch {
		case lost && (!dispatch.IsPermanent(err) || !errors.Is(err, rabbitmq.ErrUnroutable) || !errors.As(err, &re) ||
			re.ReplyCode != amqp.NoRoute || re.ReplyText != "NO_ROUTE" || re.DispatchKey != row.DispatchKey):
			t.Errorf("step %d: unroutable Handle(%q) = %v; want Permanent(*ReturnedError) 312 NO_ROUTE", i, row.DispatchKey, err)
		case !lost && err != nil:
			t.Errorf("step %d: routable Handle(%q) = %v", i, row.DispatchKey, err)
		}
	}
	if got := top.consume(t); len(got) != 3 {
		t.Errorf("queue holds %d messages, want the 3 routable ones", len(got))
	}

	eachStore(t, func(t *testing.T, ts testStore) {
		store := ts.openStore(t)
		if _, err := store.Enqueue(ctx, []outbox.Message{
			{DispatchKey: "lost-1", Namespace: "lost"}, {DispatchKey: "ok-1", Namespace: "fine"},
		}); err != nil {
			t.Fatal(err)
		}
		if st := drain(t, store, r.Handle, 2); st.Settled != 1 || st.Dead != 1 {
			t.Fatalf("stats: %+v, want 1 settled and 1 dead", st)
		}
		dead, err := store.Get(ctx, "lost-1")
		if err != nil || dead.State != outbox.StateDead || dead.Attempts != 1 || !strings.Contains(dead.LastError, "312 NO_ROUTE") {
			t.Fatalf("the unroutable row: %+v, %v; want dead on its first attempt with the broker's reason", dead, err)
		}
	})
}

// Concurrent publishes, routable and not, each get their own result: a
// return or a confirm is never taken for another publish's.
func TestConcurrentPublishesKeepTheirResults(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, nil)
	r := newRelay(t, conn, top, rabbitmq.Options{Channels: 4, RoutingKey: func(row outbox.Row) (string, error) {
		if row.Namespace == "lost" {
			return "nowhere." + row.DispatchKey, nil
		}
		return top.prefix + "." + row.DispatchKey, nil
	}})
	const n = 300
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ns := "fine"
			if i%3 == 0 {
				ns = "lost"
			}
			errs[i] = r.Handle(context.Background(), outbox.Row{DispatchKey: "k" + strconv.Itoa(i), Namespace: ns, Attempts: 1})
		})
	}
	wg.Wait()
	for i, err := range errs {
		var re *rabbitmq.ReturnedError
		if lost := i%3 == 0; lost != errors.As(err, &re) || (lost && re.DispatchKey != "k"+strconv.Itoa(i)) || (!lost && err != nil) {
			t.Errorf("publish %d (unroutable: %v): %v", i, lost, err)
		}
	}
	got := top.consume(t)
	seen := map[string]bool{}
	for _, d := range got {
		seen[d.MessageId] = true
	}
	if len(got) != n-n/3 || len(seen) != len(got) {
		t.Fatalf("queue holds %d messages (%d distinct), want the %d routable ones once each", len(got), len(seen), n-n/3)
	}
}

// A queue full with overflow reject-publish makes the broker nack: an
// error the dispatcher retries; with room again the row goes through.
func TestNackRetries(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	r := newRelay(t, conn, top, rabbitmq.Options{Channels: 1})
	ctx := context.Background()
	row := func(key string) outbox.Row { return outbox.Row{DispatchKey: key, Namespace: "acme", Attempts: 1} }
	if err := r.Handle(ctx, row("a")); err != nil {
		t.Fatal(err)
	}
	err := r.Handle(ctx, row("b"))
	var ne *rabbitmq.NackError
	var oe *dispatch.OverloadedError
	if dispatch.IsPermanent(err) || !errors.Is(err, rabbitmq.ErrNacked) || !errors.As(err, &ne) || ne.DispatchKey != "b" ||
		!errors.As(err, &oe) || oe.RetryAfter != rabbitmq.DefaultRefusedSnooze {
		t.Fatalf("publish to a full queue: %v; want a *NackError, an Overloaded signal of DefaultRefusedSnooze", err)
	}
	if _, err := top.ch.QueuePurge(top.queue, false); err != nil {
		t.Fatal(err)
	}
	if err := r.Handle(ctx, row("b")); err != nil {
		t.Fatalf("publish once the queue has room: %v", err)
	}
	if got := top.consume(t); len(got) != 1 || got[0].MessageId != "b" {
		t.Fatalf("queue holds %d messages, want b alone", len(got))
	}
}

// An exchange deleted after New dead-letters the row with the broker's
// 404; the relay's next publish opens a fresh channel.
func TestMissingExchangeIsPermanent(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, nil)
	r := newRelay(t, conn, top, rabbitmq.Options{Channels: 1})
	if err := top.ch.ExchangeDelete(top.exchange, false, false); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		err := r.Handle(context.Background(), outbox.Row{DispatchKey: "k", Namespace: "acme", Attempts: 1})
		var ae *amqp.Error
		if !dispatch.IsPermanent(err) || !errors.As(err, &ae) || ae.Code != amqp.NotFound || !strings.Contains(ae.Reason, "no exchange") {
			t.Fatalf("step %d: publish to a deleted exchange: %v; want Permanent(the broker's 404)", i, err)
		}
	}
}

// A routing key AMQP cannot carry dead-letters the row without a publish;
// so does the RoutingKey function's error; Handle after Close is ErrClosed.
func TestRefusalsWithoutPublish(t *testing.T) {
	conn := connect(t)
	top := newTopology(t, conn, nil)
	boom := errors.New("no key for this row")
	r := newRelay(t, conn, top, rabbitmq.Options{RoutingKey: func(row outbox.Row) (string, error) {
		switch row.Namespace {
		case "boom":
			return "", boom
		case "long":
			return top.prefix + "." + strings.Repeat("k", 300), nil
		}
		return top.prefix + "." + row.DispatchKey, nil
	}})
	ctx := context.Background()
	if err := r.Handle(ctx, outbox.Row{DispatchKey: "k", Namespace: "long"}); !dispatch.IsPermanent(err) || !errors.Is(err, rabbitmq.ErrInvalidRoutingKey) {
		t.Errorf("a 300-byte routing key: %v, want Permanent(*RoutingKeyError)", err)
	}
	if err := r.Handle(ctx, outbox.Row{DispatchKey: "k", Namespace: "boom"}); !dispatch.IsPermanent(err) || !errors.Is(err, boom) {
		t.Errorf("RoutingKey's error: %v, want Permanent(it)", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Handle(ctx, outbox.Row{DispatchKey: "k", Namespace: "acme"}); !errors.Is(err, rabbitmq.ErrClosed) {
		t.Errorf("Handle after Close: %v, want ErrClosed", err)
	}
	if got := top.consume(t); len(got) != 0 {
		t.Errorf("queue holds %d messages, want none", len(got))
	}
}
