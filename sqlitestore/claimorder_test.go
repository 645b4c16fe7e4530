package sqlitestore

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// naiveClaimOrder is the reference for inClaimOrder: a stable sort of rows
// in ID order by the index of their route's claim (a linear search), then
// highest priority first.
func naiveClaimOrder(rows []outbox.Row, claims []backpressure.ScopedClaim) []outbox.Row {
	index := func(r backpressure.Route) int {
		return slices.IndexFunc(claims, func(c backpressure.ScopedClaim) bool { return c.Route == r })
	}
	out := slices.Clone(rows)
	slices.SortStableFunc(out, func(a, b outbox.Row) int {
		return cmp.Or(cmp.Compare(index(a.Route()), index(b.Route())), cmp.Compare(b.Priority, a.Priority))
	})
	return out
}

// drawClaimedRows draws claims naming distinct routes (in route order or
// not) and rows claimed by them, in ID order, with random priorities.
func drawClaimedRows(rt *rapid.T) ([]outbox.Row, []backpressure.ScopedClaim) {
	routes := rapid.SliceOfNDistinct(rapid.Custom(func(rt *rapid.T) backpressure.Route {
		return backpressure.Route{
			Namespace: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "namespace"),
			TaskQueue: rapid.SampledFrom([]string{"", "q1", "q2"}).Draw(rt, "taskQueue"),
		}
	}), 1, 9, func(r backpressure.Route) string { return r.String() }).Draw(rt, "routes")
	if rapid.Bool().Draw(rt, "sorted") {
		slices.SortFunc(routes, backpressure.Route.Compare)
	}
	claims := make([]backpressure.ScopedClaim, len(routes))
	for i, r := range routes {
		claims[i] = backpressure.ScopedClaim{Route: r, Limit: 1}
	}
	var rows []outbox.Row
	id := int64(0)
	for i := rapid.IntRange(0, 40).Draw(rt, "rows"); i > 0; i-- {
		id += int64(rapid.IntRange(1, 3).Draw(rt, "gap"))
		r := rapid.SampledFrom(routes).Draw(rt, "route")
		rows = append(rows, outbox.Row{ID: id, Namespace: r.Namespace, TaskQueue: r.TaskQueue,
			Priority: rapid.IntRange(-2, 2).Draw(rt, "priority")})
	}
	return rows, claims
}

func rowIDs(rows []outbox.Row) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// TestInClaimOrderMatchesNaive: inClaimOrder orders any rows in ID order
// as the naive stable sort does, for claims in route order or not.
func TestInClaimOrderMatchesNaive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rows, claims := drawClaimedRows(rt)
		want := rowIDs(naiveClaimOrder(rows, claims))
		if got := rowIDs(inClaimOrder(slices.Clone(rows), claims)); !slices.Equal(got, want) {
			rt.Fatalf("inClaimOrder(%v, %v) = %v, want %v", rows, claims, got, want)
		}
	})
}

// TestInListOrderMatchesNaive: inListOrder puts rows in ID order into the
// order of an ID list naming each of them (and IDs of no row, which a
// claim by ID skips when their rows are no longer claimable): the rows of
// the list's IDs, in its order.
func TestInListOrderMatchesNaive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rows, _ := drawClaimedRows(rt)
		list := rowIDs(rows)
		for i := rapid.IntRange(0, 3).Draw(rt, "missing"); i > 0; i-- {
			list = append(list, -int64(i))
		}
		list = rapid.Permutation(list).Draw(rt, "list")
		var want []int64
		for _, id := range list {
			if id > 0 {
				want = append(want, id)
			}
		}
		if got := rowIDs(inListOrder(rows, list)); !slices.Equal(got, want) {
			rt.Fatalf("inListOrder(%v, %v) = %v, want %v", rowIDs(rows), list, got, want)
		}
	})
}

// TestClaimOrderIDs: a count's list of "id" and "id:rank" entries comes
// back in claim order (lowest rank, that is highest priority, first, then
// lowest ID), whatever the order of its entries; a malformed list is an
// error.
func TestClaimOrderIDs(t *testing.T) {
	for i, c := range []struct {
		list string
		want []int64
	}{
		{"7", []int64{7}},
		{"3,5,9", []int64{3, 5, 9}},
		{"9,3,5", []int64{3, 5, 9}},
		{"3:1,5,9:-1", []int64{9, 5, 3}},
		{"4,8:-3,2,6:-3", []int64{6, 8, 2, 4}},
		{"4:0,2", []int64{2, 4}},
	} {
		got, err := claimOrderIDs(c.list)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("step %d: claimOrderIDs(%q) = %v, %v; want %v", i, c.list, got, err, c.want)
		}
	}
	for i, bad := range []string{"", ",", "1,", "x", "1:y", "1:", ":1", "1;0"} {
		if got, err := claimOrderIDs(bad); err == nil {
			t.Errorf("step %d: claimOrderIDs(%q) = %v, nil; want an error", i, bad, got)
		}
	}
}

// TestClaimOrderIDsMatchesNaive: for any IDs and ranks, in any order,
// claimOrderIDs returns the IDs sorted by (rank, ID).
func TestClaimOrderIDsMatchesNaive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ids := rapid.SliceOfNDistinct(rapid.Int64Range(1, 1000), 1, 30, rapid.ID[int64]).Draw(rt, "ids")
		ranks := rapid.SliceOfN(rapid.IntRange(-3, 3), len(ids), len(ids)).Draw(rt, "ranks")
		var entries []string
		type pair struct {
			rank int
			id   int64
		}
		var pairs []pair
		for i, id := range ids {
			e := strconv.FormatInt(id, 10)
			if ranks[i] != 0 {
				e += ":" + strconv.Itoa(ranks[i])
			}
			entries = append(entries, e)
			pairs = append(pairs, pair{ranks[i], id})
		}
		slices.SortFunc(pairs, func(a, b pair) int { return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.id, b.id)) })
		var want []int64
		for _, p := range pairs {
			want = append(want, p.id)
		}
		list := strings.Join(entries, ",")
		if got, err := claimOrderIDs(list); err != nil || !slices.Equal(got, want) {
			rt.Fatalf("claimOrderIDs(%q) = %v, %v; want %v", list, got, err, want)
		}
	})
}

// TestParseDecimalMatchesParseInt: parseDecimal answers as
// strconv.ParseInt(s, 10, 64) does, for row IDs and any other text.
func TestParseDecimalMatchesParseInt(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := rapid.OneOf(
			rapid.Map(rapid.Int64(), func(n int64) string { return strconv.FormatInt(n, 10) }),
			rapid.StringMatching(`[-+0-9]{0,21}`),
			rapid.String(),
		).Draw(rt, "s")
		want, wantErr := strconv.ParseInt(s, 10, 64)
		got, err := parseDecimal(s)
		if got != want || (err == nil) != (wantErr == nil) {
			rt.Fatalf("parseDecimal(%q) = %d, %v; strconv.ParseInt: %d, %v", s, got, err, want, wantErr)
		}
	})
}
