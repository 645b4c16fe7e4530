package sqlitestore

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"modernc.org/sqlite"
)

// probed counts, per namespace, the outbox index entries the count
// subquery examined through the test-only SQL function window_probe.
var probed = struct {
	sync.Mutex
	ns map[string]int
}{ns: map[string]int{}}

func init() {
	// window_probe(namespace) records that the count subquery looked at a
	// row of namespace and lets it through.
	sqlite.MustRegisterScalarFunction("window_probe", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		ns, ok := args[0].(string)
		if !ok {
			return nil, errors.New("window_probe: namespace is not text")
		}
		probed.Lock()
		probed.ns[ns]++
		probed.Unlock()
		return int64(1), nil
	})
}

// TestWindowProbesOnlyWalkedNamespaces checks that the window walk counts
// no route of a namespace beyond the window: with a probe in the count
// subquery's filter (where the shard filter goes), only the namespaces the
// walk passes through (the window's, and those without claimable rows
// between them) are ever looked at, and the walk's result is the window.
func TestWindowProbesOnlyWalkedNamespaces(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	ctx := t.Context()
	var ms []outbox.Message
	for i := 0; i < 10; i++ {
		ns := "n" + strconv.Itoa(i)
		for _, tq := range []string{"q1", "q2", "q3"} {
			for j := 0; j < 3; j++ {
				ms = append(ms, outbox.Message{DispatchKey: ns + "/" + tq + "/" + strconv.Itoa(j), Namespace: ns, TaskQueue: tq, Payload: []byte("p")})
			}
		}
	}
	if _, err := s.Enqueue(ctx, ms); err != nil {
		t.Fatal(err)
	}
	// n3 and n7 have no claimable row: every row is under a live lease.
	var claims []backpressure.ScopedClaim
	for _, ns := range []string{"n3", "n7"} {
		for _, tq := range []string{"q1", "q2", "q3"} {
			claims = append(claims, backpressure.ScopedClaim{Route: backpressure.Route{Namespace: ns, TaskQueue: tq}, Limit: 100})
		}
	}
	if rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, allShards(t, s), claims); err != nil || len(rows) != 18 {
		t.Fatalf("claim n3 and n7: %d rows, %v; want 18", len(rows), err)
	}

	for _, c := range []struct {
		after      string
		namespaces int
		window     []string // the namespaces returned
		walked     []string // the namespaces the walk may look at
	}{
		{"", 1, []string{"n0"}, []string{"n0"}},
		{"", 3, []string{"n0", "n1", "n2"}, []string{"n0", "n1", "n2"}},
		{"n1", 3, []string{"n2", "n4", "n5"}, []string{"n2", "n3", "n4", "n5"}},
		{"n2", 1, []string{"n4"}, []string{"n3", "n4"}},
		{"n8", 2, []string{"n0", "n9"}, []string{"n9", "n0"}},
		{"n6", 3, []string{"n0", "n8", "n9"}, []string{"n7", "n8", "n9", "n0"}},
		{"n5", 100, []string{"n0", "n1", "n2", "n4", "n5", "n6", "n8", "n9"}, []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}},
	} {
		probed.Lock()
		clear(probed.ns)
		probed.Unlock()
		tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		w := windowWalk{ctx: ctx, s: s, tx: tx, cond: " AND window_probe(o.namespace) = 1",
			args: []any{nanos(s.now()), 2, nil}, want: c.namespaces, out: []backpressure.RouteCount{}}
		err = w.run(c.after)
		_ = tx.Rollback()
		if err != nil {
			t.Fatalf("walk(after %q, %d namespaces): %v", c.after, c.namespaces, err)
		}
		var got []string
		for _, rc := range w.out {
			if len(got) == 0 || got[len(got)-1] != rc.Route.Namespace {
				got = append(got, rc.Route.Namespace)
			}
			if rc.Count != 2 {
				t.Errorf("walk(after %q, %d namespaces): %v counted %d, want 2 (the cap)", c.after, c.namespaces, rc.Route, rc.Count)
			}
		}
		if !slices.Equal(got, c.window) || len(w.out) != 3*len(c.window) {
			t.Errorf("walk(after %q, %d namespaces) = %v, want every route of %v", c.after, c.namespaces, w.out, c.window)
		}
		probed.Lock()
		looked := slices.Sorted(maps.Keys(probed.ns))
		probed.Unlock()
		for _, ns := range looked {
			if !slices.Contains(c.walked, ns) {
				t.Errorf("walk(after %q, %d namespaces) counted rows of %s, beyond the window (looked at %v)", c.after, c.namespaces, ns, looked)
			}
		}
	}
}

// TestCountOutboxRowsErrors checks CountOutboxRows's typed errors, and that
// it refuses the claimed counts with backpressure.ErrNotSupported at once,
// even on a closed store.
func TestCountOutboxRowsErrors(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	all := allShards(t, s)
	for _, p := range []backpressure.CountParams{{CapPerRoute: 0, Namespaces: 1}, {CapPerRoute: 0}, {CapPerRoute: 1, Namespaces: -1}} {
		_, _, err := claimerOf(s).CountOutboxRows(t.Context(), all, p)
		var ae *outbox.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, outbox.ErrInvalidArgument) || ae.Op != "CountOutboxRows" {
			t.Errorf("CountOutboxRows(%+v) = %v, want an *outbox.ArgumentError of CountOutboxRows", p, err)
		}
	}
	other, err := backpressure.AllShards(s.ShardCount() + 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []backpressure.CountParams{{CapPerRoute: 1, Namespaces: 1}, {CapPerRoute: 1}} {
		_, _, err = claimerOf(s).CountOutboxRows(t.Context(), other, p)
		var se *outbox.ShardCountError
		if !errors.As(err, &se) || !errors.Is(err, outbox.ErrShardCountMismatch) {
			t.Errorf("CountOutboxRows(shard count mismatch, %+v) = %v, want a *outbox.ShardCountError", p, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []backpressure.CountParams{{CapPerRoute: 1, Claimed: true}, {CapPerRoute: 1, Namespaces: 3, Claimed: true}} {
		if claimed, pending, err := claimerOf(s).CountOutboxRows(t.Context(), all, p); !errors.Is(err, backpressure.ErrNotSupported) || claimed != nil || pending != nil {
			t.Errorf("CountOutboxRows(%+v) on a closed store = %v, %v, %v; want ErrNotSupported", p, claimed, pending, err)
		}
	}
}
