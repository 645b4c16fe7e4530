package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// setupAuditor is setupStore for a store that also implements
// [outbox.Operator] and [outbox.Auditor]; it skips the test otherwise.
func setupAuditor[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) (*ox, outbox.Operator, outbox.Auditor) {
	t.Helper()
	o, op := setupOperator(t, newHarness)
	au, ok := o.s.(outbox.Auditor)
	if !ok {
		t.Skipf("the store (%T) does not implement outbox.Auditor: its audit trail is not checked", o.s)
	}
	return o, op, au
}

// auditView is what the suite compares of an entry: Before and After of
// a settings change decoded, as stores may keep the row's JSON in their
// own spelling.
type auditView struct {
	Operator, Action, Namespace string
	Before, After               string
	Rows                        int
}

func viewOf(e outbox.AuditEntry) auditView {
	v := auditView{Operator: e.Operator, Action: e.Action, Namespace: e.Namespace, Before: e.Before, After: e.After, Rows: e.Rows}
	if strings.HasPrefix(e.Before, "{") {
		v.Before = settingsKey(e.Namespace, e.Before)
	}
	if strings.HasPrefix(e.After, "{") {
		v.After = settingsKey(e.Namespace, e.After)
	}
	return v
}

// settingsKey is a settings row's body in EncodeSettings' spelling.
func settingsKey(ns, body string) string {
	s := outbox.NamespaceSettings{Namespace: ns}
	outbox.DecodeSettings(&s, []byte(body))
	if s.Fault != "" {
		return "fault: " + body
	}
	return string(outbox.EncodeSettings(s))
}

// testAudit checks the audit trail of [outbox.Auditor]: every
// PutSettings, Requeue and DeleteDead is recorded with who (from the
// context), what, before, after and how many rows; a refused change
// records nothing; the listing is newest first, pages and filters by
// namespace.
func testAudit[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("TrailMatchesReference", func(t *testing.T) { checkAuditTrail(t, newHarness) })
	t.Run("EntryFields", func(t *testing.T) { checkAuditEntryFields(t, newHarness) })
	t.Run("RefusedChangeRecordsNothing", func(t *testing.T) { checkAuditRefused(t, newHarness) })
	t.Run("PagesAndFilters", func(t *testing.T) { checkAuditPages(t, newHarness) })
	t.Run("HonoursContext", func(t *testing.T) {
		o, _, au := setupAuditor(t, newHarness)
		ctx, cancel := context.WithCancel(o.ctx)
		cancel()
		if _, err := au.Audit(ctx, outbox.AuditParams{}); !errors.Is(err, context.Canceled) {
			t.Errorf("Audit on a cancelled context = %v; want context.Canceled", err)
		}
	})
}

// auditModel is the naive reference of one check of the trail: the
// entries it made, oldest first, and the state they depend on.
type auditModel struct {
	o        *ox
	op       outbox.Operator
	prefix   string
	settings map[string]string // namespace → its row, EncodeSettings' spelling
	dead     map[string]bool
	keys     []string
	want     []auditView
}

// checkAuditTrail runs random histories of settings changes, dead
// letters, requeues and purges by several operators, and compares the
// trail, newest first, with the reference's.
func checkAuditTrail[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op, au := setupAuditor(t, newHarness)
	check := 0
	rapid.Check(t, func(rt *rapid.T) {
		check++
		m := &auditModel{o: o, op: op, prefix: fmt.Sprintf("c%04d-", check), settings: map[string]string{}, dead: map[string]bool{}}
		for step := range rapid.IntRange(1, 12).Draw(rt, "steps") {
			m.step(rt, step)
		}
		// This check's entries are the newest; earlier checks' are below.
		got, err := au.Audit(o.ctx, outbox.AuditParams{Limit: len(m.want) + 1})
		if err != nil {
			rt.Fatalf("Audit: %v", err)
		}
		var views []auditView
		for _, e := range got {
			if strings.HasPrefix(e.Namespace, m.prefix) {
				views = append(views, viewOf(e))
			}
		}
		var rev []auditView
		for i := len(m.want) - 1; i >= 0; i-- {
			rev = append(rev, m.want[i])
		}
		if !reflect.DeepEqual(views, rev) {
			rt.Fatalf("Audit, newest first:\n got  %+v\n want %+v", views, rev)
		}
		drainRequeued(o, m.prefix)
	})
}

// step makes one random change and records what the trail should say.
func (m *auditModel) step(rt *rapid.T, step int) {
	o := m.o
	ns := rapid.SampledFrom([]string{m.prefix + "a", m.prefix + "b"}).Draw(rt, "ns")
	who := rapid.SampledFrom([]string{"alice", "bob", ""}).Draw(rt, "who")
	switch rapid.IntRange(0, 3).Draw(rt, "op") {
	case 0, 1: // a settings change
		set := outbox.NamespaceSettings{Namespace: ns, Paused: rapid.Bool().Draw(rt, "paused")}
		if q := rapid.IntRange(-1, 5).Draw(rt, "quota"); q >= 0 {
			set.Quota = &q
		}
		action := rapid.SampledFrom([]string{outbox.ActionPause, outbox.ActionSet, ""}).Draw(rt, "action")
		ctx := outbox.WithOperation(o.ctx, outbox.Operation{Operator: who, Action: action})
		if _, err := m.op.PutSettings(ctx, set); err != nil {
			rt.Fatalf("step %d: PutSettings(%+v): %v", step, set, err)
		}
		if action == "" {
			action = outbox.ActionSettings
		}
		after := string(outbox.EncodeSettings(set))
		m.want = append(m.want, auditView{Operator: who, Action: action, Namespace: ns, Before: m.settings[ns], After: after})
		m.settings[ns] = after
	case 2: // a dead letter (the oldest pending row of ns: maybe one requeued)
		key := fmt.Sprintf("%s%d", m.prefix, len(m.keys))
		m.keys = append(m.keys, key)
		o.enqueue(msg(ns, "q", key))
		r := o.claimN(fmt.Sprintf("step %d: claim", step), 1, scope(ns, "q", 1))[0]
		o.complete(fmt.Sprintf("step %d: dead-letter", step), outbox.DeadLetterRow(r, errors.New("poison")))
		m.dead[r.DispatchKey] = true
	case 3: // requeue or purge some keys, dead or not
		if len(m.keys) == 0 {
			return
		}
		pick := rapid.SliceOfNDistinct(rapid.SampledFrom(m.keys), 1, len(m.keys), func(k string) string { return k }).Draw(rt, "keys")
		m.deadAction(rt, step, ns, who, pick, rapid.Bool().Draw(rt, "purge"))
	}
}

// deadAction requeues or purges pick, by who, naming ns as the selection.
func (m *auditModel) deadAction(rt *rapid.T, step int, ns, who string, pick []string, purge bool) {
	n := 0
	for _, k := range pick {
		if m.dead[k] {
			n++
		}
	}
	ctx := outbox.WithOperation(m.o.ctx, outbox.Operation{Operator: who, Namespace: ns, Detail: "picked"})
	var got int
	var err error
	v := auditView{Operator: who, Namespace: ns, Before: "dead", Rows: n}
	if purge {
		got, err = m.op.DeleteDead(ctx, pick)
		v.Action = outbox.ActionPurge
	} else {
		got, err = m.o.s.Requeue(ctx, pick)
		v.Action, v.After = outbox.ActionRequeue, "pending"
	}
	if err != nil || got != n {
		rt.Fatalf("step %d: purge %v of %v = %d, %v; want %d", step, purge, pick, got, err, n)
	}
	for _, k := range pick {
		delete(m.dead, k) // requeued (pending again) or purged
	}
	m.want = append(m.want, v)
}

// checkAuditEntryFields checks one entry's every field, a fresh store's
// migration entry, and the namespace a dead-letter action's entry names
// from its rows.
func checkAuditEntryFields[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op, au := setupAuditor(t, newHarness)
	ctx := outbox.WithOperation(o.ctx, outbox.Operation{Operator: "carol", Action: outbox.ActionPause})
	if _, err := op.PutSettings(ctx, outbox.NamespaceSettings{Namespace: "a", Paused: true}); err != nil {
		t.Fatal(err)
	}
	got, err := au.Audit(o.ctx, outbox.AuditParams{})
	if err != nil || len(got) != 2 {
		t.Fatalf("Audit = %+v, %v; want the pause and the migration that made the store", got, err)
	}
	if m := got[1]; m.Action != outbox.ActionMigrate || m.Before != "schema version 0" || !strings.HasPrefix(m.After, "schema version ") {
		t.Errorf("a fresh store's first entry = %+v; want its migration from schema version 0", m)
	}
	e := got[0]
	if e.ID <= 0 || e.At.IsZero() || e.Operator != "carol" || e.Action != "pause" || e.Namespace != "a" || e.Before != "" || settingsKey("a", e.After) != `{"paused":true}` {
		t.Errorf("entry = %+v; want an ID, a time, carol, pause, a, before \"\", after {\"paused\":true}", e)
	}
	o.enqueue(msg("a", "q", "k1"), msg("a", "q", "k2"))
	o.deadLetters("a", 2)
	if n, err := o.s.Requeue(o.ctx, []string{"k1", "k2", "nope"}); err != nil || n != 2 {
		t.Fatalf("Requeue = %d, %v; want 2", n, err)
	}
	if e := newestEntry(t, au, o); e.Operator != "" || e.Action != "requeue" || e.Rows != 2 || e.Namespace != "a" || !strings.Contains(e.Detail, `"k1"`) || !strings.Contains(e.Detail, "3 keys") {
		t.Errorf("unnamed requeue's entry = %+v; want operator \"\", requeue, namespace a (its rows'), 2 rows, detail naming 3 keys with \"k1\"", e)
	}
	// Dead rows of two namespaces: the entry names none.
	o.enqueue(msg("b", "q", "k3"))
	o.deadLetters("a", 2)
	o.deadLetters("b", 1)
	if n, err := op.DeleteDead(o.ctx, []string{"k1", "k2", "k3"}); err != nil || n != 3 {
		t.Fatalf("DeleteDead = %d, %v; want 3", n, err)
	}
	if e := newestEntry(t, au, o); e.Action != "purge" || e.Rows != 3 || e.Namespace != "" || e.Before != "dead" || e.After != "" {
		t.Errorf("purge of two namespaces' rows: entry %+v; want purge, 3 rows, no namespace, dead → \"\"", e)
	}
}

// deadLetters claims and dead-letters n rows of ns, one at a time.
func (o *ox) deadLetters(ns string, n int) {
	for range n {
		r := o.claimN("claim", 1, scope(ns, "q", 1))[0]
		o.complete("dead-letter", outbox.DeadLetterRow(r, errors.New("poison")))
	}
}

// newestEntry is the trail's newest entry.
func newestEntry(t *testing.T, au outbox.Auditor, o *ox) outbox.AuditEntry {
	t.Helper()
	got, err := au.Audit(o.ctx, outbox.AuditParams{Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("Audit(Limit 1) = %+v, %v", got, err)
	}
	return got[0]
}

// checkAuditRefused checks that a change the store refuses (a bad value,
// an operator name it does not record) records nothing.
func checkAuditRefused[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op, au := setupAuditor(t, newHarness)
	bad := -5
	if _, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{Namespace: "a", Quota: &bad}); err == nil {
		t.Fatal("PutSettings of quota -5 succeeded")
	}
	long := outbox.WithOperation(o.ctx, outbox.Operation{Operator: strings.Repeat("x", outbox.MaxOperatorName+1)})
	var arg *outbox.ArgumentError
	if _, err := op.PutSettings(long, outbox.NamespaceSettings{Namespace: "a", Paused: true}); !errors.As(err, &arg) {
		t.Errorf("PutSettings by a %d-byte operator = %v; want an *outbox.ArgumentError", outbox.MaxOperatorName+1, err)
	}
	if _, err := o.s.Requeue(long, []string{"k"}); !errors.As(err, &arg) {
		t.Errorf("Requeue by a %d-byte operator = %v; want an *outbox.ArgumentError", outbox.MaxOperatorName+1, err)
	}
	if _, err := op.DeleteDead(long, []string{"k"}); !errors.As(err, &arg) {
		t.Errorf("DeleteDead by a %d-byte operator = %v; want an *outbox.ArgumentError", outbox.MaxOperatorName+1, err)
	}
	if got, err := au.Audit(o.ctx, outbox.AuditParams{}); err != nil || len(got) != 1 || got[0].Action != outbox.ActionMigrate {
		t.Errorf("Audit after refused changes = %+v, %v; want the store's migration alone", got, err)
	}
	if set, err := op.ListSettings(o.ctx); err != nil || len(set) != 0 {
		t.Errorf("ListSettings after refused changes = %+v, %v; want none", set, err)
	}
}

// checkAuditPages checks paging by Before and the namespace filter, and
// that bad params are refused.
func checkAuditPages[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op, au := setupAuditor(t, newHarness)
	for i := range 7 {
		ns := []string{"a", "b"}[i%2]
		q := i
		ctx := outbox.WithOperation(o.ctx, outbox.Operation{Operator: fmt.Sprint("op", i)})
		if _, err := op.PutSettings(ctx, outbox.NamespaceSettings{Namespace: ns, Quota: &q}); err != nil {
			t.Fatal(err)
		}
	}
	var ops []string
	for before := int64(0); ; {
		page, err := au.Audit(o.ctx, outbox.AuditParams{Namespace: "a", Before: before, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			ops = append(ops, e.Operator)
		}
		if len(page) < 2 {
			break
		}
		before = page[len(page)-1].ID
	}
	if want := []string{"op6", "op4", "op2", "op0"}; !reflect.DeepEqual(ops, want) {
		t.Errorf("namespace a's entries paged by 2 = %v; want %v", ops, want)
	}
	for _, p := range []outbox.AuditParams{{Limit: -1}, {Limit: outbox.MaxAuditPage + 1}, {Before: -1}, {Namespace: "a\x00"}} {
		var arg *outbox.ArgumentError
		if _, err := au.Audit(o.ctx, p); !errors.As(err, &arg) {
			t.Errorf("Audit(%+v) = %v; want an *outbox.ArgumentError", p, err)
		}
	}
}

// drainRequeued settles the rows of prefix's namespaces a check requeued,
// so that the next check's claims see its own rows only.
func drainRequeued(o *ox, prefix string) {
	for _, ns := range []string{prefix + "a", prefix + "b"} {
		for {
			rows := o.claim(o.all, scope(ns, "q", 100))
			if len(rows) == 0 {
				break
			}
			for _, r := range rows {
				o.settle(r)
			}
		}
	}
}
