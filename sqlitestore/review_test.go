package sqlitestore

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestEnqueueRejectsTextAClaimCannotName: a dispatch key, namespace or task
// queue that is not valid UTF-8 or holds a NUL byte is refused with an
// *outbox.MessageError naming the message, and nothing is written. (A claim
// names routes as JSON, which replaces invalid bytes, so such a row would
// be counted pending but never claimed.)
func TestEnqueueRejectsTextAClaimCannotName(t *testing.T) {
	ctx := t.Context()
	s := openT(t, ":memory:", Options{})
	for _, bad := range []string{"\xff", "a\xc3", "a\x00b"} {
		for _, m := range []outbox.Message{
			{DispatchKey: bad, Namespace: "n", TaskQueue: "q"},
			{DispatchKey: "k", Namespace: bad, TaskQueue: "q"},
			{DispatchKey: "k", Namespace: "n", TaskQueue: bad},
		} {
			ok := outbox.Message{DispatchKey: "ok", Namespace: "n", TaskQueue: "q"}
			n, err := s.Enqueue(ctx, []outbox.Message{ok, m})
			var me *outbox.MessageError
			if !errors.As(err, &me) || !errors.Is(err, outbox.ErrInvalidMessage) || me.Index != 1 || n != 0 {
				t.Errorf("Enqueue(ok, %+v) = %d, %v; want 0 and an *outbox.MessageError on msgs[1]", m, n, err)
			}
		}
	}
	if st, err := s.Stats(ctx); err != nil || st.Total != 0 {
		t.Errorf("Stats after rejected batches = %+v, %v; want an empty store", st, err)
	}
	// Valid text of any kind is counted and claimable, byte for byte.
	odd := []outbox.Message{
		{DispatchKey: "ключ", Namespace: "名前", TaskQueue: "очередь"},
		{DispatchKey: `k"\`, Namespace: `n"\`, TaskQueue: `q'"\[]`},
		{DispatchKey: "e", Namespace: "n", TaskQueue: ""},
	}
	if n, err := s.Enqueue(ctx, odd); err != nil || n != len(odd) {
		t.Fatalf("Enqueue(odd but valid names) = %d, %v", n, err)
	}
	counts, err := claimerOf(s).CountPendingOutboxRows(ctx, allShards(t, s), 10)
	if err != nil || len(counts) != len(odd) {
		t.Fatalf("CountPendingOutboxRows = %v, %v; want %d routes", counts, err, len(odd))
	}
	var claims []backpressure.ScopedClaim
	for _, c := range counts {
		claims = append(claims, backpressure.ScopedClaim{Route: c.Route, Limit: 1})
	}
	if rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, allShards(t, s), claims); err != nil || len(rows) != len(odd) {
		t.Errorf("claim of every counted route = %d rows, %v; want %d", len(rows), err, len(odd))
	}
}

// TestClaimRejectsBadRoutes: a claim whose route cannot name a row, or
// names a route twice, fails with an *outbox.ArgumentError and claims nothing,
// even for its valid scopes.
func TestClaimRejectsBadRoutes(t *testing.T) {
	ctx := t.Context()
	s := openT(t, ":memory:", Options{})
	var ms []outbox.Message
	for i := 0; i < 4; i++ {
		ms = append(ms, outbox.Message{DispatchKey: "a" + strconv.Itoa(i), Namespace: "a", TaskQueue: "q"},
			outbox.Message{DispatchKey: "b" + strconv.Itoa(i), Namespace: "b", TaskQueue: "q"})
	}
	if _, err := s.Enqueue(ctx, ms); err != nil {
		t.Fatal(err)
	}
	a, b := backpressure.Route{Namespace: "a", TaskQueue: "q"}, backpressure.Route{Namespace: "b", TaskQueue: "q"}
	for name, c := range map[string]struct {
		claims []backpressure.ScopedClaim
		arg    string
	}{
		"repeated route":          {[]backpressure.ScopedClaim{{Route: a, Limit: 2}, {Route: b, Limit: 1}, {Route: a, Limit: 2}}, "claims[2].Route"},
		"invalid UTF-8 namespace": {[]backpressure.ScopedClaim{{Route: a, Limit: 2}, {Route: backpressure.Route{Namespace: "\xff", TaskQueue: "q"}, Limit: 1}}, "claims[1].Route.Namespace"},
		"NUL in task queue":       {[]backpressure.ScopedClaim{{Route: a, Limit: 2}, {Route: backpressure.Route{Namespace: "b", TaskQueue: "q\x00"}, Limit: 1}}, "claims[1].Route.TaskQueue"},
	} {
		rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, allShards(t, s), c.claims)
		var arg *outbox.ArgumentError
		if !errors.As(err, &arg) || !errors.Is(err, outbox.ErrInvalidArgument) || arg.Arg != c.arg || len(rows) != 0 {
			t.Errorf("%s: claim = %d rows, %v; want an *outbox.ArgumentError on %s and no rows", name, len(rows), err, c.arg)
		}
	}
	if st, err := s.Stats(ctx); err != nil || st.Pending != len(ms) || st.Total != len(ms) {
		t.Errorf("Stats after rejected claims = %+v, %v; want all %d rows pending", st, err, len(ms))
	}
	for _, m := range ms {
		if r, err := s.Get(ctx, m.DispatchKey); err != nil || r.Attempts != 0 || r.Token != 0 {
			t.Errorf("Get(%q) after rejected claims = %+v, %v; want never claimed", m.DispatchKey, r, err)
		}
	}
}

// TestHugeDurationsRefused: a lease or retry delay beyond the shared
// bounds (outbox.MaxLease, outbox.MaxDelay) is a typed error, never a
// clamped time; the bounds themselves are stored exactly.
func TestHugeDurationsRefused(t *testing.T) {
	ctx := t.Context()
	for _, lease := range []time.Duration{math.MaxInt64, outbox.MaxLease + time.Nanosecond} {
		if _, err := Open(ctx, ":memory:", Options{Lease: lease}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Open with Lease %v = %v, want ErrInvalidArgument", lease, err)
		}
	}
	clock := storetest.NewClock()
	s := openT(t, ":memory:", Options{Now: clock.Now, Lease: outbox.MaxLease})
	f := allShards(t, s)
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "a", Namespace: "n"}}); err != nil {
		t.Fatal(err)
	}
	rows, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, f, 1)
	if err != nil || len(rows) != 1 || !rows[0].LeaseExpiresAt.Equal(clock.Now().Add(outbox.MaxLease)) {
		t.Fatalf("claim with Lease MaxLease = %v, %v; want one row leased until %v", rows, err, clock.Now().Add(outbox.MaxLease))
	}
	for _, delay := range []time.Duration{math.MaxInt64, outbox.MaxDelay + time.Nanosecond} {
		if err := s.Retry(ctx, rows[0].Lease(), delay, nil); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Retry(%v) = %v, want ErrInvalidArgument", delay, err)
		}
	}
	if err := s.Retry(ctx, rows[0].Lease(), outbox.MaxDelay, nil); err != nil {
		t.Fatalf("Retry(MaxDelay): %v", err)
	}
	if r := getT(t, s, "a"); r.State != outbox.StatePending || !r.RunAt.Equal(clock.Now().Add(outbox.MaxDelay)) {
		t.Errorf("row after Retry(MaxDelay) = %v RunAt %v, want pending at %v", r.State, r.RunAt, clock.Now().Add(outbox.MaxDelay))
	}
}

// TestManyShardsPartlyOwned: a node owning part of a large shard count (more
// shards than SQLite has bound parameters) counts and claims exactly the
// rows on its shards.
func TestManyShardsPartlyOwned(t *testing.T) {
	ctx := t.Context()
	const shardCount = 70_000
	s := openT(t, ":memory:", Options{ShardCount: shardCount})
	var even, odd []int
	for i := 0; i < shardCount; i++ {
		if i%2 == 0 {
			even = append(even, i)
		} else {
			odd = append(odd, i)
		}
	}
	evenF, err := backpressure.NewOwnedShardFraction(even, shardCount)
	if err != nil {
		t.Fatal(err)
	}
	oddF, err := backpressure.NewOwnedShardFraction(odd, shardCount)
	if err != nil {
		t.Fatal(err)
	}
	var ms []outbox.Message
	wantEven := map[backpressure.Route]int{}
	onEven := 0
	for i := 0; i < 300; i++ {
		m := outbox.Message{DispatchKey: "k" + strconv.Itoa(i), Namespace: "n" + strconv.Itoa(i%3), TaskQueue: "q"}
		ms = append(ms, m)
		if backpressure.ShardFor(m.DispatchKey, shardCount)%2 == 0 {
			wantEven[backpressure.Route{Namespace: m.Namespace, TaskQueue: m.TaskQueue}]++
			onEven++
		}
	}
	if _, err := s.Enqueue(ctx, ms); err != nil {
		t.Fatal(err)
	}
	counts, err := claimerOf(s).CountPendingOutboxRows(ctx, evenF, 1000)
	if err != nil {
		t.Fatalf("CountPendingOutboxRows(even shards): %v", err)
	}
	var claims []backpressure.ScopedClaim
	for _, c := range counts {
		if wantEven[c.Route] != c.Count {
			t.Errorf("CountPendingOutboxRows(even shards): %v has %d, want %d", c.Route, c.Count, wantEven[c.Route])
		}
		claims = append(claims, backpressure.ScopedClaim{Route: c.Route, Limit: 1000})
	}
	if len(counts) != len(wantEven) {
		t.Errorf("CountPendingOutboxRows(even shards) = %v, want %v", counts, wantEven)
	}
	rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, evenF, claims)
	if err != nil || len(rows) != onEven {
		t.Fatalf("claim on even shards = %d rows, %v; want %d", len(rows), err, onEven)
	}
	for _, r := range rows {
		if r.Shard%2 != 0 {
			t.Errorf("claim on even shards returned %q on shard %d", r.DispatchKey, r.Shard)
		}
	}
	if c, err := claimerOf(s).CountClaimedOutboxRows(ctx, evenF); err != nil || c["n0"]+c["n1"]+c["n2"] != onEven {
		t.Errorf("CountClaimedOutboxRows(even shards) = %v, %v; want %d in all", c, err, onEven)
	}
	if c, err := claimerOf(s).CountClaimedOutboxRows(ctx, oddF); err != nil || len(c) != 0 {
		t.Errorf("CountClaimedOutboxRows(odd shards) = %v, %v; want none", c, err)
	}
	rest, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, oddF, 1000)
	if err != nil || len(rest) != len(ms)-onEven {
		t.Fatalf("unscoped claim on odd shards = %d rows, %v; want %d", len(rest), err, len(ms)-onEven)
	}
	for _, r := range rest {
		if r.Shard%2 != 1 {
			t.Errorf("claim on odd shards returned %q on shard %d", r.DispatchKey, r.Shard)
		}
	}
}

// TestSettlePrunesRoutes: outbox_routes holds exactly the routes with an
// unsettled row; settling a route's last one drops it, enqueueing adds it
// back, and retries and expired leases keep it.
func TestSettlePrunesRoutes(t *testing.T) {
	ctx := t.Context()
	clock := storetest.NewClock()
	s := openT(t, ":memory:", Options{Now: clock.Now, Lease: time.Second})
	f := allShards(t, s)
	routes := func() []string {
		t.Helper()
		rows, err := s.reader.QueryContext(ctx, `SELECT namespace || '/' || task_queue FROM outbox_routes ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	claim := func(ns string, n int) []outbox.Row {
		t.Helper()
		rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, f, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: ns, TaskQueue: "q"}, Limit: n}})
		if err != nil || len(rows) != n {
			t.Fatalf("claim(%s/q ≤ %d) = %d rows, %v", ns, n, len(rows), err)
		}
		return rows
	}
	settle := func(r outbox.Row) {
		t.Helper()
		if err := s.Settle(ctx, r.Lease()); err != nil {
			t.Fatalf("Settle(%q): %v", r.DispatchKey, err)
		}
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "a1", Namespace: "a", TaskQueue: "q"}, {DispatchKey: "a2", Namespace: "a", TaskQueue: "q"}, {DispatchKey: "b1", Namespace: "b", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	a := claim("a", 2)
	b := claim("b", 1)
	settle(a[0])
	if got := strings.Join(routes(), " "); got != "a/q b/q" {
		t.Errorf("after settling 1 of 2 rows of a/q: routes %q, want \"a/q b/q\"", got)
	}
	if err := s.Retry(ctx, a[1].Lease(), time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // b1's lease expires
	if got := strings.Join(routes(), " "); got != "a/q b/q" {
		t.Errorf("with a delayed row on a/q and an expired lease on b/q: routes %q, want \"a/q b/q\"", got)
	}
	settle(claim("b", 1)[0])
	if err := s.Settle(ctx, b[0].Lease()); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle with b1's first token = %v, want outbox.ErrLeaseLost", err)
	}
	if got := strings.Join(routes(), " "); got != "a/q" {
		t.Errorf("after settling b/q's only row: routes %q, want \"a/q\"", got)
	}
	clock.Advance(time.Hour)
	settle(claim("a", 1)[0])
	if got := routes(); len(got) != 0 {
		t.Errorf("after settling every row: routes %q, want none", got)
	}
	if c, err := claimerOf(s).CountPendingOutboxRows(ctx, f, 10); err != nil || len(c) != 0 {
		t.Errorf("CountPendingOutboxRows with every row settled = %v, %v; want none", c, err)
	}
	// A settled key enqueued again is ignored and adds no route; a new key does.
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "b1", Namespace: "b", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	if got := routes(); len(got) != 0 {
		t.Errorf("after re-enqueueing a settled key: routes %q, want none", got)
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "b2", Namespace: "b", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	if c, err := claimerOf(s).CountPendingOutboxRows(ctx, f, 10); err != nil || len(c) != 1 || c[0].Count != 1 {
		t.Errorf("CountPendingOutboxRows after a new row on b/q = %v, %v; want b/q: 1", c, err)
	}
}

// TestLegacyUnnameableRoutesNotCounted: rows an older version let in on a
// route no claim can name (invalid UTF-8) are left out of the pending
// counts, so a sweep never builds a claim the store refuses and the other
// routes are still served.
func TestLegacyUnnameableRoutesNotCounted(t *testing.T) {
	ctx := t.Context()
	s := openT(t, ":memory:", Options{})
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "ok", Namespace: "n", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	// What Enqueue did before it refused such text.
	for _, stmt := range []string{
		`INSERT INTO outbox (dispatch_key, namespace, task_queue, shard, payload, enqueued_at, run_at, ready_at) VALUES ('bad', CAST(x'ff' AS TEXT), 'q', 0, x'', 1, 1, 1)`,
		`INSERT INTO outbox_routes (namespace, task_queue) VALUES (CAST(x'ff' AS TEXT), 'q')`,
	} {
		if _, err := s.writer.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	f := allShards(t, s)
	counts, err := claimerOf(s).CountPendingOutboxRows(ctx, f, 10)
	if err != nil || len(counts) != 1 || counts[0].Route != (backpressure.Route{Namespace: "n", TaskQueue: "q"}) {
		t.Errorf("CountPendingOutboxRows = %v, %v; want only n/q", counts, err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: backpressure.Unlimited}, f)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _, err := backpressure.Sweep(ctx, bp, s.Claimer()); err != nil || len(rows) != 1 || rows[0].DispatchKey != "ok" {
		t.Errorf("Sweep = %v, %v; want the one nameable row", rows, err)
	}
}
