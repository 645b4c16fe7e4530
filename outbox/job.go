package outbox

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// JobArgs is a job's payload type that names its task queue, so the name is
// written once, on the type, and both sides use it: [NewMessage] on the way
// in, dispatch.Handle on the way out. TaskQueue must return a constant: it
// is called on T's zero value (for a pointer type, a nil pointer), never on
// the args being enqueued, so that the producer's and the handler's task
// queue cannot differ.
//
//	type OrderPlaced struct{ OrderID string }
//
//	func (OrderPlaced) TaskQueue() string { return "emails" }
type JobArgs interface {
	TaskQueue() string
}

// JobOptions are a job type's defaults for the messages [NewMessage]
// builds. The zero value changes nothing.
type JobOptions struct {
	// Namespace is the namespace used when NewMessage's is "". A job
	// type that belongs to one tenant (a system job) sets it.
	Namespace string
	// Priority is the messages' Message.Priority.
	Priority int
	// MaxAttempts is the messages' Message.MaxAttempts (0 keeps the
	// store's).
	MaxAttempts int
}

// JobArgsWithOptions is a [JobArgs] with defaults: NewMessage applies
// JobOptions, called on T's zero value like TaskQueue.
type JobArgsWithOptions interface {
	JobArgs
	JobOptions() JobOptions
}

// NewMessage returns the message that enqueues args: its TaskQueue is T's,
// its Payload args encoded as JSON (as dispatch.JSON and dispatch.Handle
// decode it), its Namespace namespace or, when that is "", T's
// JobOptions().Namespace, and its Priority and MaxAttempts T's JobOptions
// when T has them. Pass it to a store's Enqueue or, in the caller's
// transaction, EnqueueTx; set RunAt on it for a scheduled job.
//
// It returns a [*MessageError] (matching [ErrInvalidMessage]) when the
// message breaks a limit every store enforces ([Message.Validate]), or when
// args does not encode as JSON (Field "Payload", Err the encoder's error).
func NewMessage[T JobArgs](namespace, dispatchKey string, args T) (Message, error) {
	var zero T
	m := Message{DispatchKey: dispatchKey, Namespace: namespace, TaskQueue: zero.TaskQueue()}
	if o, ok := any(zero).(JobArgsWithOptions); ok {
		opts := o.JobOptions()
		if m.Namespace == "" {
			m.Namespace = opts.Namespace
		}
		m.Priority, m.MaxAttempts = opts.Priority, opts.MaxAttempts
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return Message{}, &MessageError{Index: -1, DispatchKey: dispatchKey, Field: "Payload",
			Reason: fmt.Sprintf("%s does not encode as JSON: %v", reflect.TypeFor[T](), err), Err: err}
	}
	m.Payload = payload
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}
