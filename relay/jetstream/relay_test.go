package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	jsrelay "github.com/outboxkit/backpressure/relay/jetstream"
)

func TestNewRefusesBadOptions(t *testing.T) {
	_, js := connect(t)
	s, _ := newStream(t, js, jetstream.StreamConfig{})
	name := s.CachedInfo().Config.Name
	ctx := context.Background()
	for i, tc := range []struct {
		js    jetstream.JetStream
		opts  jsrelay.Options
		field string
	}{
		{nil, jsrelay.Options{Stream: name, Horizon: time.Second}, "js"},
		{js, jsrelay.Options{Horizon: time.Second}, "Stream"},
		{js, jsrelay.Options{Stream: name}, "Horizon"},
		{js, jsrelay.Options{Stream: name, Horizon: -time.Second}, "Horizon"},
	} {
		r, err := jsrelay.New(ctx, tc.js, tc.opts)
		var oe *jsrelay.OptionError
		if r != nil || !errors.Is(err, jsrelay.ErrInvalidOptions) || !errors.As(err, &oe) || oe.Field != tc.field {
			t.Errorf("step %d: New(%+v) = %v, %v; want an *OptionError for %s", i, tc.opts, r, err, tc.field)
		}
	}
	if _, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: name + "_MISSING", Horizon: time.Second}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("New on a missing stream: %v, want jetstream.ErrStreamNotFound", err)
	}
}

func TestNewChecksTheDuplicateWindow(t *testing.T) {
	_, js := connect(t)
	s, _ := newStream(t, js, jetstream.StreamConfig{Duplicates: time.Minute})
	name := s.CachedInfo().Config.Name
	ctx := context.Background()

	_, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: name, Horizon: 2 * time.Minute})
	var we *jsrelay.WindowError
	if !errors.Is(err, jsrelay.ErrWindowTooShort) || !errors.As(err, &we) ||
		*we != (jsrelay.WindowError{Stream: name, Window: time.Minute, Horizon: 2 * time.Minute}) {
		t.Fatalf("New with a 2m horizon on a 1m window: %v, want a *WindowError", err)
	}

	var logs bytes.Buffer
	r, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: name, Horizon: 2 * time.Minute, WarnShortWindow: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil || r.Window() != time.Minute {
		t.Fatalf("New with WarnShortWindow: %v, %v", r, err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "window=1m0s") {
		t.Errorf("WarnShortWindow logged %q, want a warning with the window", logs.String())
	}

	logs.Reset()
	if _, err := jsrelay.New(ctx, js, jsrelay.Options{Stream: name, Horizon: time.Minute, WarnShortWindow: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil || logs.Len() != 0 {
		t.Errorf("New with a horizon equal to the window: %v, logged %q; want nil and nothing", err, logs.String())
	}
}

func TestDefaultSubject(t *testing.T) {
	for i, tc := range []struct {
		ns, tq, want string
		field        string
	}{
		{"acme", "orders", "p.acme.orders", ""},
		{"acme", "", "p.acme._", ""},
		{"ac.me", "orders", "", "namespace"},
		{"acme", "or*ders", "", "task queue"},
		{"acme", ">", "", "task queue"},
		{"a cme", "orders", "", "namespace"},
		{"ünï", "código", "p.ünï.código", ""},
	} {
		got, err := jsrelay.DefaultSubject("p", outbox.Row{Namespace: tc.ns, TaskQueue: tc.tq})
		var se *jsrelay.SubjectError
		switch {
		case tc.field == "" && (err != nil || got != tc.want):
			t.Errorf("step %d: DefaultSubject(%q, %q) = %q, %v; want %q", i, tc.ns, tc.tq, got, err, tc.want)
		case tc.field != "" && (!errors.Is(err, jsrelay.ErrInvalidSubject) || !errors.As(err, &se) || se.Field != tc.field):
			t.Errorf("step %d: DefaultSubject(%q, %q) = %q, %v; want a *SubjectError for %s", i, tc.ns, tc.tq, got, err, tc.field)
		}
	}
}

// Rows enqueued on sqlitestore and dispatched through the relay reach a
// consumer once each, on their subject, with their headers and payload.
func TestRelayThroughDispatch(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		_, js := connect(t)
		s, prefix := newStream(t, js, jetstream.StreamConfig{Duplicates: time.Hour})
		r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Prefix: prefix, Horizon: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
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
		got := consume(t, s)
		if len(got) != n {
			t.Fatalf("consumer saw %d messages, want %d", len(got), n)
		}
		want := make(map[string]outbox.Message, n)
		for _, m := range msgs {
			want[m.DispatchKey] = m
		}
		for _, m := range got {
			h := m.Headers()
			key := h.Get(jetstream.MsgIDHeader)
			w, ok := want[key]
			if !ok {
				t.Fatalf("message %q: not a row's key, or seen twice", key)
			}
			delete(want, key)
			tq := w.TaskQueue
			if tq == "" {
				tq = "_"
			}
			if m.Subject() != prefix+"."+w.Namespace+"."+tq || string(m.Data()) != string(w.Payload) ||
				h.Get(jsrelay.HeaderNamespace) != w.Namespace || h.Get(jsrelay.HeaderTaskQueue) != w.TaskQueue ||
				h.Get(jsrelay.HeaderDispatchKey) != key || h.Get(jsrelay.HeaderAttempt) != "1" {
				t.Errorf("message %q: subject %q, data %q, headers %v; want the row %+v on attempt 1", key, m.Subject(), m.Data(), h, w)
			}
			if h.Get("traceparent") != w.Headers["traceparent"] {
				t.Errorf("message %q: traceparent %q, want the row's %q", key, h.Get("traceparent"), w.Headers["traceparent"])
			}
		}
	})
}

// A row published twice (a dispatcher that crashed after the ack, before
// the settle) is stored once: the stream drops the second publish.
func TestRepublishIsDropped(t *testing.T) {
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{Duplicates: time.Hour})
	r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Prefix: prefix, Horizon: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	row := outbox.Row{DispatchKey: "k1", Namespace: "acme", TaskQueue: "orders", Payload: []byte("x"), Attempts: 1}
	for attempt := 1; attempt <= 3; attempt++ {
		row.Attempts = attempt
		if err := r.Handle(context.Background(), row); err != nil {
			t.Fatalf("publish %d: %v", attempt, err)
		}
	}
	got := consume(t, s)
	if len(got) != 1 || got[0].Headers().Get(jsrelay.HeaderAttempt) != "1" {
		t.Fatalf("consumer saw %d messages, want the first publish alone", len(got))
	}
}

// A subject no stream is bound to dead-letters the row at once with the
// broker's reason; so does a subject bound to another stream.
func TestNoStreamDeadLetters(t *testing.T) {
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	other, otherPrefix := newStream(t, js, jetstream.StreamConfig{})
	_ = other
	r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Horizon: time.Minute,
		Subject: func(row outbox.Row) (string, error) {
			switch row.Namespace {
			case "lost":
				return "nowhere." + prefix + "." + row.DispatchKey, nil
			case "other":
				return otherPrefix + "." + row.DispatchKey, nil
			}
			return prefix + "." + row.DispatchKey, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		ns, reason string
	}{
		{"lost", "no responders"},
		{"other", "expected stream does not match"},
	} {
		err := r.Handle(context.Background(), outbox.Row{DispatchKey: "k" + strconv.Itoa(i), Namespace: tc.ns, Attempts: 1})
		var pe *jsrelay.PublishError
		if !dispatch.IsPermanent(err) || !errors.Is(err, jsrelay.ErrNoStream) || !errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.reason) {
			t.Errorf("step %d: Handle on namespace %q: %v; want Permanent(*PublishError) with %q", i, tc.ns, err, tc.reason)
		}
	}

	eachStore(t, func(t *testing.T, ts testStore) {
		store := ts.openStore(t)
		if _, err := store.Enqueue(context.Background(), []outbox.Message{
			{DispatchKey: "lost-1", Namespace: "lost"}, {DispatchKey: "ok-1", Namespace: "fine"},
		}); err != nil {
			t.Fatal(err)
		}
		if st := drain(t, store, r.Handle, 2); st.Settled != 1 || st.Dead != 1 {
			t.Fatalf("stats: %+v, want 1 settled and 1 dead", st)
		}
		dead, err := store.Get(context.Background(), "lost-1")
		if err != nil || dead.State != outbox.StateDead || dead.Attempts != 1 || !strings.Contains(dead.LastError, "no responders") {
			t.Fatalf("the unroutable row: %+v, %v; want dead on its first attempt with the broker's reason", dead, err)
		}
	})
}

// A full stream with discard-new refuses a publish: a snooze (no attempt
// spent) of an error matching ErrStreamFull, with the broker's reason;
// once there is room the row goes through. A message larger than the
// stream takes is dead-lettered.
func TestFullStreamRetries(t *testing.T) {
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{MaxMsgs: 1, Discard: jetstream.DiscardNew, MaxMsgSize: 512})
	r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Prefix: prefix, Horizon: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	row := func(key string, payload int) outbox.Row {
		return outbox.Row{DispatchKey: key, Namespace: "acme", TaskQueue: "t", Payload: make([]byte, payload), Attempts: 1}
	}
	if err := r.Handle(ctx, row("a", 1)); err != nil {
		t.Fatal(err)
	}
	err = r.Handle(ctx, row("b", 1))
	var pe *jsrelay.PublishError
	var oe *dispatch.OverloadedError
	if dispatch.IsPermanent(err) || !errors.Is(err, jsrelay.ErrStreamFull) || !errors.As(err, &pe) || pe.Reason != "maximum messages exceeded" || pe.DispatchKey != "b" ||
		!errors.As(err, &oe) || oe.RetryAfter != jsrelay.DefaultFullSnooze {
		t.Fatalf("publish to a full stream: %v; want a *PublishError matching ErrStreamFull, an Overloaded signal of DefaultFullSnooze", err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Handle(ctx, row("b", 1)); err != nil {
		t.Fatalf("publish once the stream has room: %v", err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	err = r.Handle(ctx, row("c", 1000))
	if !dispatch.IsPermanent(err) || errors.Is(err, jsrelay.ErrStreamFull) || !errors.As(err, &pe) {
		t.Fatalf("publish of a message over MaxMsgSize: %v; want Permanent(*PublishError)", err)
	}
}

// A row whose default subject cannot be formed, or whose namespace, task
// queue or dispatch key cannot be a header value, is dead-lettered
// without a publish.
func TestUnmappableRowIsPermanent(t *testing.T) {
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Prefix: prefix, Horizon: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Handle(context.Background(), outbox.Row{DispatchKey: "k", Namespace: "a.b"}); !dispatch.IsPermanent(err) || !errors.Is(err, jsrelay.ErrInvalidSubject) {
		t.Errorf("Handle on namespace a.b: %v, want Permanent(*SubjectError)", err)
	}
	custom, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Horizon: time.Minute,
		Subject: func(outbox.Row) (string, error) { return prefix + ".any", nil }})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		row    outbox.Row
		header string
	}{
		{outbox.Row{DispatchKey: "k\r\nX-Evil: 1", Namespace: "acme"}, jsrelay.HeaderDispatchKey},
		{outbox.Row{DispatchKey: "k", Namespace: "ac\nme"}, jsrelay.HeaderNamespace},
		{outbox.Row{DispatchKey: "k", Namespace: "acme", TaskQueue: "q\r"}, jsrelay.HeaderTaskQueue},
	} {
		err := custom.Handle(context.Background(), tc.row)
		var he *jsrelay.HeaderError
		if !dispatch.IsPermanent(err) || !errors.Is(err, jsrelay.ErrInvalidHeader) || !errors.As(err, &he) || he.Header != tc.header {
			t.Errorf("step %d: Handle(%+v) = %v, want Permanent(*HeaderError) for %s", i, tc.row, err, tc.header)
		}
	}
	if info, err := s.Info(context.Background()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("stream after the refusals: %v, %v; want empty", info, err)
	}
}

// A stream full for one tenant (its subject at MaxMsgsPerSubject, with
// discard-new per subject) holds that tenant's refused rows in retry,
// not dead, while every other tenant's rows settle; once there is room
// the held rows go through.
func TestFullStreamHoldsThatTenantOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		_, js := connect(t)
		s, prefix := newStream(t, js, jetstream.StreamConfig{MaxMsgsPerSubject: 3, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true})
		r, err := jsrelay.New(context.Background(), js, jsrelay.Options{Stream: s.CachedInfo().Config.Name, Horizon: time.Minute,
			Subject: func(row outbox.Row) (string, error) {
				if row.Namespace == "full" {
					return prefix + ".full", nil // every row of the tenant on one subject, which takes 3
				}
				return prefix + "." + row.Namespace + "." + row.DispatchKey, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		store := ts.openStore(t)
		var msgs []outbox.Message
		for i := range 6 {
			for _, ns := range []string{"full", "calm", "quiet"} {
				msgs = append(msgs, outbox.Message{DispatchKey: ns + "-" + strconv.Itoa(i), Namespace: ns, MaxAttempts: 10_000})
			}
		}
		if _, err := store.Enqueue(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// Until the others settled and every row of "full" past the
		// subject's 3 was refused at least twice.
		var held []outbox.Row
		st := runUntil(t, store, r.Handle, func(st outbox.Stats) bool {
			if st.Settled < 15 {
				return false
			}
			held = held[:0]
			for i := range 6 {
				row, err := store.Get(ctx, "full-"+strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				if row.State != outbox.StateSettled {
					if row.Attempts < 3 {
						return false
					}
					held = append(held, row)
				}
			}
			return true
		})
		if st.Settled != 15 || st.Dead != 0 || len(held) != 3 {
			t.Fatalf("stats %+v, %d rows of the full tenant held; want 15 settled (calm, quiet and 3 of full) and 3 held", st, len(held))
		}
		for _, row := range held {
			if row.State == outbox.StateDead || !strings.Contains(row.LastError, "maximum messages per subject exceeded") {
				t.Errorf("held row %s: %s, last error %q; want retried with the broker's reason", row.DispatchKey, row.State, row.LastError)
			}
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(prefix+".full")); err != nil {
			t.Fatal(err)
		}
		if st := drain(t, store, r.Handle, 18); st.Settled != 18 {
			t.Fatalf("stats once the subject has room: %+v, want all 18 settled", st)
		}
	})
}
