package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testEdges pins the edges a dispatcher of one's own meets, which the
// planner never shows a store: a Limit below 1, a route no row can have,
// what an empty answer is (an empty, non-nil slice or map, never nil), the
// order of returned rows and counts, and which argument errors are typed
// as what, with which Op and Arg, reading "pkg: Op: Arg: reason".
func testEdges[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("ClaimArguments", func(t *testing.T) {
		e := setup(t, newHarness)
		ms := append(msgs("a", "q", "a", 3), msgs("b", "q", "b", 3)...)
		e.enqueue(ms...)
		before := e.snapshot(messageKeys(ms))
		long := strings.Repeat("n", outbox.MaxNamespaceBytes+1)
		for _, c := range []struct {
			name   string
			claims []backpressure.ScopedClaim
			arg    string
		}{
			{"Limit 0", []backpressure.ScopedClaim{scope("a", "q", 2), scope("b", "q", 0)}, "claims[1].Limit"},
			{"negative Limit", []backpressure.ScopedClaim{scope("a", "q", -1)}, "claims[0].Limit"},
			{"empty namespace", []backpressure.ScopedClaim{scope("a", "q", 2), scope("", "q", 1)}, "claims[1].Route.Namespace"},
			{"namespace over the limit", []backpressure.ScopedClaim{scope(long, "q", 1)}, "claims[0].Route.Namespace"},
			{"invalid UTF-8 namespace", []backpressure.ScopedClaim{scope("\xff", "q", 1)}, "claims[0].Route.Namespace"},
			{"NUL in task queue", []backpressure.ScopedClaim{scope("a", "q\x00", 1)}, "claims[0].Route.TaskQueue"},
			{"route twice", []backpressure.ScopedClaim{scope("b", "q", 1), scope("a", "q", 1), scope("b", "q", 1)}, "claims[2].Route"},
		} {
			rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, e.all, c.claims)
			e.argumentError("ClaimOutboxRowsScoped with "+c.name, err, "ClaimOutboxRowsScoped", c.arg)
			if rows != nil {
				t.Errorf("ClaimOutboxRowsScoped with %s returned rows %v with its error, want nil", c.name, e.keys(rows))
			}
			e.unchanged("ClaimOutboxRowsScoped with "+c.name, before, nil)
		}
	})

	t.Run("CountArguments", func(t *testing.T) {
		e := setup(t, newHarness)
		e.enqueue(msgs("a", "q", "a", 2)...)
		for _, n := range []int{0, -1} {
			rc, err := e.h.Store.CountPendingOutboxRows(e.ctx, e.all, n)
			e.argumentError(fmt.Sprintf("CountPendingOutboxRows(cap %d)", n), err, "CountPendingOutboxRows", "capPerRoute")
			if rc != nil {
				t.Errorf("CountPendingOutboxRows(cap %d) returned %v with its error, want nil", n, rc)
			}
		}
	})

	t.Run("EmptyAnswersAreNotNil", func(t *testing.T) {
		e := setup(t, newHarness)
		if m, err := e.h.Store.CountClaimedOutboxRows(e.ctx, e.all); err != nil || m == nil {
			t.Errorf("CountClaimedOutboxRows on an empty store = %#v, %v; want an empty, non-nil map", m, err)
		}
		if rc, err := e.h.Store.CountPendingOutboxRows(e.ctx, e.all, 10); err != nil || rc == nil || len(rc) != 0 {
			t.Errorf("CountPendingOutboxRows on an empty store = %#v, %v; want an empty, non-nil slice", rc, err)
		}
		for _, claims := range [][]backpressure.ScopedClaim{nil, {}, {scope("a", "q", 3)}} {
			if rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, e.all, claims); err != nil || rows == nil || len(rows) != 0 {
				t.Errorf("ClaimOutboxRowsScoped(%#v) on an empty store = %v, %v; want an empty, non-nil slice", claims, e.keys(rows), err)
			}
		}
		none, err := backpressure.NewOwnedShardFraction(nil, e.h.ShardCount)
		if err != nil {
			t.Fatal(err)
		}
		e.enqueue(msgs("a", "q", "a", 2)...)
		if rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, none, []backpressure.ScopedClaim{scope("a", "q", 3)}); err != nil || rows == nil || len(rows) != 0 {
			t.Errorf("ClaimOutboxRowsScoped owning no shard = %v, %v; want an empty, non-nil slice", e.keys(rows), err)
		}
		if rc, err := e.h.Store.CountPendingOutboxRows(e.ctx, none, 10); err != nil || rc == nil || len(rc) != 0 {
			t.Errorf("CountPendingOutboxRows owning no shard = %#v, %v; want an empty, non-nil slice", rc, err)
		}
	})

	t.Run("Order", func(t *testing.T) {
		// Rows come back grouped by claim, in the claims' order, oldest
		// first within a claim (of one priority; Claim/PriorityOrderProperty
		// mixes them); pending counts in route order. The routes
		// are enqueued, and claimed, out of route order, and keys descend
		// as rows get newer, so no other order passes by chance.
		e := setup(t, newHarness)
		var want []string
		for i, r := range []backpressure.Route{route("c", "q"), route("a", "z"), route("a", "b"), route("b", "q")} {
			for j := range 3 {
				k := fmt.Sprintf("k%d", 99-(3*i+j))
				e.enqueue(msg(r.Namespace, r.TaskQueue, k))
				e.h.Advance(time.Millisecond)
			}
		}
		rc, err := e.h.Store.CountPendingOutboxRows(e.ctx, e.all, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(rc, func(a, b backpressure.RouteCount) int { return a.Route.Compare(b.Route) }) || len(rc) != 4 {
			t.Errorf("CountPendingOutboxRows = %v, want 4 routes in Route.Compare order", rc)
		}
		claims := []backpressure.ScopedClaim{scope("b", "q", 2), scope("c", "q", 3), scope("a", "z", 1)}
		want = []string{"k90", "k89", "k99", "k98", "k97", "k96"}
		rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, e.all, claims)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, len(rows))
		for i, r := range rows {
			got[i] = e.h.Key(r)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ClaimOutboxRowsScoped(%v) returned %v in that order, want %v: grouped by claim in the claims' order, oldest first", claims, got, want)
		}
	})

	t.Run("OutboxArguments", func(t *testing.T) {
		o := setupStore(t, newHarness)
		o.enqueue(msgs("a", "q", "k", 2)...)
		rows := o.claimN("claim", 2, scope("a", "q", 2))
		l0, l1 := rows[0].Lease(), rows[1].Lease()
		before := o.snapshot([]string{"k-0", "k-1"})
		long := strings.Repeat("k", outbox.MaxDispatchKeyBytes+1)
		calls := []struct {
			name, op, arg string
			call          func() error
		}{
			{"Get of an empty key", "Get", "dispatchKey", func() error { _, err := o.s.Get(o.ctx, ""); return err }},
			{"Get of a key over the limit", "Get", "dispatchKey", func() error { _, err := o.s.Get(o.ctx, long); return err }},
			{"Requeue of a NUL key", "Requeue", "dispatchKeys[1]", func() error { _, err := o.s.Requeue(o.ctx, []string{"k-0", "a\x00"}); return err }},
			{"ListDead Limit -1", "ListDead", "p.Limit", func() error { _, err := o.s.ListDead(o.ctx, outbox.ListDeadParams{Limit: -1}); return err }},
			{"ListDead After invalid", "ListDead", "p.After", func() error { _, err := o.s.ListDead(o.ctx, outbox.ListDeadParams{After: "\xff"}); return err }},
			{"PurgeSettled limit -1", "PurgeSettled", "limit", func() error { _, err := o.s.PurgeSettled(o.ctx, o.h.Now(), -1); return err }},
			{"Complete naming a key twice", "Complete", "completions[1].DispatchKey", func() error {
				_, err := o.s.Complete(o.ctx, []outbox.Completion{{Lease: l0, Outcome: outbox.Settle}, {Lease: l0, Outcome: outbox.Settle}})
				return err
			}},
			{"Complete with a negative Delay", "Complete", "completions[0].Delay", func() error {
				_, err := o.s.Complete(o.ctx, []outbox.Completion{{Lease: l1, Outcome: outbox.Retry, Delay: -time.Second}})
				return err
			}},
			{"ExtendLeases of an empty key", "ExtendLeases", "leases[1].DispatchKey", func() error {
				_, err := o.s.ExtendLeases(o.ctx, []outbox.Lease{l0, {}})
				return err
			}},
		}
		for _, c := range calls {
			o.argumentError(c.name, c.call(), c.op, c.arg)
		}
		o.unchanged("calls with bad arguments", before, nil)
		if dead, err := o.s.ListDead(o.ctx, outbox.ListDeadParams{}); err != nil || dead == nil || len(dead) != 0 {
			t.Errorf("ListDead with no dead row = %v, %v; want an empty, non-nil slice", dead, err)
		}
	})

	t.Run("MessageErrors", func(t *testing.T) {
		o := setupStore(t, newHarness)
		for _, c := range []struct {
			name   string
			msg    outbox.Message
			field  string
			reason string
		}{
			{"empty namespace", outbox.Message{DispatchKey: "x", TaskQueue: "q"}, "Namespace", "is empty"},
			{"empty key", outbox.Message{Namespace: "a", TaskQueue: "q"}, "DispatchKey", "is empty"},
			{"NUL in task queue", outbox.Message{DispatchKey: "x", Namespace: "a", TaskQueue: "q\x00"}, "TaskQueue", "holds a NUL byte"},
		} {
			n, err := o.s.Enqueue(o.ctx, []outbox.Message{msg("a", "q", "ok"), c.msg})
			var me *outbox.MessageError
			switch {
			case n != 0:
				t.Errorf("Enqueue with %s inserted %d rows with its error", c.name, n)
			case !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &me):
				t.Errorf("Enqueue with %s: error %v (%T), want a *outbox.MessageError matching ErrInvalidMessage and ErrInvalidArgument", c.name, err, err)
			case me.Op != "Enqueue" || me.Index != 1 || me.Field != c.field || me.Reason != c.reason:
				t.Errorf("Enqueue with %s: MessageError{Op: %q, Index: %d, Field: %q, Reason: %q}, want {Enqueue, 1, %s, %s}", c.name, me.Op, me.Index, me.Field, me.Reason, c.field, c.reason)
			default:
				o.messageStyle("Enqueue with "+c.name, err, fmt.Sprintf("Enqueue: msgs[1].%s: %s", c.field, c.reason))
			}
		}
		o.gone("after refused batches", "ok")
	})
}

// argumentError fails unless err is an *outbox.ArgumentError (matching
// ErrInvalidArgument) of op on arg whose message reads
// "pkg: op: arg: reason".
func (e *env[R]) argumentError(step string, err error, op, arg string) {
	e.t.Helper()
	var ae *outbox.ArgumentError
	switch {
	case !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ae):
		e.t.Errorf("%s: error %v (%T), want a *outbox.ArgumentError matching ErrInvalidArgument", step, err, err)
	case ae.Op != op || ae.Arg != arg:
		e.t.Errorf("%s: ArgumentError{Op: %q, Arg: %q} (%v), want Op %q, Arg %q", step, ae.Op, ae.Arg, err, op, arg)
	case ae.Reason == "":
		e.t.Errorf("%s: ArgumentError %v has no Reason", step, err)
	default:
		e.messageStyle(step, err, op+": "+arg+": "+ae.Reason)
	}
}

// messageStyle fails unless err's message is "pkg: " then tail, pkg being
// Harness.ErrorPrefix when set: the typed error's own message, not wrapped
// in more text.
func (e *env[R]) messageStyle(step string, err error, tail string) {
	e.t.Helper()
	msg := err.Error()
	pkg, ok := strings.CutSuffix(msg, ": "+tail)
	switch {
	case !ok || pkg == "" || strings.Contains(pkg, ": "):
		e.t.Errorf("%s: message %q, want \"<pkg>: %s\"", step, msg, tail)
	case e.h.ErrorPrefix != "" && pkg != e.h.ErrorPrefix:
		e.t.Errorf("%s: message %q, want %q", step, msg, e.h.ErrorPrefix+": "+tail)
	}
}
