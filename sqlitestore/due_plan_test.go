package sqlitestore

import (
	"strings"
	"testing"
)

// TestNextDuePlanSeeksPerNamespace: NextDue's statement reads the
// namespaces from outbox_routes and, per namespace, seeks
// the covering outbox_pending for the first pending row after now, with no
// sort and no scan of the outbox, on a node owning every shard or a part.
func TestNextDuePlanSeeksPerNamespace(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	for _, c := range []struct {
		cond string
		args int
	}{{"", 1}, {ownedCond(2), 2}} {
		plan := explain(t, s.reader, nextDueSQL(c.cond), c.args)
		want := "COVERING INDEX outbox_pending (namespace=? AND ready_at>?)"
		if !strings.Contains(plan, "SEARCH o USING ") || !strings.Contains(plan, want+"\n") {
			t.Errorf("shard filter %q: plan lacks %q:\n%s", c.cond, want, plan)
		}
		for _, line := range strings.Split(plan, "\n") {
			if strings.HasPrefix(line, "SCAN o ") || line == "SCAN o" || strings.HasPrefix(line, "SCAN outbox ") || strings.Contains(line, "TEMP B-TREE FOR ORDER BY") {
				t.Errorf("shard filter %q: plan scans or sorts the outbox: %q\n%s", c.cond, line, plan)
			}
		}
	}
}
