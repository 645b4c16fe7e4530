package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// windowReference computes the window from the full counts, as the
// contract of backpressure.CountParams describes it: namespaces in
// byte order from the first above after, wrapping around, the first n of
// them that have counts.
func windowReference(full []backpressure.RouteCount, after string, n int) []backpressure.RouteCount {
	var spaces []string
	for _, rc := range full {
		if len(spaces) == 0 || spaces[len(spaces)-1] != rc.Route.Namespace {
			spaces = append(spaces, rc.Route.Namespace)
		}
	}
	slices.Sort(spaces)
	split, _ := slices.BinarySearchFunc(spaces, after, func(ns, after string) int {
		if ns > after {
			return 1
		}
		return -1
	})
	cyclic := append(slices.Clone(spaces[split:]), spaces[:split]...)
	in := make(map[string]bool)
	for _, ns := range cyclic[:min(n, len(cyclic))] {
		in[ns] = true
	}
	var want []backpressure.RouteCount
	for _, rc := range full {
		if in[rc.Route.Namespace] {
			want = append(want, rc)
		}
	}
	return want
}

// TestPendingWindowMatchesFullCounts checks the window against the full
// counts for many windows over namespaces in every condition: claimable
// rows on several routes, rows only in retry back-off, only under a live
// lease, only settled, and single rows that may fall on shards the node
// does not own.
func TestPendingWindowMatchesFullCounts(t *testing.T) {
	f := newFixture(t)
	var batch []outbox.Message
	for _, ns := range []string{"a", "b", "bb", "c", "delayed", "e", "leased", "settled", "é", "z"} {
		for q := 0; q < 3; q++ {
			for i := 0; i < 4; i++ {
				batch = append(batch, message(ns, fmt.Sprintf("q%d", q), fmt.Sprintf("%s/q%d/%d", ns, q, i)))
			}
		}
	}
	for i := 0; i < 12; i++ {
		ns := fmt.Sprintf("single%02d", i)
		batch = append(batch, message(ns, "q", ns))
	}
	f.enqueue(batch...)
	schema := pgx.Identifier{f.schema}.Sanitize()
	for _, stmt := range []string{
		`UPDATE ` + schema + `.outbox SET visible_at = $1::timestamptz + interval '1 hour' WHERE namespace = 'delayed'`,
		`UPDATE ` + schema + `.outbox SET state = 'claimed', lease_expires_at = $1::timestamptz + interval '1 minute', claimed_at = $1 WHERE namespace = 'leased'`,
		`UPDATE ` + schema + `.outbox SET state = 'settled', finished_at = $1 WHERE namespace = 'settled'`,
		// Mixed: one route of e delayed, one of b leased.
		`UPDATE ` + schema + `.outbox SET visible_at = $1::timestamptz + interval '1 hour' WHERE namespace = 'e' AND task_queue = 'q1'`,
		`UPDATE ` + schema + `.outbox SET state = 'claimed', lease_expires_at = $1::timestamptz + interval '1 minute', claimed_at = $1 WHERE namespace = 'b' AND task_queue = 'q0'`,
	} {
		if _, err := adminPool.Exec(f.ctx, stmt, f.now); err != nil {
			t.Fatal(err)
		}
	}
	var even []int
	for s := 0; s < f.s.ShardCount(); s += 2 {
		even = append(even, s)
	}
	half, err := backpressure.NewOwnedShardFraction(even, f.s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	afters := []string{"", "a", "b", "ba", "bb", "c", "delayed", "e", "leased", "settled", "single05", "z", "é", "zz", "\U0010ffff"}
	for _, shards := range []struct {
		name string
		f    backpressure.OwnedShardFraction
	}{{"all", f.all}, {"half", half}} {
		for _, capPerRoute := range []int{1, 3, 100} {
			full, err := claimerOf(f.s).CountPendingOutboxRows(f.ctx, shards.f, capPerRoute)
			if err != nil {
				t.Fatal(err)
			}
			for _, after := range afters {
				for _, n := range []int{1, 2, 3, 5, 8, 100} {
					before := f.tr.queries.Load()
					got, err := pendingOf(claimerOf(f.s).CountOutboxRows(f.ctx, shards.f, backpressure.CountParams{CapPerRoute: capPerRoute, After: after, Namespaces: n}))
					if err != nil {
						t.Fatalf("%s shards, cap %d, after %q, %d namespaces: %v", shards.name, capPerRoute, after, n, err)
					}
					if rt := f.tr.queries.Load() - before; rt != 1 {
						t.Errorf("window made %d round trips, want 1", rt)
					}
					if want := windowReference(full, after, n); !slices.Equal(got, want) {
						t.Errorf("%s shards, cap %d, after %q, %d namespaces:\n got %v\nwant %v", shards.name, capPerRoute, after, n, got, want)
					}
				}
			}
		}
	}
	// The full window is the full count.
	full, err := claimerOf(f.s).CountPendingOutboxRows(f.ctx, f.all, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pendingOf(claimerOf(f.s).CountOutboxRows(f.ctx, f.all, backpressure.CountParams{CapPerRoute: 2, After: "m", Namespaces: 1 << 30}))
	if err != nil || !slices.Equal(got, full) {
		t.Errorf("widest window = %v, %v; want the full counts %v", got, err, full)
	}
}

// TestPendingWindowErrors checks the window's argument, shard-count,
// context and Close errors, none of which reaches the database, and the
// empty store.
func TestPendingWindowErrors(t *testing.T) {
	f := newFixture(t)
	w := backpressure.CountParams{CapPerRoute: 1, Namespaces: 1}
	if got, err := pendingOf(claimerOf(f.s).CountOutboxRows(f.ctx, f.all, w)); err != nil || len(got) != 0 {
		t.Errorf("window of an empty store = %v, %v; want none", got, err)
	}
	before := f.tr.queries.Load()
	for _, bad := range []backpressure.CountParams{
		{CapPerRoute: 0, Namespaces: 1},
		{CapPerRoute: -1, Namespaces: 1},
		{CapPerRoute: 0},
		{CapPerRoute: 1, Namespaces: -5},
		{CapPerRoute: 0, Claimed: true},
		{CapPerRoute: 1, Namespaces: -1, Claimed: true},
		{CapPerRoute: 1, Namespaces: 1, After: "a\x00"},
		{CapPerRoute: 1, Namespaces: 1, After: "\xff", Claimed: true},
	} {
		_, _, err := claimerOf(f.s).CountOutboxRows(f.ctx, f.all, bad)
		var ae *outbox.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, outbox.ErrInvalidArgument) || ae.Op != "CountOutboxRows" {
			t.Errorf("CountOutboxRows(%+v): error %v, want a pgstore *ArgumentError of CountOutboxRows", bad, err)
		}
	}
	other, err := backpressure.AllShards(f.s.ShardCount() * 2)
	if err != nil {
		t.Fatal(err)
	}
	var se *outbox.ShardCountError
	if _, err := pendingOf(claimerOf(f.s).CountOutboxRows(f.ctx, other, w)); !errors.As(err, &se) {
		t.Errorf("window with a fraction of %d shards: error %v, want a *ShardCountError", other.ShardCount(), err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	if _, err := pendingOf(claimerOf(f.s).CountOutboxRows(ctx, f.all, w)); !errors.Is(err, context.Canceled) {
		t.Errorf("window with a cancelled context: error %v, want context.Canceled", err)
	}
	if n := f.tr.queries.Load() - before; n != 0 {
		t.Errorf("rejected windows made %d round trips, want 0", n)
	}
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pendingOf(claimerOf(f.s).CountOutboxRows(f.ctx, f.all, w)); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("window after Close: error %v, want ErrClosed", err)
	}
}

// pendingOf returns CountOutboxRows's pending counts and error, for a call
// without Claimed.
func pendingOf(_ map[string]int, pending []backpressure.RouteCount, err error) ([]backpressure.RouteCount, error) {
	return pending, err
}

// withClaimed returns p asking for the claimed counts too.
func withClaimed(p backpressure.CountParams) backpressure.CountParams {
	p.Claimed = true
	return p
}
