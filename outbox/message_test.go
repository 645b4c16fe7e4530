package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

func TestValidateLimits(t *testing.T) {
	ok := outbox.Message{DispatchKey: "k", Namespace: "acme", TaskQueue: ""}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil (\"\" is the default task queue)", ok, err)
	}
	atLimit := outbox.Message{
		DispatchKey: strings.Repeat("k", outbox.MaxDispatchKeyBytes),
		Namespace:   strings.Repeat("n", outbox.MaxNamespaceBytes),
		TaskQueue:   strings.Repeat("q", outbox.MaxTaskQueueBytes),
		Payload:     make([]byte, outbox.MaxPayloadBytes),
	}
	if err := atLimit.Validate(); err != nil {
		t.Fatalf("Validate(every field at its limit) = %v, want nil", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*outbox.Message)
		field string
		route bool // the route rule decided
	}{
		{"empty key", func(m *outbox.Message) { m.DispatchKey = "" }, "DispatchKey", false},
		{"long key", func(m *outbox.Message) { m.DispatchKey = strings.Repeat("k", outbox.MaxDispatchKeyBytes+1) }, "DispatchKey", false},
		{"key not UTF-8", func(m *outbox.Message) { m.DispatchKey = "k\xff" }, "DispatchKey", false},
		{"key with NUL", func(m *outbox.Message) { m.DispatchKey = "k\x00" }, "DispatchKey", false},
		{"empty namespace", func(m *outbox.Message) { m.Namespace = "" }, "Namespace", true},
		{"long namespace", func(m *outbox.Message) { m.Namespace = strings.Repeat("n", outbox.MaxNamespaceBytes+1) }, "Namespace", true},
		{"namespace with NUL", func(m *outbox.Message) { m.Namespace = "a\x00" }, "Namespace", true},
		{"long task queue", func(m *outbox.Message) { m.TaskQueue = strings.Repeat("q", outbox.MaxTaskQueueBytes+1) }, "TaskQueue", true},
		{"task queue not UTF-8", func(m *outbox.Message) { m.TaskQueue = "\xc3" }, "TaskQueue", true},
		{"payload over the limit", func(m *outbox.Message) { m.Payload = make([]byte, outbox.MaxPayloadBytes+1) }, "Payload", false},
		{"negative MaxAttempts", func(m *outbox.Message) { m.MaxAttempts = -1 }, "MaxAttempts", false},
	} {
		m := ok
		tc.edit(&m)
		err := outbox.ValidateMessages([]outbox.Message{ok, m})
		var me *outbox.MessageError
		if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &me) {
			t.Errorf("%s: ValidateMessages = %v, want a *MessageError matching ErrInvalidMessage and ErrInvalidArgument", tc.name, err)
			continue
		}
		if me.Index != 1 || me.Field != tc.field {
			t.Errorf("%s: MessageError{Index: %d, Field: %q}, want {1, %q}", tc.name, me.Index, me.Field, tc.field)
		}
		if got := errors.Is(err, backpressure.ErrInvalidRoute); got != tc.route {
			t.Errorf("%s: errors.Is(err, ErrInvalidRoute) = %v, want %v", tc.name, got, tc.route)
		}
	}
}

// A message is valid exactly when its key passes the key rule, its route
// passes backpressure.Route.Validate and its payload and MaxAttempts their
// bounds: the stores and the planner can never disagree on a route.
func TestValidateAgreesWithRouteRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z\x00\xff]{0,4}`), rapid.Just(""))
		m := outbox.Message{
			DispatchKey: text.Draw(t, "key"),
			Namespace:   text.Draw(t, "namespace"),
			TaskQueue:   text.Draw(t, "taskQueue"),
			MaxAttempts: rapid.IntRange(-2, 3).Draw(t, "maxAttempts"),
		}
		k := m.DispatchKey
		keyOK := k != "" && len(k) <= outbox.MaxDispatchKeyBytes && utf8.ValidString(k) && !strings.Contains(k, "\x00")
		want := keyOK && m.Route().Validate() == nil && m.MaxAttempts >= 0
		if got := m.Validate() == nil; got != want {
			t.Fatalf("Validate(%+v) valid = %v, want %v", m, got, want)
		}
	})
}

func TestTruncateError(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		long := rapid.Map(rapid.SliceOfN(rapid.SampledFrom([]string{"é", "\x00", "\xff", "a", "€"}), 1000, 2200),
			func(parts []string) string { return strings.Join(parts, "") })
		s := rapid.OneOf(rapid.String(), rapid.StringN(0, outbox.MaxErrorBytes+8, -1), long).Draw(t, "s")
		got := outbox.TruncateError(s)
		if len(got) > outbox.MaxErrorBytes || !utf8.ValidString(got) || strings.Contains(got, "\x00") {
			t.Fatalf("TruncateError(%q) = %q: %d bytes, valid UTF-8 %v", s, got, len(got), utf8.ValidString(got))
		}
		clean := strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		if !strings.HasPrefix(clean, got) || (len(clean) <= outbox.MaxErrorBytes && got != clean) {
			t.Fatalf("TruncateError(%q) = %q, want the longest prefix of %q within the limit", s, got, clean)
		}
		if len(clean) > outbox.MaxErrorBytes && len(got) < outbox.MaxErrorBytes-utf8.UTFMax {
			t.Fatalf("TruncateError cut %d bytes to %d, more than one rune short of the limit", len(clean), len(got))
		}
	})
}

func TestOutcomeAndStateStrings(t *testing.T) {
	for o, want := range map[outbox.Outcome]string{outbox.Settle: "settle", outbox.Retry: "retry", outbox.DeadLetter: "dead-letter", 0: "Outcome(0)", 9: "Outcome(9)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
	for _, s := range []outbox.State{outbox.StatePending, outbox.StateClaimed, outbox.StateSettled, outbox.StateDead} {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	if outbox.State("running").Valid() || outbox.State("").Valid() {
		t.Error("an unknown state is Valid")
	}
}

func TestCompletionBuilders(t *testing.T) {
	r := outbox.Row{DispatchKey: "k", Token: 7}
	cause := errors.New("boom")
	for _, tc := range []struct {
		got  outbox.Completion
		want outbox.Completion
	}{
		{outbox.SettleRow(r), outbox.Completion{Lease: outbox.Lease{DispatchKey: "k", Token: 7}, Outcome: outbox.Settle}},
		{outbox.RetryRow(r, 5, cause), outbox.Completion{Lease: outbox.Lease{DispatchKey: "k", Token: 7}, Outcome: outbox.Retry, Delay: 5, Error: "boom"}},
		{outbox.RetryRow(r, 0, nil), outbox.Completion{Lease: outbox.Lease{DispatchKey: "k", Token: 7}, Outcome: outbox.Retry}},
		{outbox.DeadLetterRow(r, cause), outbox.Completion{Lease: outbox.Lease{DispatchKey: "k", Token: 7}, Outcome: outbox.DeadLetter, Error: "boom"}},
	} {
		if tc.got != tc.want {
			t.Errorf("got %+v, want %+v", tc.got, tc.want)
		}
	}
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{&outbox.LeaseLostError{Op: "Complete", DispatchKey: "k", Token: 1}, outbox.ErrLeaseLost},
		{&outbox.ArgumentError{Op: "Open", Arg: "Options.Lease", Reason: "too short"}, outbox.ErrInvalidArgument},
		{&outbox.ShardCountError{Store: 64, Given: 32}, outbox.ErrShardCountMismatch},
		{&outbox.SchemaVersionError{Database: 9, Package: 4}, outbox.ErrSchemaTooNew},
	} {
		if !errors.Is(tc.err, tc.want) || !strings.HasPrefix(tc.err.Error(), "outbox: ") {
			t.Errorf("%T %q: errors.Is(%v) false, or no package prefix", tc.err, tc.err, tc.want)
		}
		if errors.Is(tc.err, outbox.ErrClosed) {
			t.Errorf("%T matches ErrClosed", tc.err)
		}
	}
}
