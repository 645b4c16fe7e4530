// Package rabbitmq relays an outbox to RabbitMQ: a [Relay]'s [Relay.Handle]
// is a dispatch.Handler that publishes each row to an exchange and settles
// it only once the broker has confirmed it.
//
// Most callers need:
//
//	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/") // github.com/rabbitmq/amqp091-go
//	r, err := rabbitmq.New(ctx, conn, rabbitmq.Options{Exchange: "outbox"})
//	defer r.Close()
//	d, err := dispatch.New(bp, store, r.Handle, dispatch.Options{Workers: 64})
//
// # At least once, with a key to dedup by
//
// Every message is persistent (delivery mode 2) and carries the row's
// dispatch key as its message_id. Publishes use publisher confirms and the
// mandatory flag: a row settles only after the broker confirmed (acked)
// its message, and a message no queue is bound to receive comes back
// (basic.return) and dead-letters the row with the broker's reason rather
// than vanishing. The broker keeps no record of message ids, so a
// dispatcher that crashes between the confirm and the settle publishes
// the row again when its lease expires, and consumers see it twice, with
// the same message_id: at least once; consumers dedup by message_id.
//
// # Ordering
//
// A queue delivers messages in the order they reached it. The dispatcher
// claims a route's rows oldest first but runs up to Workers handlers at
// once, each publishing on its own channel, so within a route a consumer
// sees the claim order up to a reordering among the rows in flight
// together (at most Workers of them); a retried row comes after the rows
// published while it waited.
//
// Strict order per namespace, on one dispatcher node: give the namespaces a
// quota of 1 (backpressure.Config.DefaultQuota or Quotas), so that a
// namespace has one row claimed at a time, held until its settle is written
// after the confirm; a queue then holds each route's rows in enqueue order,
// as long as none is retried. (Several nodes claim a namespace's rows on
// their own shards, side by side.) It costs throughput, since each row
// waits for the confirm of the one before it (a persistent message's
// fsync): BenchmarkDrainOrder drains 8 namespaces at 450-470 rows/s with
// quota 1 against 2,000-3,000 with 16 on this machine.
//
// # Backpressure
//
// A nack (the broker could not take the message) is dispatch.Overloaded
// of a *[NackError]: the dispatcher snoozes the row for
// Options.RefusedSnooze, spending no attempt. Under a memory or disk alarm the broker sends
// connection.blocked and stops reading publishes: a Handle that starts
// while the connection is blocked waits up to Options.BlockedWait for
// connection.unblocked, then snoozes the row likewise (a *[BlockedError]);
// a publish already sent waits for its confirm. Rows so held back are not
// dead-lettered by an alarm, up to the dispatcher's Options.MaxSnoozes.
package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// Headers every message carries in its header table.
const (
	HeaderNamespace   = "outbox-namespace"    // the row's namespace
	HeaderTaskQueue   = "outbox-task-queue"   // the row's task queue ("" for the default one)
	HeaderDispatchKey = "outbox-dispatch-key" // the row's dispatch key, also its message_id
	HeaderAttempt     = "outbox-attempt"      // the row's attempt, an int32: 1 on its first claim
)

// Defaults of Options.
const (
	DefaultPrefix      = "outbox"
	DefaultChannels    = 64
	DefaultBlockedWait = 5 * time.Second
	DefaultTimeout     = 30 * time.Second
)

// Options configures a [Relay]. Every zero field takes the default its
// comment names.
type Options struct {
	// Exchange is the exchange every message is published to; "" is the
	// default exchange, which routes by queue name. New checks that it
	// exists (exchange.declare, passive).
	Exchange string

	// RoutingKey maps a row to its routing key. An error dead-letters the
	// row with it (wrapped by dispatch.Permanent). Nil: [DefaultRoutingKey]
	// with Prefix.
	RoutingKey func(outbox.Row) (string, error)

	// Prefix is the default routing key's first word(s). "" means
	// [DefaultPrefix]. Ignored when RoutingKey is set.
	Prefix string

	// ContentType is every message's content type; "" sets none.
	ContentType string

	// Channels is the most idle channels the relay keeps open for the
	// next publishes (each publish holds one channel from its publish to
	// its confirm; more are opened when every kept one is busy). Default
	// [DefaultChannels]; set it to the dispatcher's Workers.
	Channels int

	// BlockedWait is how long a Handle that finds the connection blocked
	// waits for it to be unblocked before it returns a *BlockedError.
	// Default [DefaultBlockedWait].
	BlockedWait time.Duration

	// Timeout bounds one publish and its confirm; past it Handle returns
	// context.DeadlineExceeded, retried. Default [DefaultTimeout].
	Timeout time.Duration

	// RefusedSnooze is how long a row waits, spending no attempt, when
	// the broker refused it for want of room: a nack, or the connection
	// blocked past BlockedWait. Handle then returns
	// dispatch.Overloaded(RefusedSnooze, the *NackError or *BlockedError), a snooze;
	// after Options.MaxSnoozes of the dispatcher a snooze is a failure.
	// Default [DefaultRefusedSnooze]; at most outbox.MaxDelay.
	RefusedSnooze time.Duration
}

// DefaultRefusedSnooze is Options.RefusedSnooze's default.
const DefaultRefusedSnooze = time.Second

// Errors of the package. Match them with [errors.Is].
var (
	// ErrInvalidOptions reports an option New refuses. The typed error is
	// *[OptionError].
	ErrInvalidOptions = errors.New("rabbitmq relay: invalid options")
	// ErrUnroutable matches a *[ReturnedError]: a mandatory message the
	// broker could not route to any queue. Dead-lettered.
	ErrUnroutable = errors.New("rabbitmq relay: message unroutable")
	// ErrNacked matches a *[NackError]: the broker refused to take a
	// message. Retried.
	ErrNacked = errors.New("rabbitmq relay: message nacked")
	// ErrBlocked matches a *[BlockedError]: the connection stayed blocked
	// (a resource alarm) for Options.BlockedWait. Retried.
	ErrBlocked = errors.New("rabbitmq relay: connection blocked")
	// ErrInvalidRoutingKey reports a routing key longer than the 255
	// bytes AMQP allows. The typed error is *[RoutingKeyError].
	ErrInvalidRoutingKey = errors.New("rabbitmq relay: invalid routing key")
	// ErrClosed reports a Handle on a Relay after Close.
	ErrClosed = errors.New("rabbitmq relay: closed")
)

// OptionError names the option New refuses. It matches [ErrInvalidOptions].
type OptionError struct {
	Field  string // e.g. "Channels", "conn"
	Reason string
}

// Error names the option and why it is refused.
func (e *OptionError) Error() string {
	return fmt.Sprintf("rabbitmq relay: invalid options: %s %s", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// ReturnedError is a message the broker returned (basic.return): no queue
// is bound for its routing key. It matches [ErrUnroutable].
type ReturnedError struct {
	Exchange    string
	RoutingKey  string
	DispatchKey string
	ReplyCode   uint16 // 312 NO_ROUTE
	ReplyText   string // the broker's reason, e.g. "NO_ROUTE"
}

// Error names the row, the exchange, the routing key and the broker's reason.
func (e *ReturnedError) Error() string {
	return fmt.Sprintf("rabbitmq relay: message %q to exchange %q with routing key %q returned: %d %s", e.DispatchKey, e.Exchange, e.RoutingKey, e.ReplyCode, e.ReplyText)
}

// Is reports whether target is [ErrUnroutable].
func (e *ReturnedError) Is(target error) bool { return target == ErrUnroutable }

// NackError is a message the broker nacked. It matches [ErrNacked].
type NackError struct {
	Exchange    string
	RoutingKey  string
	DispatchKey string
}

// Error names the row, the exchange and the routing key.
func (e *NackError) Error() string {
	return fmt.Sprintf("rabbitmq relay: message %q to exchange %q with routing key %q nacked by the broker", e.DispatchKey, e.Exchange, e.RoutingKey)
}

// Is reports whether target is [ErrNacked].
func (e *NackError) Is(target error) bool { return target == ErrNacked }

// BlockedError is a connection blocked for longer than Options.BlockedWait.
// It matches [ErrBlocked].
type BlockedError struct {
	Reason string // the broker's, e.g. "low on memory"
	Waited time.Duration
}

// Error names the broker's reason and how long Handle waited.
func (e *BlockedError) Error() string {
	return fmt.Sprintf("rabbitmq relay: connection blocked by the broker (%s), still after %v", e.Reason, e.Waited)
}

// Is reports whether target is [ErrBlocked].
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// RoutingKeyError reports a routing key AMQP cannot carry. It matches
// [ErrInvalidRoutingKey].
type RoutingKeyError struct {
	RoutingKey string
	Reason     string
}

// Error names the routing key and why it is refused.
func (e *RoutingKeyError) Error() string {
	return fmt.Sprintf("rabbitmq relay: routing key %q %s", e.RoutingKey, e.Reason)
}

// Is reports whether target is [ErrInvalidRoutingKey].
func (e *RoutingKeyError) Is(target error) bool { return target == ErrInvalidRoutingKey }

// Relay publishes outbox rows to one RabbitMQ exchange. Build it with
// [New]; the zero value is not usable. It is safe for concurrent use: each
// Handle publishes on a channel of its own, taken from a pool of channels
// in confirm mode, so its confirm and any return are its message's.
type Relay struct {
	conn     *amqp.Connection
	exchange string
	key      func(outbox.Row) (string, error)
	ctype    string
	wait     time.Duration
	timeout  time.Duration
	refused  time.Duration    // Options.RefusedSnooze
	idle     chan *pubChannel // the pool: at most Options.Channels idle channels

	mu      sync.Mutex
	blocked *blockedState // nil while the connection is not blocked
	closed  bool
}

// blockedState is one connection.blocked episode; done closes at its
// connection.unblocked.
type blockedState struct {
	reason string
	done   chan struct{}
}

// pubChannel is a channel in confirm mode with its notifications. Only one
// publish at a time uses it, so the return and the confirm it receives
// are that publish's.
type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// New checks opts and the exchange (one channel opened, used for a
// passive exchange.declare and kept in the pool), watches the
// connection's connection.blocked and .unblocked for as long as conn is
// open, and returns a Relay. The Relay does not reconnect: once conn is
// closed every Handle fails (retried), so build a new Relay on a new
// connection. Errors: an *OptionError for a nil conn or a
// negative Channels, BlockedWait, Timeout or RefusedSnooze (or one above
// outbox.MaxDelay); the broker's *amqp.Error when
// the exchange does not exist (code 404) or a channel cannot be opened.
func New(ctx context.Context, conn *amqp.Connection, opts Options) (*Relay, error) {
	if conn == nil {
		return nil, &OptionError{Field: "conn", Reason: "is nil"}
	}
	if opts.Channels < 0 {
		return nil, &OptionError{Field: "Channels", Reason: fmt.Sprintf("is %d, negative", opts.Channels)}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"BlockedWait", opts.BlockedWait}, {"Timeout", opts.Timeout}, {"RefusedSnooze", opts.RefusedSnooze}} {
		if d.v < 0 {
			return nil, &OptionError{Field: d.field, Reason: fmt.Sprintf("is %v, negative", d.v)}
		}
	}
	if opts.RefusedSnooze > outbox.MaxDelay {
		return nil, &OptionError{Field: "RefusedSnooze", Reason: fmt.Sprintf("is %v, above outbox.MaxDelay", opts.RefusedSnooze)}
	}
	r := &Relay{conn: conn, exchange: opts.Exchange, key: opts.RoutingKey, ctype: opts.ContentType,
		wait: opts.BlockedWait, timeout: opts.Timeout, refused: cmp.Or(opts.RefusedSnooze, DefaultRefusedSnooze)}
	if r.key == nil {
		prefix := opts.Prefix
		if prefix == "" {
			prefix = DefaultPrefix
		}
		r.key = func(row outbox.Row) (string, error) { return DefaultRoutingKey(prefix, row), nil }
	}
	if r.wait == 0 {
		r.wait = DefaultBlockedWait
	}
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	n := opts.Channels
	if n == 0 {
		n = DefaultChannels
	}
	r.idle = make(chan *pubChannel, n)

	pc, err := r.open()
	if err != nil {
		return nil, err
	}
	if opts.Exchange != "" {
		if err := pc.ch.ExchangeDeclarePassive(opts.Exchange, "", false, false, false, false, nil); err != nil {
			return nil, fmt.Errorf("rabbitmq relay: exchange %q: %w", opts.Exchange, err)
		}
	}
	r.put(pc)
	go r.watchBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 1)))
	return r, nil
}

// watchBlocked follows connection.blocked and .unblocked until the
// connection closes its notifications.
func (r *Relay) watchBlocked(c <-chan amqp.Blocking) {
	for b := range c {
		r.setBlocked(b)
	}
	r.setBlocked(amqp.Blocking{Active: false})
}

func (r *Relay) setBlocked(b amqp.Blocking) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case b.Active && r.blocked == nil:
		r.blocked = &blockedState{reason: b.Reason, done: make(chan struct{})}
	case !b.Active && r.blocked != nil:
		close(r.blocked.done)
		r.blocked = nil
	}
}

// Close closes the channels the relay keeps, and makes later Handles
// return [ErrClosed]. It leaves the connection open: it is the caller's.
// Handles in flight finish on their channels, which they then close.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for {
		select {
		case pc := <-r.idle:
			_ = pc.ch.Close()
		default:
			return nil
		}
	}
}

// DefaultRoutingKey returns "<prefix>.<namespace>.<task queue>", with "_"
// for the default task queue "" (so a task queue named "_" shares its
// key). A namespace or task queue holding '.' adds words to the key,
// which a topic exchange's patterns see.
func DefaultRoutingKey(prefix string, row outbox.Row) string {
	tq := row.TaskQueue
	if tq == "" {
		tq = "_"
	}
	return prefix + "." + row.Namespace + "." + tq
}

// Publishing returns the routing key and the message [Relay.Handle]
// publishes for row: persistent, the payload as body, the dispatch key as
// message_id, the enqueue time as timestamp, the row's own headers
// (Row.Headers: a traceparent from oteltrace.Inject, say), and over them
// the headers Header* name.
// An error is the RoutingKey function's, or a *[RoutingKeyError].
func (r *Relay) Publishing(row outbox.Row) (string, amqp.Publishing, error) {
	key, err := r.key(row)
	if err != nil {
		return "", amqp.Publishing{}, err
	}
	if len(key) > 255 {
		return "", amqp.Publishing{}, &RoutingKeyError{RoutingKey: key, Reason: fmt.Sprintf("is %d bytes, over AMQP's 255", len(key))}
	}
	headers := make(amqp.Table, 4+len(row.Headers))
	for k, v := range row.Headers { // the row's own (a traceparent), under the relay's
		headers[k] = v
	}
	headers[HeaderNamespace], headers[HeaderTaskQueue] = row.Namespace, row.TaskQueue
	headers[HeaderDispatchKey], headers[HeaderAttempt] = row.DispatchKey, int32(row.Attempts)
	return key, amqp.Publishing{
		Headers:      headers,
		ContentType:  r.ctype,
		DeliveryMode: amqp.Persistent,
		MessageId:    row.DispatchKey,
		Timestamp:    row.EnqueuedAt,
		Body:         row.Payload,
	}, nil
}

// Handle is a dispatch.Handler: it publishes row (see [Relay.Publishing])
// with the mandatory flag and waits for the broker's confirm, until ctx is
// done or Options.Timeout passes. It returns nil once the broker acked the
// message and did not return it. Otherwise:
//
//   - returned as unroutable: Permanent(*[ReturnedError]), with the
//     broker's reply code and text;
//   - the exchange gone (the broker closes the channel with 404
//     NOT_FOUND): Permanent(the broker's *amqp.Error);
//   - a routing key that cannot be formed: Permanent of its error;
//   - nacked: a *[NackError], retried;
//   - the connection blocked for Options.BlockedWait: a *[BlockedError],
//     retried;
//   - ctx done, the timeout, a closed channel or connection: the error,
//     retried. Whether the broker took the message is then unknown; a
//     consumer may see it twice, with the same message_id.
func (r *Relay) Handle(ctx context.Context, row outbox.Row) error {
	key, msg, err := r.Publishing(row)
	if err != nil {
		return dispatch.Permanent(err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.waitUnblocked(ctx); err != nil {
		return err
	}
	pc, err := r.get()
	if err != nil {
		return err
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, r.exchange, key, true, false, msg)
	if err != nil {
		_ = pc.ch.Close()
		return r.closeReason(err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		// The confirm is still due: a later return or ack on this
		// channel would be taken for the next publish's.
		_ = pc.ch.Close()
		return err
	}
	if !acked {
		select {
		case e := <-pc.closes:
			if e != nil {
				return r.closeReason(e)
			}
			return amqp.ErrClosed
		default:
		}
		if pc.ch.IsClosed() {
			return amqp.ErrClosed
		}
	}
	// The broker sends a message's basic.return before its confirm, and
	// the client hands the return over before it resolves the confirm, so
	// a return is in pc.returns by now; taking it here, nacked or not,
	// leaves none for the channel's next publish.
	var returned error
	select {
	case ret := <-pc.returns:
		returned = dispatch.Permanent(&ReturnedError{Exchange: ret.Exchange, RoutingKey: ret.RoutingKey,
			DispatchKey: ret.MessageId, ReplyCode: ret.ReplyCode, ReplyText: ret.ReplyText})
	default:
	}
	r.put(pc)
	switch {
	case returned != nil:
		return returned
	case !acked:
		return dispatch.Overloaded(r.refused, &NackError{Exchange: r.exchange, RoutingKey: key, DispatchKey: row.DispatchKey})
	}
	return nil
}

// closeReason maps the error that closed a channel: the exchange not
// found is permanent, anything else retried.
func (r *Relay) closeReason(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return dispatch.Permanent(fmt.Errorf("rabbitmq relay: exchange %q: %w", r.exchange, ae))
	}
	return err
}

// waitUnblocked returns at once while the connection is not blocked;
// otherwise when it is unblocked (nil), ctx is done (ctx's error) or
// BlockedWait passed (a *BlockedError).
func (r *Relay) waitUnblocked(ctx context.Context) error {
	r.mu.Lock()
	b := r.blocked
	r.mu.Unlock()
	if b == nil {
		return nil
	}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return dispatch.Overloaded(r.refused, &BlockedError{Reason: b.reason, Waited: r.wait})
	}
}

// get takes an idle channel, or opens one.
func (r *Relay) get() (*pubChannel, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	for {
		select {
		case pc := <-r.idle:
			if pc.ch.IsClosed() {
				continue
			}
			return pc, nil
		default:
			return r.open()
		}
	}
}

// put keeps pc for the next publish, or closes it when the pool is full
// or the relay closed.
func (r *Relay) put(pc *pubChannel) {
	r.mu.Lock()
	kept := false
	if !r.closed { // under mu, so that Close's drain sees every channel kept
		select {
		case r.idle <- pc:
			kept = true
		default:
		}
	}
	r.mu.Unlock()
	if !kept {
		_ = pc.ch.Close()
	}
}

func (r *Relay) open() (*pubChannel, error) {
	ch, err := r.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq relay: open a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq relay: confirm mode: %w", err)
	}
	return &pubChannel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}
