package outbox

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/backpressure/internal/limits"
)

// Limits every store enforces in Enqueue, before it touches its database,
// with a [*MessageError]. They are the same in every store, so a message one
// store accepts every store accepts. A route (namespace and task queue)
// must also pass [Route.Validate].
const (
	// MaxNamespaceBytes bounds a namespace, which must be at least 1 byte.
	MaxNamespaceBytes = limits.NamespaceBytes
	// MaxTaskQueueBytes bounds a task queue; "" is the default task queue.
	MaxTaskQueueBytes = limits.TaskQueueBytes
	// MaxDispatchKeyBytes bounds a dispatch key: it is a unique index entry.
	MaxDispatchKeyBytes = 1024
	// MaxPayloadBytes bounds a payload (64 MiB): an outbox row carries a
	// reference to large data, not the data.
	MaxPayloadBytes = 64 << 20
	// MaxErrorBytes bounds the error text a completion records; a longer
	// text is truncated (at a UTF-8 boundary), not rejected.
	MaxErrorBytes = 4096

	// MaxAttemptsLimit bounds every MaxAttempts: a message's and a store
	// option's, 0 to 2³¹−1 (PostgreSQL's integer). Above it is refused
	// with a typed error, never clamped, so both stores keep exactly the
	// value given.
	MaxAttemptsLimit = 1<<31 - 1

	// MaxDelay bounds a retry delay ([Completion.Delay]) and the backoff
	// caps a dispatcher computes them from: 3,650 days (about ten years).
	// A longer one is refused with an [*ArgumentError], never clamped.
	MaxDelay = 3650 * 24 * time.Hour

	// MaxLease bounds a store's claim lease and a membership lease: 24
	// hours. A lease is a crash's recovery time (a dead claimer's rows, a
	// dead node's shards, come back only when it runs out), and the
	// dispatcher extends leases while handlers run, so none needs longer.
	MaxLease = 24 * time.Hour
)

// MaxTime is the latest [Message.RunAt] a store accepts,
// 2200-01-01T00:00:00Z. With the store's clock at or before it, every time
// a store derives (now plus at most [MaxDelay] or [MaxLease]) is before
// 2262-04-11, the end of SQLite's int64 nanoseconds (PostgreSQL's
// timestamptz goes far further), so both stores keep every time exactly as
// given and read it back alike. A later RunAt is a [*MessageError]. Treat
// it as a constant.
var MaxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// Message is one row to enqueue.
type Message struct {
	// DispatchKey identifies the message: unique across the outbox, 1 to
	// MaxDispatchKeyBytes bytes of UTF-8 without NUL. Enqueueing a key the
	// outbox already holds (in any state) is a no-op: dedup.
	DispatchKey string

	// Namespace is the tenant, and with TaskQueue the route: see
	// [Route.Validate]. TaskQueue "" is the namespace's default
	// task queue.
	Namespace string
	TaskQueue string

	// Payload is opaque to the store, at most MaxPayloadBytes; nil is
	// stored as empty.
	Payload []byte

	// RunAt is the earliest time the row may be claimed (a scheduled row);
	// the zero time (or any past time) means at once; after [MaxTime] is
	// refused. Counts and claims ignore the row until
	// then, as they ignore a row waiting out a retry delay.
	RunAt time.Time

	// MaxAttempts overrides the store's most attempts for this row (0 to
	// [MaxAttemptsLimit]; 0 keeps the store's): a Retry of a row that has
	// had MaxAttempts claims dead-letters it instead.
	MaxAttempts int

	// Priority orders the message among the rows of its route: a claim
	// takes a route's rows highest priority first, then oldest first. It
	// never changes how many rows a namespace or a route is granted, so a
	// tenant gains no share by raising it. MinPriority to MaxPriority; the
	// zero value is the default priority.
	Priority int

	// Headers are small metadata the store keeps beside the payload and
	// hands back on the claimed [Row] (a trace context, a content type):
	// at most [MaxHeaders] entries, keys of ASCII letters, digits, '-',
	// '_' and '.' (1 to [MaxHeaderKeyBytes] bytes), values of UTF-8
	// without NUL, [MaxHeaderBytes] in all. Nil or empty: none.
	Headers map[string]string
}

// The range of Message.Priority.
const (
	MinPriority = -1000
	MaxPriority = 1000
)

// Route returns the message's route.
func (m Message) Route() Route {
	return Route{Namespace: m.Namespace, TaskQueue: m.TaskQueue}
}

// Validate returns nil if every store accepts m, or a [*MessageError]
// (matching [ErrInvalidMessage]) naming the first field that breaks a limit.
// Cost: O(len of m's text).
func (m Message) Validate() error { return m.validate(-1) }

// ValidateMessages validates each message as [Message.Validate] does and
// returns the first error, with the message's index in it. Stores call it
// before they touch their database, so a batch with one bad message writes
// nothing.
func ValidateMessages(msgs []Message) error {
	for i := range msgs {
		if err := msgs[i].validate(i); err != nil {
			return err
		}
	}
	return nil
}

func (m *Message) validate(index int) error {
	fail := func(field, reason string, err error) error {
		return &MessageError{Index: index, DispatchKey: m.DispatchKey, Field: field, Reason: reason, Err: err}
	}
	switch k := m.DispatchKey; {
	case k == "":
		return fail("DispatchKey", "is empty", nil)
	case len(k) > MaxDispatchKeyBytes:
		return fail("DispatchKey", fmt.Sprintf("is %d bytes, over the limit of %d", len(k), MaxDispatchKeyBytes), nil)
	case !utf8.ValidString(k):
		return fail("DispatchKey", "is not valid UTF-8", nil)
	case strings.IndexByte(k, 0) >= 0:
		return fail("DispatchKey", "holds a NUL byte", nil)
	}
	if err := m.Route().Validate(); err != nil {
		field := "Namespace"
		if re, ok := err.(*RouteError); ok && re.Field == "task queue" {
			field = "TaskQueue"
		}
		reason := "is not a valid route"
		if re, ok := err.(*RouteError); ok {
			reason = re.Reason
		}
		return fail(field, reason, err)
	}
	if len(m.Payload) > MaxPayloadBytes {
		return fail("Payload", fmt.Sprintf("is %d bytes, over the limit of %d", len(m.Payload), MaxPayloadBytes), nil)
	}
	if m.Priority < MinPriority || m.Priority > MaxPriority {
		return fail("Priority", fmt.Sprintf("%d is outside MinPriority..MaxPriority (%d..%d)", m.Priority, MinPriority, MaxPriority), nil)
	}
	if m.MaxAttempts < 0 || int64(m.MaxAttempts) > MaxAttemptsLimit {
		return fail("MaxAttempts", fmt.Sprintf("%d is outside 0 to %d", m.MaxAttempts, MaxAttemptsLimit), nil)
	}
	if m.RunAt.After(MaxTime) {
		return fail("RunAt", fmt.Sprintf("%v is after outbox.MaxTime (%v)", m.RunAt, MaxTime), nil)
	}
	if len(m.Headers) > 0 {
		if reason := validateHeaders(m.Headers); reason != "" {
			return fail("Headers", reason, nil)
		}
	}
	return nil
}

// TruncateError returns s cut to at most MaxErrorBytes at a UTF-8
// boundary, with invalid UTF-8 and NUL bytes replaced: the text a store
// records as a row's last error.
func TruncateError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= MaxErrorBytes {
		return s
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
