package outbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// orderPlaced is a job type: it names its task queue.
type orderPlaced struct {
	OrderID string `json:"order_id"`
}

func (orderPlaced) TaskQueue() string { return "emails" }

// reindex is a job type with defaults: a system job of one namespace, at a
// low priority, tried at most 3 times.
type reindex struct {
	Table string `json:"table"`
}

func (reindex) TaskQueue() string { return "reindex" }
func (reindex) JobOptions() outbox.JobOptions {
	return outbox.JobOptions{Namespace: "system", Priority: -10, MaxAttempts: 3}
}

// unencodable cannot be encoded as JSON.
type unencodable struct{ C chan int }

func (unencodable) TaskQueue() string { return "q" }

// pointerJob is a job type whose methods have pointer receivers: NewMessage
// calls them on a nil *pointerJob.
type pointerJob struct{ N int }

func (*pointerJob) TaskQueue() string { return "pointers" }

// NewMessage builds the message that enqueues a typed job: the task queue
// comes from the type, the payload is the job as JSON.
func ExampleNewMessage() {
	msg, err := outbox.NewMessage("acme", "order-1/email", orderPlaced{OrderID: "order-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s/%s %s %s\n", msg.Namespace, msg.TaskQueue, msg.DispatchKey, msg.Payload)
	// store.EnqueueTx(ctx, tx, []outbox.Message{msg}) writes it in the caller's transaction.

	sys, _ := outbox.NewMessage("", "reindex/orders", reindex{Table: "orders"})
	fmt.Printf("%s/%s priority %d, at most %d attempts\n", sys.Namespace, sys.TaskQueue, sys.Priority, sys.MaxAttempts)
	// Output:
	// acme/emails order-1/email {"order_id":"order-1"}
	// system/reindex priority -10, at most 3 attempts
}

func TestNewMessage(t *testing.T) {
	m, err := outbox.NewMessage("tenant", "k", reindex{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Namespace != "tenant" {
		t.Errorf("Namespace = %q, want the argument %q over the type's default", m.Namespace, "tenant")
	}
	var back reindex
	if err := json.Unmarshal(m.Payload, &back); err != nil || back.Table != "t" {
		t.Errorf("Payload %s decodes to %+v, %v; want {Table:t}", m.Payload, back, err)
	}
	p, err := outbox.NewMessage("acme", "k", &pointerJob{N: 2})
	if err != nil || p.TaskQueue != "pointers" || string(p.Payload) != `{"N":2}` {
		t.Errorf("NewMessage(*pointerJob) = %+v, %v; want task queue pointers, payload {\"N\":2}", p, err)
	}
}

func TestNewMessageRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func() (outbox.Message, error)
		field string
	}{
		{"no namespace", func() (outbox.Message, error) { return outbox.NewMessage("", "k", orderPlaced{}) }, "Namespace"},
		{"no key", func() (outbox.Message, error) { return outbox.NewMessage("acme", "", orderPlaced{}) }, "DispatchKey"},
		{"not JSON", func() (outbox.Message, error) { return outbox.NewMessage("acme", "k", unencodable{C: make(chan int)}) }, "Payload"},
	} {
		_, err := c.build()
		var me *outbox.MessageError
		if !errors.As(err, &me) || me.Field != c.field || !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("%s: err = %v, want a *MessageError on %s matching ErrInvalidMessage", c.name, err, c.field)
		}
	}
	_, err := outbox.NewMessage("acme", "k", unencodable{C: make(chan int)})
	var ute *json.UnsupportedTypeError
	if !errors.As(err, &ute) {
		t.Errorf("not JSON: err = %v, want the encoder's *json.UnsupportedTypeError through it", err)
	}
}
