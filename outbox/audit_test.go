package outbox_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/backpressure/outbox"
)

// TestAuditEntryTexts: an entry's texts are cut at MaxAuditText bytes on
// a UTF-8 boundary, lose what no text column holds, and a settings row
// before the change is spelled as EncodeSettings spells it.
func TestAuditEntryTexts(t *testing.T) {
	ctx := outbox.WithOperation(context.Background(), outbox.Operation{Operator: "op", Detail: strings.Repeat("é", outbox.MaxAuditText) + "\x00\xff"})
	e := outbox.RowsAudit(ctx, outbox.ActionPurge, nil, 0, "ns")
	if len(e.Detail) > outbox.MaxAuditText || !utf8.ValidString(e.Detail) || !strings.HasSuffix(e.Detail, "…") || strings.Contains(e.Detail, "\x00") {
		t.Errorf("Detail of %d bytes (valid %v, ends %q); want at most %d valid bytes ending …", len(e.Detail), utf8.ValidString(e.Detail), e.Detail[len(e.Detail)-4:], outbox.MaxAuditText)
	}
	if e.Namespace != "ns" || e.Operator != "op" || e.Before != "dead" || e.After != "" {
		t.Errorf("purge entry = %+v", e)
	}
	q := 5
	s := outbox.SettingsAudit(context.Background(), `{"quota": 3,  "paused": true}`, outbox.NamespaceSettings{Namespace: "a", Quota: &q})
	if s.Before != `{"quota":3,"paused":true}` || s.After != `{"quota":5}` || s.Action != outbox.ActionSettings || s.Operator != "" {
		t.Errorf("settings entry = %+v; want before re-spelled, after {\"quota\":5}, action settings, no operator", s)
	}
	if s := outbox.SettingsAudit(context.Background(), `[1]`, outbox.NamespaceSettings{Namespace: "a"}); s.Before != `[1]` {
		t.Errorf("an unreadable row before is %q; want it as it was", s.Before)
	}
	if keys := outbox.RowsAudit(context.Background(), outbox.ActionRequeue, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}, 2, "").Detail; !strings.HasPrefix(keys, `12 keys: "a", "b"`) || !strings.HasSuffix(keys, "(+2 more)") {
		t.Errorf("Detail of 12 keys = %q", keys)
	}
}
