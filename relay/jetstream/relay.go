// Package jetstream relays an outbox to NATS JetStream: a [Relay]'s
// [Relay.Handle] is a dispatch.Handler that publishes each row to a stream
// and settles it only once the stream has acked it.
//
// Most callers need:
//
//	js, err := jetstream.New(nc) // github.com/nats-io/nats.go/jetstream
//	r, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: "OUTBOX", Horizon: time.Hour})
//	d, err := dispatch.New(bp, store, r.Handle, dispatch.Options{Workers: 64})
//
// (this package imported as jsrelay beside nats.go's own jetstream package).
//
// # Exactly once, within the duplicate window
//
// Every message carries the row's dispatch key as its Nats-Msg-Id, and the
// stream drops a publish whose id it has seen within its duplicate window
// (StreamConfig.Duplicates), acking it as a duplicate. A row settles only
// after the ack, so a dispatcher that crashes between the ack and the
// settle publishes the row again when its lease expires, and the stream
// drops it: a consumer sees each row once, provided every re-publish of a
// row happens within the window of its first publish. That span is the
// row's lease plus its retry horizon (the sum of the backoff delays of the
// attempts it may still spend); the caller passes it as Options.Horizon,
// and [New] refuses a stream whose window is shorter (or logs a warning,
// with Options.WarnShortWindow). Past the window a re-publish is delivered
// again: at least once.
//
// # Ordering
//
// The stream stores messages in the order their publishes reach it. The
// dispatcher claims a route's rows oldest first but runs up to Workers
// handlers at once, so within a route a subscriber sees the claim order
// up to a reordering among the rows in flight together (at most Workers
// of them); a retried row comes after the rows published while it waited.
//
// Strict order per namespace, on one dispatcher node: give the namespaces a
// quota of 1 (backpressure.Config.DefaultQuota or Quotas), so that a
// namespace has one row claimed at a time, held until its settle is written
// after the ack; the stream then holds each route's rows in enqueue order,
// as long as none is retried. (Several nodes claim a namespace's rows on
// their own shards, side by side.) It costs throughput: BenchmarkDrainOrder
// drains 8 namespaces at 1,000-1,150 rows/s with quota 1 against
// 1,600-1,800 with 16 on this machine.
//
// # Backpressure
//
// A stream with limits (MaxMsgs, MaxBytes, MaxMsgsPerSubject) and
// DiscardNew refuses a publish when full: [Relay.Handle] returns
// dispatch.Overloaded of a *[PublishError] matching [ErrStreamFull], an
// enforced refusal the dispatcher snoozes for Options.FullSnooze,
// spending no attempt, so a full stream holds rows
// back instead of dead-lettering them, up to the dispatcher's
// Options.MaxSnoozes. A slow ack
// holds the handler, and with it one of the dispatcher's workers, until
// the ack, the handler's ctx, or the client's timeout
// (jetstream.WithDefaultTimeout, 5s by default) when ctx has no deadline:
// then an error, retried. No stream bound to the subject, or a
// message the stream can never take, dead-letters the row at once with the
// broker's reason.
package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

// Headers every message carries besides Nats-Msg-Id (the dispatch key).
const (
	HeaderNamespace   = "Outbox-Namespace"    // the row's namespace
	HeaderTaskQueue   = "Outbox-Task-Queue"   // the row's task queue ("" for the default one)
	HeaderDispatchKey = "Outbox-Dispatch-Key" // the row's dispatch key, also its Nats-Msg-Id
	HeaderAttempt     = "Outbox-Attempt"      // the row's attempt, in decimal: 1 on its first claim
)

// DefaultPrefix is the first token of the default subject.
const DefaultPrefix = "outbox"

// Options configures a [Relay]. Stream and Horizon are required.
type Options struct {
	// Stream names the stream the subjects are bound to. New reads its
	// duplicate window, and every publish expects it
	// (Nats-Expected-Stream): a subject bound to another stream is
	// refused, and the row dead-lettered.
	Stream string

	// Horizon is the longest span between a row's first publish and its
	// last possible re-publish: the dispatcher's lease plus the row's
	// retry horizon. New refuses a stream whose duplicate window is
	// shorter with a *[WindowError] (see WarnShortWindow). Must be > 0.
	Horizon time.Duration

	// WarnShortWindow makes New log a warning on Logger, rather than
	// refuse, when the stream's duplicate window is shorter than Horizon:
	// re-publishes past the window are then delivered twice.
	WarnShortWindow bool

	// Subject maps a row to the subject it is published on. An error
	// dead-letters the row with it (wrapped by dispatch.Permanent). Nil:
	// [DefaultSubject] with Prefix.
	Subject func(outbox.Row) (string, error)

	// Prefix is the default subject's first token(s). "" means
	// [DefaultPrefix]. Ignored when Subject is set.
	Prefix string

	// Logger receives New's warning for a short window. Nil means
	// slog.Default().
	Logger *slog.Logger

	// FullSnooze is how long a row waits, spending no attempt, when the
	// stream is full under its limits (discard-new): Handle returns
	// dispatch.Overloaded(FullSnooze, *PublishError), a snooze, so a full stream holds
	// rows back rather than dead-letters them (after Options.MaxSnoozes
	// of the dispatcher, a snooze is a failure). Horizon must cover the
	// snoozes too. 0 means [DefaultFullSnooze]; at most outbox.MaxDelay.
	FullSnooze time.Duration
}

// DefaultFullSnooze is Options.FullSnooze's default.
const DefaultFullSnooze = time.Second

// Errors of the package. Match them with [errors.Is].
var (
	// ErrInvalidOptions reports an option New refuses. The typed error is
	// *[OptionError].
	ErrInvalidOptions = errors.New("jetstream relay: invalid options")
	// ErrWindowTooShort reports a stream whose duplicate window is shorter
	// than Options.Horizon. The typed error is *[WindowError].
	ErrWindowTooShort = errors.New("jetstream relay: duplicate window shorter than the horizon")
	// ErrStreamFull matches a *[PublishError] for a publish the stream
	// refused under its limits (discard-new): retried.
	ErrStreamFull = errors.New("jetstream relay: stream full")
	// ErrNoStream matches a *[PublishError] for a subject no stream (or
	// another stream than Options.Stream) is bound to: dead-lettered.
	ErrNoStream = errors.New("jetstream relay: no stream for the subject")
	// ErrInvalidSubject reports a row the default subject cannot name. The
	// typed error is *[SubjectError].
	ErrInvalidSubject = errors.New("jetstream relay: invalid subject")
	// ErrInvalidHeader reports a row whose namespace, task queue or
	// dispatch key cannot be a header value (it holds CR or LF). The typed
	// error is *[HeaderError].
	ErrInvalidHeader = errors.New("jetstream relay: invalid header value")
)

// OptionError names the option New refuses. It matches [ErrInvalidOptions].
type OptionError struct {
	Field  string // e.g. "Stream", "Horizon"
	Reason string
}

// Error names the option and why it is refused.
func (e *OptionError) Error() string {
	return fmt.Sprintf("jetstream relay: invalid options: %s %s", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// WindowError reports a stream whose duplicate window cannot cover the
// horizon. It matches [ErrWindowTooShort].
type WindowError struct {
	Stream  string
	Window  time.Duration // the stream's StreamConfig.Duplicates
	Horizon time.Duration // Options.Horizon
}

// Error names the stream, its window and the horizon.
func (e *WindowError) Error() string {
	return fmt.Sprintf("jetstream relay: stream %q keeps message ids for %v, shorter than the horizon %v: a row re-published after the window would be delivered twice", e.Stream, e.Window, e.Horizon)
}

// Is reports whether target is [ErrWindowTooShort].
func (e *WindowError) Is(target error) bool { return target == ErrWindowTooShort }

// SubjectError reports a row [DefaultSubject] cannot map to a subject: a
// namespace or task queue that is not a valid subject token. It matches
// [ErrInvalidSubject].
type SubjectError struct {
	Field string // "namespace" or "task queue"
	Value string
}

// Error names the field and its value.
func (e *SubjectError) Error() string {
	return fmt.Sprintf("jetstream relay: %s %q is not a subject token (it holds '.', '*', '>' or white space; pass Options.Subject to map it)", e.Field, e.Value)
}

// Is reports whether target is [ErrInvalidSubject].
func (e *SubjectError) Is(target error) bool { return target == ErrInvalidSubject }

// HeaderError reports a value NATS headers cannot carry: it holds CR or
// LF. It matches [ErrInvalidHeader].
type HeaderError struct {
	Header string // HeaderNamespace, HeaderTaskQueue or HeaderDispatchKey
	Value  string
}

// Error names the header and its value.
func (e *HeaderError) Error() string {
	return fmt.Sprintf("jetstream relay: header %s cannot carry %q: it holds CR or LF", e.Header, e.Value)
}

// Is reports whether target is [ErrInvalidHeader].
func (e *HeaderError) Is(target error) bool { return target == ErrInvalidHeader }

// PublishError is a publish the broker refused, with its reason. It
// matches [ErrStreamFull] or [ErrNoStream] by its kind, and unwraps to the
// client's error (a *jetstream.APIError for the stream's refusals).
type PublishError struct {
	Stream      string // Options.Stream
	Subject     string
	DispatchKey string
	Reason      string // the broker's description, e.g. "maximum messages exceeded"
	Err         error
	full, none  bool
}

// Error names the row, the subject and the broker's reason.
func (e *PublishError) Error() string {
	return fmt.Sprintf("jetstream relay: publish of %q on %q to stream %q refused: %s", e.DispatchKey, e.Subject, e.Stream, e.Reason)
}

// Unwrap returns the client's error.
func (e *PublishError) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's kind.
func (e *PublishError) Is(target error) bool {
	return (target == ErrStreamFull && e.full) || (target == ErrNoStream && e.none)
}

// Relay publishes outbox rows to one JetStream stream. Build it with
// [New]; the zero value is not usable. It is safe for concurrent use: the
// dispatcher runs up to Workers of its handlers at once, each publish
// waiting for its own ack over the shared connection.
type Relay struct {
	js      jetstream.JetStream
	stream  string
	window  time.Duration
	subject func(outbox.Row) (string, error)
	full    time.Duration // Options.FullSnooze
}

// New checks opts and the stream: it reads the stream's configuration
// (one request) and returns a Relay, or an error. Errors: an *OptionError
// for an empty Stream, a Horizon ≤ 0 or a nil js; the client's error when
// the stream cannot be read (jetstream.ErrStreamNotFound when it does not
// exist); a *WindowError when its duplicate window is shorter than
// Horizon, unless WarnShortWindow.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Relay, error) {
	switch {
	case js == nil:
		return nil, &OptionError{Field: "js", Reason: "is nil"}
	case opts.Stream == "":
		return nil, &OptionError{Field: "Stream", Reason: "is empty"}
	case opts.Horizon <= 0:
		return nil, &OptionError{Field: "Horizon", Reason: fmt.Sprintf("is %v, not > 0", opts.Horizon)}
	case opts.FullSnooze < 0 || opts.FullSnooze > outbox.MaxDelay:
		return nil, &OptionError{Field: "FullSnooze", Reason: fmt.Sprintf("is %v, not in [0, outbox.MaxDelay]", opts.FullSnooze)}
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	subject := opts.Subject
	if subject == nil {
		subject = func(r outbox.Row) (string, error) { return DefaultSubject(prefix, r) }
	}
	s, err := js.Stream(ctx, opts.Stream)
	if err != nil {
		return nil, fmt.Errorf("jetstream relay: stream %q: %w", opts.Stream, err)
	}
	window := s.CachedInfo().Config.Duplicates
	if window < opts.Horizon {
		werr := &WindowError{Stream: opts.Stream, Window: window, Horizon: opts.Horizon}
		if !opts.WarnShortWindow {
			return nil, werr
		}
		log := opts.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("jetstream relay: duplicate window shorter than the horizon: rows re-published after it are delivered twice",
			"stream", opts.Stream, "window", window, "horizon", opts.Horizon)
	}
	return &Relay{js: js, stream: opts.Stream, window: window, subject: subject, full: cmp.Or(opts.FullSnooze, DefaultFullSnooze)}, nil
}

// Window returns the stream's duplicate window, as New read it.
func (r *Relay) Window() time.Duration { return r.window }

// DefaultSubject returns "<prefix>.<namespace>.<task queue>", with "_" for
// the default task queue "" (so a task queue named "_" shares its
// subject). A namespace or task queue that is not a valid subject token
// (it holds '.', '*', '>' or white space) is a *[SubjectError].
func DefaultSubject(prefix string, row outbox.Row) (string, error) {
	if !isToken(row.Namespace) {
		return "", &SubjectError{Field: "namespace", Value: row.Namespace}
	}
	tq := row.TaskQueue
	if tq == "" {
		tq = "_"
	} else if !isToken(tq) {
		return "", &SubjectError{Field: "task queue", Value: tq}
	}
	return prefix + "." + row.Namespace + "." + tq, nil
}

func isToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n\f\v")
}

// Message returns the message [Relay.Handle] publishes for row: on its
// subject, the payload as data, the row's own headers (Row.Headers: a
// traceparent from oteltrace.Inject, say), and over them the headers
// Header* name plus Nats-Msg-Id (the dispatch key) and
// Nats-Expected-Stream. An error is the Subject function's, a
// *[SubjectError], or a *[HeaderError] (a value holding CR or LF).
func (r *Relay) Message(row outbox.Row) (*nats.Msg, error) {
	subj, err := r.subject(row)
	if err != nil {
		return nil, err
	}
	for _, f := range [...]struct{ header, value string }{
		{HeaderNamespace, row.Namespace}, {HeaderTaskQueue, row.TaskQueue}, {HeaderDispatchKey, row.DispatchKey},
	} {
		if strings.ContainsAny(f.value, "\r\n") {
			return nil, &HeaderError{Header: f.header, Value: f.value}
		}
	}
	h := make(nats.Header, 6+len(row.Headers))
	for k, v := range row.Headers { // the row's own (a traceparent), under the relay's
		if strings.ContainsAny(v, "\r\n") {
			return nil, &HeaderError{Header: k, Value: v}
		}
		h[k] = []string{v}
	}
	h[jetstream.MsgIDHeader] = []string{row.DispatchKey}
	h[jetstream.ExpectedStreamHeader] = []string{r.stream}
	h[HeaderNamespace] = []string{row.Namespace}
	h[HeaderTaskQueue] = []string{row.TaskQueue}
	h[HeaderDispatchKey] = []string{row.DispatchKey}
	h[HeaderAttempt] = []string{strconv.Itoa(row.Attempts)}
	return &nats.Msg{Subject: subj, Header: h, Data: row.Payload}, nil
}

// Handle is a dispatch.Handler: it publishes row (see [Relay.Message]) and
// waits for the stream's ack, until ctx is done. It returns nil once the
// stream acked the message, a duplicate included (the stream had it
// already: a re-run after a crash). Otherwise:
//
//   - the stream full under its limits: dispatch.Overloaded(FullSnooze,
//     *[PublishError] matching [ErrStreamFull]), an enforced refusal the
//     dispatcher snoozes: back after FullSnooze, no attempt spent;
//   - no stream bound to the subject (no responders, after the client's
//     two retries 250ms apart), or another stream than Options.Stream:
//     Permanent(*PublishError matching [ErrNoStream]);
//   - a message larger than the stream takes, a bad subject or header,
//     any other refusal the stream answers with a 4xx code:
//     Permanent(*PublishError), or Permanent of the Subject function's
//     error;
//   - ctx done, a lost connection, a timeout, a 5xx refusal: the error,
//     retried. Whether the stream stored the message is then unknown; the
//     retry's publish carries the same Nats-Msg-Id, so the stream drops
//     it if it did (within the window).
func (r *Relay) Handle(ctx context.Context, row outbox.Row) error {
	m, err := r.Message(row)
	if err != nil {
		return dispatch.Permanent(err)
	}
	// The client's defaults: no responders is tried twice more, 250ms
	// apart, to ride out a stream leader's election, before it is
	// reported (and the row dead-lettered).
	_, err = r.js.PublishMsg(ctx, m)
	if err == nil {
		return nil
	}
	return r.classify(m.Subject, row.DispatchKey, err)
}

// The JetStream API's error codes the relay tells apart.
const (
	codeStreamNotFound  = 10059 // stream not found
	codeStreamMismatch  = 10060 // expected stream does not match
	codeStoreFailed     = 10077 // the store refused: "maximum messages exceeded", "maximum bytes exceeded", …
	codeMessageTooLarge = 10054 // message size exceeds maximum allowed
)

func (r *Relay) classify(subject, key string, err error) error {
	pe := &PublishError{Stream: r.stream, Subject: subject, DispatchKey: key, Err: err}
	var ae *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		pe.Reason, pe.none = "no stream is bound to the subject (no responders)", true
		return dispatch.Permanent(pe)
	case errors.As(err, &ae):
		pe.Reason = ae.Description
		switch {
		case ae.ErrorCode == codeStreamNotFound || ae.ErrorCode == codeStreamMismatch:
			pe.none = true
			return dispatch.Permanent(pe)
		case ae.ErrorCode == codeStoreFailed:
			if pe.full = strings.HasPrefix(ae.Description, "maximum"); pe.full {
				return dispatch.Overloaded(r.full, pe)
			}
			return pe
		case ae.ErrorCode == codeMessageTooLarge || (ae.Code >= 400 && ae.Code < 500):
			return dispatch.Permanent(pe)
		}
		return pe
	}
	return err
}
