package validate_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// text draws strings rich in the bytes the rules are about: NUL, invalid
// UTF-8, multi-byte runes, and lengths about the limits.
func text() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "\x00", "\xff", "é", "名", "\xc3", "/"}), 0, 8).Draw(t, "parts")
		s := strings.Join(parts, "")
		if rapid.IntRange(0, 9).Draw(t, "long") == 0 {
			s += strings.Repeat("k", outbox.MaxDispatchKeyBytes+rapid.IntRange(-2, 2).Draw(t, "around"))
		}
		return s
	})
}

// Key refuses exactly the dispatch keys Message.Validate refuses: a store
// never looks up a key it could not have stored, nor refuses one it could.
func TestKeyMatchesMessageValidate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := text().Draw(t, "key")
		err := outbox.Message{DispatchKey: k, Namespace: "n"}.Validate()
		var me *outbox.MessageError
		refused := errors.As(err, &me) && me.Field == "DispatchKey"
		if got := validate.Key(k); (got != "") != refused {
			t.Fatalf("Key(%q) = %q, but Message.Validate says %v", k, got, err)
		}
		if refused && validate.Key(k) != me.Reason {
			t.Fatalf("Key(%q) = %q, Message.Validate's reason %q", k, validate.Key(k), me.Reason)
		}
	})
}

// Claims against a naive reference: refused exactly when some claim has a
// Limit below 1, a route Route.Validate refuses, or a route an earlier claim
// named, and then it names the first such claim.
func TestClaimsMatchesReference(t *testing.T) {
	c := validate.Call{Pkg: "p", Op: "Claim"}
	rapid.Check(t, func(t *rapid.T) {
		claims := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) backpressure.ScopedClaim {
			return backpressure.ScopedClaim{
				Route: backpressure.Route{
					Namespace: rapid.SampledFrom([]string{"", "a", "b", "\x00", "\xff"}).Draw(t, "namespace"),
					TaskQueue: rapid.SampledFrom([]string{"", "q", "\x00"}).Draw(t, "task queue"),
				},
				Limit: rapid.IntRange(-1, 3).Draw(t, "limit"),
			}
		}), 0, 6).Draw(t, "claims")
		if rapid.Bool().Draw(t, "sorted") {
			claims = sortedUnique(claims)
		}
		want := -1
		seen := map[backpressure.Route]bool{}
		for i, cl := range claims {
			if cl.Limit < 1 || cl.Route.Validate() != nil || seen[cl.Route] {
				want = i
				break
			}
			seen[cl.Route] = true
		}
		err := c.Claims(claims)
		var ae *outbox.ArgumentError
		switch {
		case want < 0 && err != nil:
			t.Fatalf("Claims(%v) = %v, want nil", claims, err)
		case want >= 0 && (!errors.As(err, &ae) || !errors.Is(err, outbox.ErrInvalidArgument)):
			t.Fatalf("Claims(%v) = %v, want an *outbox.ArgumentError", claims, err)
		case want >= 0 && !strings.HasPrefix(ae.Arg, "claims["+strconv.Itoa(want)+"]."):
			t.Fatalf("Claims(%v) names %s, want claims[%d]", claims, ae.Arg, want)
		case want >= 0 && err.Error() != "p: Claim: "+ae.Arg+": "+ae.Reason:
			t.Fatalf("Claims(%v) message %q, want \"p: Claim: Arg: Reason\"", claims, err)
		}
	})
}

func sortedUnique(cs []backpressure.ScopedClaim) []backpressure.ScopedClaim {
	out := []backpressure.ScopedClaim{}
	for _, c := range cs {
		i := 0
		for i < len(out) && out[i].Route.Compare(c.Route) < 0 {
			i++
		}
		if i < len(out) && out[i].Route == c.Route {
			continue
		}
		out = append(out[:i], append([]backpressure.ScopedClaim{c}, out[i:]...)...)
	}
	return out
}

// The messages read "pkg: Op: field: what is wrong", and a MessageError
// names the call that refused it.
func TestMessageStyle(t *testing.T) {
	c := validate.Call{Pkg: "pgstore", Op: "Enqueue"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{c.Messages([]outbox.Message{{DispatchKey: "k", TaskQueue: "q"}}), "pgstore: Enqueue: msgs[0].Namespace: is empty"},
		{c.Messages([]outbox.Message{{DispatchKey: "k", Namespace: "n"}, {Namespace: "n"}}), "pgstore: Enqueue: msgs[1].DispatchKey: is empty"},
		{c.DispatchKey("dispatchKey", "a\x00"), "pgstore: Enqueue: dispatchKey: holds a NUL byte"},
		{c.Positive("capPerRoute", 0), "pgstore: Enqueue: capPerRoute: 0 is below 1"},
		{c.CountParams(backpressure.CountParams{CapPerRoute: 1, Namespaces: -1}), "pgstore: Enqueue: p.Namespaces: -1 is negative"},
		{c.Leases([]outbox.Lease{{DispatchKey: "k"}, {DispatchKey: "k"}}), `pgstore: Enqueue: leases[1].DispatchKey: "k" is also leases[0]`},
		{outbox.Message{}.Validate(), "outbox: DispatchKey: is empty"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("message %v, want %q", tc.err, tc.want)
		}
	}
	if err := c.CountParams(backpressure.CountParams{CapPerRoute: 1, After: "\xff"}); err != nil {
		t.Errorf("CountParams with Namespaces 0 checked the After it ignores: %v", err)
	}
}

// Served and TaskQueue are the window claim's walk (see the window claim of
// backpressure.OutboxStore), checked against it read literally: walk the
// namespaces from the first after After, wrapping around, take one from
// each of the first Namespaces, if more are eligible; a namespace's route
// is the first task queue after its cursor, wrapping around to the
// smallest.
func TestWindowWalk(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"a", "b", "ba", "c", "d", "e"}
		eligible := []string{}
		for _, n := range names {
			if rapid.Bool().Draw(t, "eligible "+n) {
				eligible = append(eligible, n)
			}
		}
		w := validate.Window{
			After:      rapid.SampledFrom([]string{"", "a", "b", "bb", "e", "z"}).Draw(t, "after"),
			Namespaces: rapid.IntRange(1, 7).Draw(t, "namespaces"),
			RouteAfter: map[string]string{},
		}
		var want []string
		if len(eligible) > w.Namespaces {
			// The names after After first, then the others, each in order.
			for _, afterAfter := range []bool{true, false} {
				for _, n := range eligible {
					if (n > w.After) == afterAfter && len(want) < w.Namespaces {
						want = append(want, n)
					}
				}
			}
			slices.Sort(want)
		}
		if got := w.Served(eligible); !slices.Equal(got, want) {
			t.Fatalf("%+v.Served(%v) = %v, want %v", w, eligible, got, want)
		}

		tqs := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"", "a", "b", "c"}), 1, 4, rapid.ID[string]).Draw(t, "task queues")
		slices.Sort(tqs)
		if rapid.Bool().Draw(t, "cursor") {
			w.RouteAfter["a"] = rapid.SampledFrom([]string{"", "a", "b", "bb", "c", "d"}).Draw(t, "route cursor")
		}
		want1 := tqs[0]
		if cur, ok := w.RouteAfter["a"]; ok {
			for _, tq := range tqs {
				if tq > cur {
					want1 = tq
					break
				}
			}
		}
		if got := w.TaskQueue("a", tqs); got != want1 {
			t.Fatalf("TaskQueue(a, %v) with cursor %v = %q, want %q", tqs, w.RouteAfter, got, want1)
		}
	})
}
