package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// testMessages checks Enqueue against [outbox.Message.Validate]: every
// limit refused with a *MessageError and nothing of the batch inserted,
// the limits themselves accepted; and, as a property, that any batch Enqueue
// accepts is claimed in full, each row exactly once, by repeated Sweeps.
func testMessages[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("Limits", func(t *testing.T) {
		o := setupStore(t, newHarness)
		long := func(n int) string { return strings.Repeat("x", n) }
		for _, c := range []struct {
			field string
			m     outbox.Message
		}{
			{"DispatchKey", outbox.Message{Namespace: "a"}},
			{"DispatchKey", outbox.Message{DispatchKey: long(outbox.MaxDispatchKeyBytes + 1), Namespace: "a"}},
			{"DispatchKey", outbox.Message{DispatchKey: "k\xff", Namespace: "a"}},
			{"DispatchKey", outbox.Message{DispatchKey: "k\x00", Namespace: "a"}},
			{"Namespace", outbox.Message{DispatchKey: "k", Namespace: ""}},
			{"Namespace", outbox.Message{DispatchKey: "k", Namespace: long(outbox.MaxNamespaceBytes + 1)}},
			{"Namespace", outbox.Message{DispatchKey: "k", Namespace: "a\xc3"}},
			{"Namespace", outbox.Message{DispatchKey: "k", Namespace: "a\x00"}},
			{"TaskQueue", outbox.Message{DispatchKey: "k", Namespace: "a", TaskQueue: long(outbox.MaxTaskQueueBytes + 1)}},
			{"TaskQueue", outbox.Message{DispatchKey: "k", Namespace: "a", TaskQueue: "\xff"}},
			{"TaskQueue", outbox.Message{DispatchKey: "k", Namespace: "a", TaskQueue: "q\x00"}},
			{"Payload", outbox.Message{DispatchKey: "k", Namespace: "a", Payload: make([]byte, outbox.MaxPayloadBytes+1)}},
			{"MaxAttempts", outbox.Message{DispatchKey: "k", Namespace: "a", MaxAttempts: -1}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: map[string]string{"": "v"}}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: map[string]string{"a b": "v"}}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: map[string]string{long(outbox.MaxHeaderKeyBytes + 1): "v"}}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: map[string]string{"k": "v\x00"}}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: map[string]string{"k": "\xff"}}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: map[string]string{"k": long(outbox.MaxHeaderBytes)}}},
			{"Headers", outbox.Message{DispatchKey: "k", Namespace: "a", Headers: manyHeaders(outbox.MaxHeaders + 1)}},
		} {
			batch := []outbox.Message{msg("a", "q", "before"), c.m, msg("a", "q", "after")}
			n, err := o.h.Enqueue(o.ctx, batch)
			var me *outbox.MessageError
			switch {
			case !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, outbox.ErrInvalidArgument):
				t.Errorf("Enqueue with a bad %s (%.40q) = %d, %v; want an error matching ErrInvalidMessage and ErrInvalidArgument", c.field, c.m.DispatchKey, n, err)
			case !errors.As(err, &me):
				t.Errorf("Enqueue with a bad %s = %v (%T), want a *outbox.MessageError", c.field, err, err)
			case me.Index != 1 || me.Field != c.field:
				t.Errorf("Enqueue with a bad %s: MessageError names msgs[%d].%s, want msgs[1].%s", c.field, me.Index, me.Field, c.field)
			}
			if n != 0 {
				t.Errorf("Enqueue with a bad %s inserted %d", c.field, n)
			}
			if st := o.stats(); st.Total != 0 {
				t.Fatalf("Enqueue with a bad %s left rows behind: %+v", c.field, st)
			}
		}
	})

	t.Run("AtTheLimits", func(t *testing.T) {
		o := setupStore(t, newHarness)
		// Longest of each, in multi-byte runes where they fit exactly.
		key := strings.Repeat("é", outbox.MaxDispatchKeyBytes/2)
		ns := strings.Repeat("x", outbox.MaxNamespaceBytes)
		tq := strings.Repeat("€", outbox.MaxTaskQueueBytes/3)
		headers := manyHeaders(outbox.MaxHeaders)
		headers["h00"] = strings.Repeat("v", outbox.MaxHeaderBytes-headerBytes(headers)+len(headers["h00"]))
		ms := []outbox.Message{
			{DispatchKey: key, Namespace: ns, TaskQueue: tq, MaxAttempts: 1, Headers: headers},
			{DispatchKey: "nil payload", Namespace: "a"},
		}
		if n := o.enqueue(ms...); n != 2 {
			t.Fatalf("Enqueue at the limits inserted %d, want 2", n)
		}
		if g := o.get(key); g.Namespace != ns || g.TaskQueue != tq || g.MaxAttempts != 1 || !maps.Equal(g.Headers, headers) {
			t.Errorf("row at the limits stored on %q/%q with MaxAttempts %d and %d headers", g.Namespace, g.TaskQueue, g.MaxAttempts, len(g.Headers))
		}
		if g := o.get("nil payload"); g.Payload == nil || len(g.Payload) != 0 || g.TaskQueue != "" || g.Headers != nil {
			t.Errorf("a nil payload is stored as %#v on task queue %q with headers %v, want empty, non-nil, on \"\", none", g.Payload, g.TaskQueue, g.Headers)
		}
		rows := o.claimN("claim both", 2, scope(ns, tq, 1), scope("a", "", 1))
		if got := rowKeys(rows); !slices.Contains(got, key) {
			t.Errorf("claim at the limits = %q, want the longest key among them", got)
		}
	})

	t.Run("AcceptedBatchesDrainBySweep", func(t *testing.T) {
		o := setupStore(t, newHarness)
		batch := 0
		rapid.Check(t, func(rt *rapid.T) {
			o.settleEverything(rt) // what a failed (or shrunk) case left behind
			batch++
			prefix := "b" + strconv.Itoa(batch) + "-"
			ms := rapid.SliceOfN(genMessage(prefix), 0, 30).Draw(rt, "messages")
			want := map[string]outbox.Message{} // the first message of each key wins
			for _, m := range ms {
				if err := m.Validate(); err != nil {
					rt.Fatalf("generated an invalid message %+q: %v", m, err)
				}
				if _, dup := want[m.DispatchKey]; !dup {
					want[m.DispatchKey] = m
				}
			}
			n, err := o.s.Enqueue(o.ctx, ms)
			if err != nil || n != len(want) {
				rt.Fatalf("Enqueue(%d messages, %d keys) = %d, %v", len(ms), len(want), n, err)
			}
			cfg := backpressure.Config{
				BatchSize:    rapid.IntRange(1, 12).Draw(rt, "batch size"),
				DefaultQuota: rapid.SampledFrom([]int{backpressure.Unlimited, 1, 2, 5}).Draw(rt, "quota"),
			}
			bp, err := backpressure.New(cfg, o.all)
			if err != nil {
				rt.Fatalf("backpressure.New(%+v): %v", cfg, err)
			}
			claimed := map[string]bool{}
			for sweep := 0; len(claimed) < len(want); sweep++ {
				if sweep > len(want) {
					rt.Fatalf("after %d sweeps %d of %d rows claimed", sweep, len(claimed), len(want))
				}
				rows, plan, err := backpressure.Sweep(o.ctx, bp, o.h.Store)
				if err != nil {
					rt.Fatalf("sweep %d: %v", sweep, err)
				}
				if len(rows) == 0 {
					rt.Fatalf("sweep %d claimed nothing with %d of %d rows left; plan %+v", sweep, len(want)-len(claimed), len(want), plan)
				}
				cs := make([]outbox.Completion, len(rows))
				for i, r := range rows {
					m, ok := want[r.DispatchKey]
					switch {
					case !ok:
						rt.Fatalf("sweep %d claimed %+q, not of this batch", sweep, r.DispatchKey)
					case claimed[r.DispatchKey]:
						rt.Fatalf("sweep %d claimed %+q a second time", sweep, r.DispatchKey)
					case r.Namespace != m.Namespace || r.TaskQueue != m.TaskQueue || string(r.Payload) != string(m.Payload):
						rt.Fatalf("row %+q claimed as %+q/%+q %q, enqueued as %+q/%+q %q", r.DispatchKey, r.Namespace, r.TaskQueue, r.Payload, m.Namespace, m.TaskQueue, m.Payload)
					case !maps.Equal(r.Headers, m.Headers) || (r.Headers != nil && len(r.Headers) == 0):
						rt.Fatalf("row %+q claimed with headers %q, enqueued with %q (none must read back as nil)", r.DispatchKey, r.Headers, m.Headers)
					}
					claimed[r.DispatchKey] = true
					cs[i] = outbox.SettleRow(r)
				}
				res, err := o.s.Complete(o.ctx, cs)
				if err != nil {
					rt.Fatalf("sweep %d: Complete: %v", sweep, err)
				}
				for i, r := range res {
					if r.Err != nil {
						rt.Fatalf("sweep %d: settling %+q: %v", sweep, cs[i].DispatchKey, r.Err)
					}
				}
			}
			if st := o.stats(); st.Pending+st.Scheduled+st.Claimed+st.Expired != 0 {
				rt.Fatalf("after draining: Stats = %+v, want every row settled", st)
			}
		})
	})
}

// oddPieces are text a store must keep byte for byte: quotes, wildcards,
// escapes, spaces, separators, multi-byte runes.
var oddPieces = []string{"a", "Z", " ", "  ", "'", `"`, "`", "%", "_", "*", "?", `\`, "/", ".", ",", ";", "-", "\t", "\n", "é", "名前", "😀", "\u200b", "\ufeff", "[1]", "{}", "$1", "::", "--", "0"}

// genText draws valid route or key text of at most max bytes (never
// empty when nonEmpty): odd pieces, arbitrary runes without NUL, or text
// padded to exactly max bytes.
func genText(max int, nonEmpty bool) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		var s string
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 0, 1:
			s = strings.Join(rapid.SliceOfN(rapid.SampledFrom(oddPieces), 0, 6).Draw(t, "pieces"), "")
		case 2:
			s = strings.ReplaceAll(rapid.StringN(0, 12, -1).Draw(t, "runes"), "\x00", "")
		default:
			s = strings.Join(rapid.SliceOfN(rapid.SampledFrom(oddPieces), 0, 3).Draw(t, "pieces"), "")
			s += strings.Repeat("x", max) // to max bytes exactly, below
		}
		for len(s) > max {
			_, size := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-size]
		}
		if s == "" && nonEmpty {
			s = "n"
		}
		return s
	})
}

// genMessage draws a valid message whose key starts with prefix. Few
// namespaces and task queues, so routes hold several rows and keys repeat.
func genMessage(prefix string) *rapid.Generator[outbox.Message] {
	return rapid.Custom(func(t *rapid.T) outbox.Message {
		m := outbox.Message{
			DispatchKey: prefix + genText(outbox.MaxDispatchKeyBytes-len(prefix), false).Draw(t, "key"),
			Namespace:   genText(outbox.MaxNamespaceBytes, true).Draw(t, "namespace"),
			TaskQueue:   genText(outbox.MaxTaskQueueBytes, false).Draw(t, "task queue"),
			Payload:     []byte(rapid.StringN(0, 8, -1).Draw(t, "payload")),
		}
		if rapid.Bool().Draw(t, "repeat route") {
			m.Namespace, m.TaskQueue = "common", ""
		}
		if rapid.Bool().Draw(t, "headers") {
			m.Headers = rapid.MapOfN(rapid.StringMatching(`[A-Za-z0-9._-]{1,12}`), genText(20, false), 0, 4).Draw(t, "headers")
		}
		return m
	})
}

// manyHeaders returns n headers h00, h01, … with short values.
func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("h%02d", i)] = "v"
	}
	return h
}

// headerBytes is the size outbox.MaxHeaderBytes bounds.
func headerBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	return n
}

// settleEverything expires every lease and settles every row left
// claimable, one Complete per claim, so a property's case starts with no
// row pending or claimed.
func (o *ox) settleEverything(rt *rapid.T) {
	o.settleClaimable(rt, o.h.Lease+time.Millisecond, func(rows []outbox.Row) {
		cs := make([]outbox.Completion, len(rows))
		for i, r := range rows {
			cs[i] = outbox.SettleRow(r)
		}
		if _, err := o.s.Complete(o.ctx, cs); err != nil {
			rt.Fatalf("Complete: %v", err)
		}
	})
}
