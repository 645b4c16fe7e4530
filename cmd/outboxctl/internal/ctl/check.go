package ctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// usageError is bad usage: Run prints it and exits with ExitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// maxDeadList is the most dead letters one dead list prints (the stores'
// ListDeadParams.Limit bound).
const maxDeadList = 10_000

// namespaceFirst are the commands whose first argument is a namespace.
var namespaceFirst = map[string]bool{"why": true, "pause": true, "resume": true, "reset": true, "set quota": true, "set weight": true}

// checkArgs refuses, as bad usage (exit 2) and before the store is opened,
// every argument and flag of cmd that no store call could take, alike for
// every command: a namespace that is empty, not valid UTF-8, holds a NUL
// byte or is over 255 bytes (as backpressure.Route.Validate has it); a
// dispatch key that breaks outbox.Message's rule; a -limit outside its
// range; a dead-letter selection that is not exactly one; a value set
// cannot store; a serve -addr that is not host:port. The store's options
// (-schema, -shards, -dsn) are checked by the store before it touches the
// database (see openFailure).
func checkArgs(cmd string, a *cmdArgs) error {
	if namespaceFirst[cmd] {
		if err := checkNamespace(cmd, a.rest[0]); err != nil {
			return err
		}
	}
	if a.namespace != "" {
		if err := checkNamespace(cmd+" -namespace", a.namespace); err != nil {
			return err
		}
	}
	switch cmd {
	case "tenants":
		if a.after != "" {
			if err := checkNamespace(cmd+" -after", a.after); err != nil {
				return err
			}
		}
		return checkLimit(cmd, a.limit, outbox.MaxNamespacesPage)
	case "dead list":
		if a.after != "" {
			if err := checkKey(cmd+" -after", a.after); err != nil {
				return err
			}
		}
		return checkLimit(cmd, a.limit, maxDeadList)
	case "dead requeue", "dead purge":
		return checkSelection(cmd, a)
	case "set quota", "set weight":
		return checkValue(cmd, a.rest[0], a.rest[1])
	case "set rate":
		_, err := parseRateArgs(a.rest)
		return err
	case "audit":
		if a.before < 0 {
			return usagef("audit: -before %d is negative", a.before)
		}
		return checkLimit(cmd, a.limit, outbox.MaxAuditPage)
	case "serve":
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return usagef("serve: -addr %s: %v", display(a.addr), err)
		}
	}
	return nil
}

func checkNamespace(what, ns string) error {
	if err := (backpressure.Route{Namespace: ns}).Validate(); err != nil {
		return usagef("%s: %v", what, err)
	}
	return nil
}

func checkKey(what, key string) error {
	if err := (outbox.Message{DispatchKey: key, Namespace: "n"}).Validate(); err != nil {
		var me *outbox.MessageError
		if errors.As(err, &me) && me.Field == "DispatchKey" {
			return usagef("%s: dispatch key %s %s", what, display(key), me.Reason)
		}
	}
	return nil
}

func checkLimit(cmd string, limit, most int) error {
	if limit < 1 || limit > most {
		return usagef("%s: -limit %d is outside 1 to %d", cmd, limit, most)
	}
	return nil
}

func checkSelection(cmd string, a *cmdArgs) error {
	given := 0
	for _, b := range []bool{len(a.rest) > 0, a.namespace != "", a.all} {
		if b {
			given++
		}
	}
	if given != 1 {
		return usagef("give dispatch keys, -namespace N or -all (exactly one)")
	}
	if len(a.rest) > outbox.MaxKeys {
		return usagef("%s: %d keys, more than %d", cmd, len(a.rest), outbox.MaxKeys)
	}
	for _, k := range a.rest {
		if err := checkKey(cmd, k); err != nil {
			return err
		}
	}
	return nil
}

// checkValue checks set's value on its own, as the settings would validate
// it: a quota below 0 or a weight outside 1 to 1048576 is refused here;
// Apply checks the whole setting it leaves.
func checkValue(cmd, ns, v string) error {
	what := strings.TrimPrefix(cmd, "set ")
	set := admin.Setting{Namespace: ns}
	if err := parseValue(what, v, &set); err != nil {
		return err
	}
	alone := outbox.NamespaceSettings{Namespace: ns, Quota: set.Quota, Weight: set.Weight}
	if err := outbox.CheckSettings(alone); err != nil {
		return usagef("%s %s %s: %v", cmd, display(ns), v, err)
	}
	return nil
}

// parseValue reads set's VALUE of what ("quota" or "weight") into set.
func parseValue(what, v string, set *admin.Setting) error {
	switch {
	case v == "default" && what == "quota":
		set.ClearQuota = true
	case v == "default":
		set.ClearWeight = true
	case v == "unlimited" && what == "quota":
		u := backpressure.Unlimited
		set.Quota = &u
	default:
		n, err := strconv.Atoi(v)
		if err != nil {
			return usagef("set %s: %s is not a number", what, strconv.Quote(v))
		}
		if what == "quota" {
			set.Quota = &n
		} else {
			set.Weight = &n
		}
	}
	return nil
}

// openFailure is what Run says when opening the store failed with err: an
// option the store refuses (an invalid -schema, -shards or -dsn) is bad
// usage; an outbox that does not exist (*outbox.NotExistError) says what
// to check, or how to create it.
func openFailure(g global, err error) error {
	var arg *outbox.ArgumentError
	if errors.As(err, &arg) {
		return usagef("%v", err)
	}
	var ne *outbox.NotExistError
	if !errors.As(err, &ne) {
		return err
	}
	if g.sqlite != "" {
		return fmt.Errorf("%w: check -sqlite, or create the outbox with: outboxctl -sqlite %s migrate", err, display(g.sqlite))
	}
	return fmt.Errorf("%w: check -schema (and -dsn), or create the outbox with: outboxctl -dsn URL -schema %s migrate", err, display(g.schema))
}

// unknown reports whether ns has no rows (in any state) and no shared
// settings: a name the outbox has never seen, maybe a typo.
func unknown(ctx context.Context, s admin.Store, ns string) (bool, error) {
	states, err := s.Namespaces(ctx, outbox.NamespacesParams{Namespace: ns})
	if err != nil {
		return false, err
	}
	if st := states[0]; st.Ready+st.Scheduled+st.Claimed+st.Dead+st.Settled > 0 {
		return false, nil
	}
	all, err := s.ListSettings(ctx)
	if err != nil {
		return false, err
	}
	for _, set := range all {
		if set.Namespace == ns {
			return false, nil
		}
	}
	return true, nil
}

// display is a name (a namespace, node, key, task queue, reason) as a
// terminal may show it: as it is when every character is printable, else
// quoted as strconv.Quote quotes it, so that no control character, escape
// sequence, invalid UTF-8 or invisible format character (bidirectional
// overrides) reaches the terminal raw.
func display(s string) string {
	if printable(s, "") {
		return s
	}
	return strconv.Quote(s)
}

// displayText is free text (an error message) as a terminal may show it:
// every character but a printable one, a newline or a tab escaped as
// strconv.Quote would, without quoting the whole.
func displayText(s string) string {
	if printable(s, "\n\t") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		if c := s[i : i+n]; printable(c, "\n\t") {
			b.WriteString(c)
		} else {
			q := strconv.Quote(c)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// printable reports whether s is valid UTF-8 whose every character is
// printable (strconv.IsPrint: letters, marks, numbers, punctuation,
// symbols and the ASCII space) or one of keep.
func printable(s, keep string) bool {
	for i, r := range s {
		if _, n := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && n == 1 {
			return false // an invalid byte, not U+FFFD itself
		}
		if !strconv.IsPrint(r) && !strings.ContainsRune(keep, r) {
			return false
		}
	}
	return true
}

// jsonText escapes, in JSON text from encoding/json, the characters it
// leaves raw that a terminal may act on or hide (C1 controls, invisible
// format characters) as \uXXXX, which JSON allows in its strings, the
// only place they can be. The value it encodes is unchanged.
func jsonText(b []byte) []byte {
	s := string(b)
	if printable(s, "\n") {
		return b
	}
	var out strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || strconv.IsPrint(r):
			out.WriteRune(r)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&out, "\\u%04x\\u%04x", hi, lo)
		default:
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	return []byte(out.String())
}

// parseRateArgs reads set rate's arguments into a Setting, refusing as
// bad usage what ParseRate refuses and a rate that does not validate on
// its own.
func parseRateArgs(rest []string) (admin.Setting, error) {
	const form = "set rate takes NAMESPACE (RATE [burst N] | none | default)"
	if len(rest) != 2 && (len(rest) != 4 || rest[2] != "burst") {
		return admin.Setting{}, usagef(form)
	}
	if err := checkNamespace("set rate", rest[0]); err != nil {
		return admin.Setting{}, err
	}
	set := admin.Setting{Namespace: rest[0]}
	if rest[1] == "default" {
		if len(rest) == 4 {
			return admin.Setting{}, usagef("set rate: default takes no burst")
		}
		set.ClearRate = true
		return set, nil
	}
	burst := 0
	if len(rest) == 4 {
		n, err := strconv.Atoi(rest[3])
		if err != nil || n < 1 {
			return admin.Setting{}, usagef("set rate: burst %s is not a number of at least 1", strconv.Quote(rest[3]))
		}
		burst = n
	}
	r, err := admin.ParseRate(rest[1], burst)
	if err != nil {
		return admin.Setting{}, usagef("set rate: %v", err)
	}
	if err := outbox.CheckSettings(outbox.NamespaceSettings{Namespace: rest[0], Rate: &r}); err != nil {
		return admin.Setting{}, usagef("set rate %s %s: %v", display(rest[0]), rest[1], err)
	}
	set.Rate = &r
	return set, nil
}
