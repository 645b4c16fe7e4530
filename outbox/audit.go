package outbox

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The audit trail: every change an operator makes through a store —
// shared settings (PutSettings), dead letters (Requeue, DeleteDead) and
// the schema (a migration) — is recorded by the store in the same
// transaction as the change, so a change is never without its entry nor
// an entry without its change. Who made it is told by the caller's
// context ([WithOperation]); the store knows what changed.

// Bounds of the audit trail.
const (
	// MaxAuditEntries is the retention bound: a store keeps at most this
	// many entries, and every entry it records deletes those whose ID is
	// MaxAuditEntries or more below its own (IDs may have gaps, so it may
	// keep fewer).
	MaxAuditEntries = 10_000
	// MaxAuditPage is the most entries one [Auditor.Audit] call returns.
	MaxAuditPage = 1_000
	// DefaultAuditPage is the page of an Audit call whose Limit is 0.
	DefaultAuditPage = 100
	// MaxAuditText is the most bytes of an entry's Before, After and
	// Detail: longer texts are cut at a UTF-8 boundary and end in "…".
	MaxAuditText = 1_024
	// MaxOperatorName is the most bytes of [Operation.Operator].
	MaxOperatorName = 255
)

// Actions an audit entry records. A store names a change by the
// [Operation]'s Action when its context carries one, else by the call:
// ActionSettings, ActionRequeue, ActionPurge or ActionMigrate.
const (
	ActionPause    = "pause"
	ActionResume   = "resume"
	ActionSet      = "set"
	ActionReset    = "reset"
	ActionSettings = "settings" // a PutSettings whose context names no action
	ActionRequeue  = "requeue"
	ActionPurge    = "purge"
	ActionMigrate  = "migrate"
)

// Operation is who makes a change and how they name it, carried by a
// context ([WithOperation]) to the store call that makes it. The zero
// value is an unnamed change: the store still records it, with Operator
// "".
type Operation struct {
	// Operator is who acts: an authenticated name (a login, a token's
	// holder, the OS user of a command), at most [MaxOperatorName] bytes
	// of valid UTF-8 without NUL. A store call refuses a longer or invalid
	// one with an [*ArgumentError] and changes nothing.
	Operator string
	// Action names the change ("pause", "set", …; see ActionPause and
	// its neighbours); "" lets the store name it by its call.
	Action string
	// Namespace is the namespace a dead-letter action selected; "" when
	// it named keys or everything. A settings change records its own.
	Namespace string
	// Detail is what the operator selected, in their words ("every dead
	// letter of beta", "quota 5"); "" lets the store describe the call's
	// arguments. Cut at [MaxAuditText] bytes.
	Detail string
}

type operationKey struct{}

// WithOperation returns ctx carrying op: the store calls made with it
// record op in their audit entries.
func WithOperation(ctx context.Context, op Operation) context.Context {
	return context.WithValue(ctx, operationKey{}, op)
}

// OperationFrom returns the Operation ctx carries, the zero Operation
// when it carries none.
func OperationFrom(ctx context.Context) Operation {
	op, _ := ctx.Value(operationKey{}).(Operation)
	return op
}

// AuditEntry is one recorded change.
type AuditEntry struct {
	// ID orders entries: a later change has a greater ID. Set by the
	// store.
	ID int64
	// At is when the change was made, on the store's clock.
	At time.Time
	// Operator is who made it ([Operation.Operator]; "" when unnamed).
	Operator string
	// Action is what was done (ActionPause and its neighbours).
	Action string
	// Namespace is the namespace changed: a settings change's, or a
	// dead-letter action's selection ("" for keys or every namespace, or
	// a migration).
	Namespace string
	// Before and After are the value before and after: a settings row
	// ([EncodeSettings]' JSON; Before "" when there was none, or the
	// unreadable row as it was), "dead" and "pending" for a requeue,
	// "dead" and "" for a purge, the schema versions for a migration.
	Before, After string
	// Rows is how many rows a requeue or purge changed (0 for the
	// others).
	Rows int
	// Detail is what was selected: the Operation's Detail, or the keys a
	// dead-letter action named (the first ones and how many more).
	Detail string
}

// AuditParams selects a page of [Auditor.Audit], newest first.
type AuditParams struct {
	// Namespace, when not "", selects that namespace's entries only.
	Namespace string
	// Before pages: only entries with an ID below it, the last ID of the
	// previous page; 0 starts at the newest.
	Before int64
	// Limit is the most entries: 1 to [MaxAuditPage]; 0 means
	// [DefaultAuditPage].
	Limit int
}

// Auditor is an optional extension of [Operator]: a store that records
// its changes (see [WithOperation]) and lists them. sqlitestore and
// pgstore implement it.
type Auditor interface {
	// Audit returns the entries p selects, newest first (by ID
	// descending): at most p.Limit of them, one statement. Bad params are
	// an [*ArgumentError].
	Audit(ctx context.Context, p AuditParams) ([]AuditEntry, error)
}

// Check returns p with its default Limit filled in, or an
// [*ArgumentError] of op for a Limit out of range, a negative Before or a
// namespace no row can have. Stores call it first.
func (p AuditParams) Check(op string) (AuditParams, error) {
	if p.Limit == 0 {
		p.Limit = DefaultAuditPage
	}
	switch {
	case p.Limit < 1 || p.Limit > MaxAuditPage:
		return p, &ArgumentError{Op: op, Arg: "p.Limit", Reason: fmt.Sprintf("%d is outside 0 to %d", p.Limit, MaxAuditPage)}
	case p.Before < 0:
		return p, &ArgumentError{Op: op, Arg: "p.Before", Reason: fmt.Sprintf("%d is negative", p.Before)}
	case !utf8.ValidString(p.Namespace) || strings.IndexByte(p.Namespace, 0) >= 0:
		return p, &ArgumentError{Op: op, Arg: "p.Namespace", Reason: "is not valid UTF-8 without NUL"}
	}
	return p, nil
}

// CheckOperation returns an [*ArgumentError] of op when ctx's
// [Operation] has an Operator a store does not record: more than
// [MaxOperatorName] bytes, not valid UTF-8, or holding a NUL. Stores call
// it before they change anything.
func CheckOperation(ctx context.Context, op string) error {
	name := OperationFrom(ctx).Operator
	if len(name) > MaxOperatorName || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return &ArgumentError{Op: op, Arg: "Operation.Operator", Reason: fmt.Sprintf("%.40q is not at most %d bytes of valid UTF-8 without NUL", name, MaxOperatorName)}
	}
	return nil
}

// SettingsAudit is the entry of a PutSettings of after over the row
// before (its stored body; "" when the namespace had none), made with
// ctx. A before row that decodes is spelled as [EncodeSettings] spells
// it, whatever the store kept (so stores agree); one that does not is
// kept as it was. The store sets ID and At.
func SettingsAudit(ctx context.Context, before string, after NamespaceSettings) AuditEntry {
	op := OperationFrom(ctx)
	if before != "" {
		was := NamespaceSettings{Namespace: after.Namespace}
		if DecodeSettings(&was, []byte(before)); was.Fault == "" {
			before = string(EncodeSettings(was))
		}
	}
	e := AuditEntry{Operator: op.Operator, Action: op.Action, Namespace: after.Namespace, Before: before,
		After: string(EncodeSettings(after)), Detail: op.Detail}
	if e.Action == "" {
		e.Action = ActionSettings
	}
	return e.trim()
}

// RowsAudit is the entry of a dead-letter action (ActionRequeue or
// ActionPurge) over keys that changed rows rows, made with ctx; namespace
// is the namespace of every row changed when they share one ("" when
// none changed or they are of several), recorded unless ctx's Operation
// names the namespace selected.
func RowsAudit(ctx context.Context, action string, keys []string, rows int, namespace string) AuditEntry {
	op := OperationFrom(ctx)
	if op.Namespace != "" {
		namespace = op.Namespace
	}
	e := AuditEntry{Operator: op.Operator, Action: action, Namespace: namespace, Before: "dead", Rows: rows, Detail: op.Detail}
	if action == ActionRequeue {
		e.After = "pending"
	}
	if op.Action != "" {
		e.Action = op.Action
	}
	if e.Detail == "" {
		e.Detail = keysText(keys)
	}
	return e.trim()
}

// MigrationAudit is the entry of a migration of the schema from version
// from to version to, made with ctx.
func MigrationAudit(ctx context.Context, from, to int) AuditEntry {
	op := OperationFrom(ctx)
	return AuditEntry{Operator: op.Operator, Action: ActionMigrate, Before: fmt.Sprintf("schema version %d", from),
		After: fmt.Sprintf("schema version %d", to), Detail: op.Detail}.trim()
}

// keysText names keys: the first ones and how many more.
func keysText(keys []string) string {
	const shown = 10
	var b strings.Builder
	if len(keys) == 1 {
		b.WriteString("1 key: ")
	} else {
		fmt.Fprintf(&b, "%d keys: ", len(keys))
	}
	for i, k := range keys {
		if i == shown {
			fmt.Fprintf(&b, " (+%d more)", len(keys)-shown)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", k)
	}
	return b.String()
}

// trim cuts e's texts to MaxAuditText bytes and drops what no text
// column holds (invalid UTF-8, NUL).
func (e AuditEntry) trim() AuditEntry {
	for _, s := range []*string{&e.Before, &e.After, &e.Detail, &e.Namespace} {
		*s = strings.ReplaceAll(strings.ToValidUTF8(*s, "\uFFFD"), "\x00", "\uFFFD")
		if len(*s) > MaxAuditText {
			cut := MaxAuditText - len("…")
			for cut > 0 && !utf8.RuneStart((*s)[cut]) {
				cut--
			}
			*s = (*s)[:cut] + "…"
		}
	}
	return e
}
