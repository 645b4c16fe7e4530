package admin

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// deadStore serves ListDead from rows (sorted by key); every other Store
// method is absent.
type deadStore struct {
	Store
	rows  []outbox.Row
	calls int
}

func (d *deadStore) ListDead(ctx context.Context, p outbox.ListDeadParams) ([]outbox.Row, error) {
	d.calls++
	var out []outbox.Row
	for _, r := range d.rows {
		if r.DispatchKey > p.After && (p.Namespace == "" || r.Namespace == p.Namespace) && len(out) < p.Limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func TestDeadGroups(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var rows []outbox.Row
	for i := range 5 {
		e := "timeout"
		if i%2 == 1 {
			e = "550"
		}
		rows = append(rows, outbox.Row{DispatchKey: fmt.Sprintf("k%d", i), Namespace: "a", LastError: e, FinishedAt: t0.Add(time.Duration(5-i) * time.Second)})
	}
	rows = append(rows, outbox.Row{DispatchKey: "z", Namespace: "b", LastError: "550", FinishedAt: t0})
	res, err := DeadGroups(t.Context(), &deadStore{rows: rows}, "a")
	if err != nil {
		t.Fatal(err)
	}
	want := []DeadGroup{
		{LastError: "timeout", Count: 3, First: t0.Add(time.Second), Last: t0.Add(5 * time.Second), SampleKey: "k0"},
		{LastError: "550", Count: 2, First: t0.Add(2 * time.Second), Last: t0.Add(4 * time.Second), SampleKey: "k1"},
	}
	if res.Rows != 5 || res.Capped || fmt.Sprint(res.Groups) != fmt.Sprint(want) {
		t.Errorf("DeadGroups(a) = %+v, want rows 5, not capped, %+v", res, want)
	}
}

func TestDeadGroupsCapped(t *testing.T) {
	var rows []outbox.Row
	for i := range MaxDeadGrouped + 1 {
		rows = append(rows, outbox.Row{DispatchKey: fmt.Sprintf("k%06d", i), LastError: "e"})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].DispatchKey < rows[j].DispatchKey })
	res, err := DeadGroups(t.Context(), &deadStore{rows: rows}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Capped || res.Rows != MaxDeadGrouped || res.Groups[0].Count != MaxDeadGrouped {
		t.Errorf("%d dead rows: Capped %v, Rows %d, count %d; want capped at %d", len(rows), res.Capped, res.Rows, res.Groups[0].Count, MaxDeadGrouped)
	}
	rows = rows[:MaxDeadGrouped]
	if res, _ := DeadGroups(t.Context(), &deadStore{rows: rows}, ""); res.Capped {
		t.Errorf("exactly %d dead rows: Capped", MaxDeadGrouped)
	}
}
