package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// referenceState is the naive NamespaceState of rows, read one by one with
// Get, at now, with every count capped at capN.
func referenceState(ns string, rows []outbox.Row, now time.Time, capN int) outbox.NamespaceState {
	st := outbox.NamespaceState{Namespace: ns}
	readySince := func(t time.Time) {
		if st.ReadySince.IsZero() || t.Before(st.ReadySince) {
			st.ReadySince = t
		}
	}
	for _, r := range rows {
		switch {
		case r.State == outbox.StatePending && !r.RunAt.After(now):
			st.Ready++
			readySince(r.RunAt)
		case r.State == outbox.StatePending:
			st.Scheduled++
		case r.State == outbox.StateClaimed && !r.LeaseExpiresAt.After(now):
			st.Ready++
			readySince(r.LeaseExpiresAt)
		case r.State == outbox.StateClaimed:
			st.Claimed++
		case r.State == outbox.StateDead:
			st.Dead++
		case r.State == outbox.StateSettled:
			st.Settled++
		}
	}
	for _, n := range []*int{&st.Ready, &st.Scheduled, &st.Claimed, &st.Dead, &st.Settled} {
		if *n >= capN {
			*n, st.Capped = capN, true
		}
	}
	return st
}

// referenceRoutes is the naive RouteState of rows' live rows at now, by
// task queue in byte order, uncapped.
func referenceRoutes(rows []outbox.Row, now time.Time) []outbox.RouteState {
	by := map[string]*outbox.RouteState{}
	var out []outbox.RouteState
	for _, r := range rows {
		if r.State != outbox.StatePending && r.State != outbox.StateClaimed {
			continue
		}
		st := by[r.TaskQueue]
		if st == nil {
			st = &outbox.RouteState{TaskQueue: r.TaskQueue}
			by[r.TaskQueue] = st
		}
		switch {
		case r.State == outbox.StatePending && !r.RunAt.After(now), r.State == outbox.StateClaimed && !r.LeaseExpiresAt.After(now):
			st.Ready++
		case r.State == outbox.StatePending:
			st.Scheduled++
		default:
			st.Claimed++
		}
	}
	for _, st := range by {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b outbox.RouteState) int { return strings.Compare(a.TaskQueue, b.TaskQueue) })
	return out
}

func sameState(a, b outbox.NamespaceState) bool {
	return a.Namespace == b.Namespace && a.Ready == b.Ready && a.Scheduled == b.Scheduled && a.Claimed == b.Claimed &&
		a.Dead == b.Dead && a.Settled == b.Settled && a.Capped == b.Capped && a.ReadySince.Equal(b.ReadySince)
}

// testOperate checks [outbox.Operator]: Namespaces against a naive
// reference over every row read with Get, after random sequences of
// enqueues, claims, completions, requeues, dead-row deletions and clock
// steps; its pages and caps; DeleteDead; the shared settings' round trip
// and versions; node reports and their expiry; and bad arguments.
func testOperate[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("NamespacesMatchReference", func(t *testing.T) {
		o, op := setupOperator(t, newHarness)
		check := 0
		rapid.Check(t, func(rt *rapid.T) {
			check++
			prefix := fmt.Sprintf("c%05d-", check) // each check has namespaces of its own
			names := []string{prefix + "a", prefix + "b", prefix + "c"}
			var keys []string
			byKey := map[string]string{}
			var claimed []outbox.Row
			steps := rapid.IntRange(1, 25).Draw(rt, "steps")
			for step := range steps {
				ns := rapid.SampledFrom(names).Draw(rt, "ns")
				switch rapid.IntRange(0, 6).Draw(rt, "op") {
				case 0: // enqueue, some scheduled
					n := rapid.IntRange(1, 4).Draw(rt, "n")
					var ms []outbox.Message
					for i := range n {
						m := msg(ns, []string{"", "q1", "q2"}[(step+i)%3], fmt.Sprintf("%s/%d/%d", ns, step, i))
						if rapid.Bool().Draw(rt, "scheduled") {
							m.RunAt = o.h.Now().Add(time.Duration(rapid.IntRange(1, 3).Draw(rt, "s")) * o.h.Lease / 2)
						}
						ms = append(ms, m)
						keys = append(keys, m.DispatchKey)
						byKey[m.DispatchKey] = ns
					}
					o.enqueue(ms...)
				case 1: // claim
					k := rapid.IntRange(1, 3).Draw(rt, "k")
					rows := o.claim(o.all, scope(ns, "q0", k), scope(ns, "q1", k))
					claimed = append(claimed, rows...)
				case 2, 3: // complete one claimed row
					if len(claimed) == 0 {
						continue
					}
					i := rapid.IntRange(0, len(claimed)-1).Draw(rt, "row")
					r := claimed[i]
					claimed = append(claimed[:i], claimed[i+1:]...)
					var c outbox.Completion
					switch rapid.IntRange(0, 2).Draw(rt, "outcome") {
					case 0:
						c = outbox.SettleRow(r)
					case 1:
						c = outbox.DeadLetterRow(r, errors.New("boom"))
					default:
						c = outbox.RetryRow(r, time.Duration(rapid.IntRange(0, 2).Draw(rt, "d"))*o.h.Lease/2, nil)
					}
					if _, err := o.s.Complete(o.ctx, []outbox.Completion{c}); err != nil {
						rt.Fatalf("step %d: Complete: %v", step, err)
					}
				case 4: // requeue or delete the dead rows of ns
					dead, err := o.s.ListDead(o.ctx, outbox.ListDeadParams{Namespace: ns})
					if err != nil {
						rt.Fatalf("step %d: ListDead: %v", step, err)
					}
					if len(dead) == 0 {
						continue
					}
					ks := rowKeys(dead)
					if rapid.Bool().Draw(rt, "requeue") {
						if n, err := o.s.Requeue(o.ctx, ks); err != nil || n != len(ks) {
							rt.Fatalf("step %d: Requeue(%v) = %d, %v", step, ks, n, err)
						}
					} else {
						if n, err := op.DeleteDead(o.ctx, append(ks, prefix+"no-such-row")); err != nil || n != len(ks) {
							rt.Fatalf("step %d: DeleteDead(%v + a key of no row) = %d, %v; want %d", step, ks, n, err, len(ks))
						}
					}
				case 5, 6:
					o.h.Advance(time.Duration(rapid.IntRange(1, 4).Draw(rt, "ms")) * o.h.Lease / 3)
				}
			}
			capN := rapid.IntRange(1, 12).Draw(rt, "cap")
			// The reference: every row, by Get.
			rows := map[string][]outbox.Row{}
			for _, k := range keys {
				r, err := o.s.Get(o.ctx, k)
				if errors.Is(err, outbox.ErrNotFound) {
					continue // deleted dead
				}
				if err != nil {
					rt.Fatalf("Get(%q): %v", k, err)
				}
				rows[byKey[k]] = append(rows[byKey[k]], r)
			}
			now := o.h.Now()
			var want []outbox.NamespaceState
			for _, ns := range names {
				ref := referenceState(ns, rows[ns], now, capN)
				if len(rows[ns]) > 0 {
					want = append(want, ref)
				}
				got, err := op.Namespaces(o.ctx, outbox.NamespacesParams{Namespace: ns, Cap: capN})
				if err != nil || len(got) != 1 || !sameState(got[0], ref) {
					rt.Fatalf("Namespaces({Namespace: %q, Cap: %d}) = %+v, %v; want [%+v]", ns, capN, got, err, ref)
				}
			}
			limit := rapid.IntRange(1, 4).Draw(rt, "limit")
			// Routes of each namespace, paged: the task queues with live
			// rows, in byte order, counted exactly below the cap and, at
			// it, cap rows of them with each count a lower bound.
			for _, ns := range names {
				ref := referenceRoutes(rows[ns], now)
				var got []outbox.RouteState
				p := outbox.RoutesParams{Namespace: ns, Limit: limit, Cap: capN}
				for {
					page, err := op.Routes(o.ctx, p)
					if err != nil || len(page) > limit {
						rt.Fatalf("Routes(%+v) = %+v, %v", p, page, err)
					}
					got = append(got, page...)
					if len(page) < limit {
						break
					}
					p.After, p.Started = page[len(page)-1].TaskQueue, true
				}
				if len(got) != len(ref) {
					rt.Fatalf("Routes(%q, cap %d) = %+v, want %+v", ns, capN, got, ref)
				}
				for i, w := range ref {
					g := got[i]
					live := w.Ready + w.Scheduled + w.Claimed
					ok := g.TaskQueue == w.TaskQueue && g.Capped == (live >= capN)
					if live < capN {
						ok = ok && g == w
					} else {
						ok = ok && g.Ready+g.Scheduled+g.Claimed == capN && g.Ready <= w.Ready && g.Scheduled <= w.Scheduled && g.Claimed <= w.Claimed
					}
					if !ok {
						rt.Fatalf("Routes(%q, cap %d)[%d] = %+v, want %+v (capped at %d)", ns, capN, i, g, w, capN)
					}
				}
			}
			// The page after the prefix, one namespace at a time and all
			// at once: the namespaces with rows, in order, each as above.
			var paged []outbox.NamespaceState
			for after := prefix; ; {
				page, err := op.Namespaces(o.ctx, outbox.NamespacesParams{After: after, Limit: limit, Cap: capN})
				if err != nil {
					rt.Fatalf("Namespaces({After: %q, Limit: %d}): %v", after, limit, err)
				}
				if len(page) > limit {
					rt.Fatalf("Namespaces({Limit: %d}) returned %d", limit, len(page))
				}
				done := len(page) < limit
				for _, st := range page {
					if !strings.HasPrefix(st.Namespace, prefix) {
						done = true
						break
					}
					paged = append(paged, st)
				}
				if done || len(page) == 0 {
					break
				}
				after = page[len(page)-1].Namespace
			}
			if len(paged) != len(want) {
				rt.Fatalf("paged Namespaces = %+v, want %+v", paged, want)
			}
			for i := range want {
				if !sameState(paged[i], want[i]) {
					rt.Fatalf("paged Namespaces[%d] = %+v, want %+v", i, paged[i], want[i])
				}
			}
		})
	})

	t.Run("UnknownNamespace", func(t *testing.T) {
		o, op := setupOperator(t, newHarness)
		got, err := op.Namespaces(o.ctx, outbox.NamespacesParams{Namespace: "nobody"})
		if err != nil || len(got) != 1 || !sameState(got[0], outbox.NamespaceState{Namespace: "nobody"}) {
			t.Errorf("Namespaces(nobody) = %+v, %v; want one zero state", got, err)
		}
		got, err = op.Namespaces(o.ctx, outbox.NamespacesParams{})
		if err != nil || len(got) != 0 {
			t.Errorf("Namespaces of an empty store = %+v, %v; want none", got, err)
		}
	})

	t.Run("BadParams", func(t *testing.T) {
		o, op := setupOperator(t, newHarness)
		for _, p := range []outbox.NamespacesParams{
			{Limit: -1}, {Limit: outbox.MaxNamespacesPage + 1}, {Cap: -1}, {Cap: outbox.MaxCountCap + 1},
			{Namespace: "a\x00b"}, {After: "\xff"},
		} {
			if _, err := op.Namespaces(o.ctx, p); !errors.Is(err, outbox.ErrInvalidArgument) {
				t.Errorf("Namespaces(%+v) = %v, want ErrInvalidArgument", p, err)
			}
		}
		for _, p := range []outbox.RoutesParams{
			{}, {Namespace: "n", Limit: -1}, {Namespace: "n", Cap: outbox.MaxCountCap + 1}, {Namespace: "n", After: "a\x00b"},
		} {
			if _, err := op.Routes(o.ctx, p); !errors.Is(err, outbox.ErrInvalidArgument) {
				t.Errorf("Routes(%+v) = %v, want ErrInvalidArgument", p, err)
			}
		}
		if _, err := op.DeleteDead(o.ctx, []string{""}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("DeleteDead([\"\"]) = %v, want ErrInvalidArgument", err)
		}
		if _, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("PutSettings with no namespace = %v, want ErrInvalidArgument", err)
		}
		for _, c := range []struct {
			r   outbox.NodeReport
			ttl time.Duration
		}{{outbox.NodeReport{}, time.Minute}, {outbox.NodeReport{Node: "n"}, time.Millisecond},
			{outbox.NodeReport{Node: "n", Plan: make([]outbox.PlanEntry, outbox.MaxReportNamespaces+1)}, time.Minute}} {
			if err := op.PutNodeReport(o.ctx, c.r, c.ttl); !errors.Is(err, outbox.ErrInvalidArgument) {
				t.Errorf("PutNodeReport(node %q, %d plan entries, ttl %v) = %v, want ErrInvalidArgument", c.r.Node, len(c.r.Plan), c.ttl, err)
			}
		}
		if got, err := op.NodeReports(o.ctx); err != nil || len(got) != 0 {
			t.Errorf("NodeReports after refused puts = %+v, %v; want none", got, err)
		}
	})

	t.Run("Settings", func(t *testing.T) {
		o, op := setupOperator(t, newHarness)
		if v, err := op.SettingsVersion(o.ctx); err != nil || v != 0 {
			t.Fatalf("SettingsVersion of a new store = %d, %v; want 0", v, err)
		}
		q, w, u := 5, 3, -1
		steps := []outbox.NamespaceSettings{
			{Namespace: "b", Quota: &q},
			{Namespace: "a", Weight: &w, Paused: true},
			{Namespace: "b", Quota: &u}, // unlimited
			{Namespace: "a"},            // cleared
		}
		want := map[string]outbox.NamespaceSettings{}
		last := int64(0)
		for i, s := range steps {
			got, err := op.PutSettings(o.ctx, s)
			if err != nil {
				t.Fatalf("step %d: PutSettings(%+v): %v", i, s, err)
			}
			if got.Version <= last || !got.UpdatedAt.Equal(o.h.Now()) {
				t.Errorf("step %d: PutSettings = version %d at %v; want above %d, at %v", i, got.Version, got.UpdatedAt, last, o.h.Now())
			}
			last = got.Version
			want[s.Namespace] = got
			if v, err := op.SettingsVersion(o.ctx); err != nil || v != last {
				t.Errorf("step %d: SettingsVersion = %d, %v; want %d", i, v, err, last)
			}
			list, err := op.ListSettings(o.ctx)
			if err != nil {
				t.Fatalf("step %d: ListSettings: %v", i, err)
			}
			var names []string
			for _, l := range list {
				names = append(names, l.Namespace)
				if w := want[l.Namespace]; l.Version != w.Version || !l.UpdatedAt.Equal(w.UpdatedAt) || l.Paused != w.Paused ||
					fmt.Sprint(deref(l.Quota), deref(l.Weight)) != fmt.Sprint(deref(w.Quota), deref(w.Weight)) {
					t.Errorf("step %d: ListSettings has %+v, want %+v", i, l, w)
				}
			}
			if !sort.StringsAreSorted(names) || len(names) != len(want) {
				t.Errorf("step %d: ListSettings namespaces %v, want the %d set, sorted", i, names, len(want))
			}
			o.h.Advance(time.Millisecond)
		}
		if l, _ := op.ListSettings(o.ctx); len(l) == 2 && !l[0].Empty() {
			t.Errorf("cleared settings of a = %+v, want Empty", l[0])
		}
	})

	testOperateFaults(t, newHarness)

	t.Run("NodeReports", func(t *testing.T) {
		o, op := setupOperator(t, newHarness)
		ttl := 10 * time.Second
		r := outbox.NodeReport{Node: "node-1", OwnedShards: 3, ShardCount: 16, Workers: 8, Busy: 2, SweepsPerSecond: 1.5, RowsPerSecond: 40,
			Plan: []outbox.PlanEntry{{Namespace: "a", Quota: 4, Weight: 1, Ceiling: 1, Claimed: 1, Pending: 9, Held: 9, Reason: "at-ceiling"}}}
		if err := op.PutNodeReport(o.ctx, r, ttl); err != nil {
			t.Fatalf("PutNodeReport: %v", err)
		}
		o.h.Advance(ttl / 2)
		r2 := outbox.NodeReport{Node: "node-0", Workers: 1}
		if err := op.PutNodeReport(o.ctx, r2, ttl); err != nil {
			t.Fatalf("PutNodeReport: %v", err)
		}
		got, err := op.NodeReports(o.ctx)
		if err != nil || len(got) != 2 || got[0].Node != "node-0" || got[1].Node != "node-1" {
			t.Fatalf("NodeReports = %+v, %v; want node-0 then node-1", got, err)
		}
		g := got[1]
		if !g.ReportedAt.Equal(o.h.Now().Add(-ttl/2)) || !g.ExpiresAt.Equal(g.ReportedAt.Add(ttl)) || g.Busy != 2 || g.RowsPerSecond != 40 ||
			len(g.Plan) != 1 || g.Plan[0] != r.Plan[0] {
			t.Errorf("NodeReports[1] = %+v, want %+v reported at %v", g, r, o.h.Now().Add(-ttl/2))
		}
		o.h.Advance(ttl / 2) // node-1's report expires now
		if got, err := op.NodeReports(o.ctx); err != nil || len(got) != 1 || got[0].Node != "node-0" {
			t.Errorf("NodeReports after node-1's ttl = %+v, %v; want node-0 only", got, err)
		}
		if err := op.PutNodeReport(o.ctx, r, ttl); err != nil { // node-1 again: replaces its report
			t.Fatalf("PutNodeReport: %v", err)
		}
		if got, err := op.NodeReports(o.ctx); err != nil || len(got) != 2 {
			t.Errorf("NodeReports after node-1 reported again = %+v, %v; want 2", got, err)
		}
	})
}
