package ctl

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// osUser is -as's default: the OS user running outboxctl, or $USER, or
// "" when neither is known.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// asOf is the operator ctx names (-as).
func asOf(ctx context.Context) string { return outbox.OperationFrom(ctx).Operator }

// setRate is set rate NAMESPACE (RATE [burst N] | none | default).
func setRate(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	set, err := parseRateArgs(a.rest)
	if err != nil {
		return err
	}
	return setting(ctx, c, s, set)
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

// audit prints the audit trail, newest first.
func audit(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	es, err := s.Audit(ctx, outbox.AuditParams{Namespace: a.namespace, Before: a.before, Limit: a.limit})
	if err != nil {
		return err
	}
	if a.json {
		return c.json(es)
	}
	if len(es) == 0 {
		_, err := fmt.Fprintln(c.Stdout, "no change recorded")
		return err
	}
	w := table(c.Stdout)
	fmt.Fprintln(w, "ID\tWHEN\tOPERATOR\tACTION\tNAMESPACE\tBEFORE\tAFTER\tROWS\tDETAIL")
	now := c.now()
	for _, e := range es {
		who, ns, rows := display(e.Operator), display(e.Namespace), "-"
		if who == "" {
			who = "(unnamed)"
		}
		if ns == "" {
			ns = "-"
		}
		if e.Action == outbox.ActionRequeue || e.Action == outbox.ActionPurge {
			rows = strconv.Itoa(e.Rows)
		}
		fmt.Fprintf(w, "%d\t%s ago\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, admin.Age(now, e.At), who, display(e.Action), ns,
			auditValue(e.Namespace, e.Before), auditValue(e.Namespace, e.After), rows, orDash(displayText(oneLine(e.Detail, 60))))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(es) == a.limit {
		_, err = fmt.Fprintf(c.Stdout, "(more: outboxctl audit -before %d)\n", es[len(es)-1].ID)
	}
	return err
}

// auditValue is an entry's Before or After for a table: a settings row
// as the SETTINGS column of tenants shows it, other values as they are.
func auditValue(ns, v string) string {
	if strings.HasPrefix(v, "{") {
		set := outbox.NamespaceSettings{Namespace: ns}
		if outbox.DecodeSettings(&set, []byte(v)); set.Fault == "" {
			return settingsText(set)
		}
	}
	return orDash(displayText(oneLine(v, 40)))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
