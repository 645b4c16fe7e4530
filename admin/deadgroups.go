package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// MaxDeadGrouped is the most dead rows [DeadGroups] reads: it groups the
// first MaxDeadGrouped dead rows in dispatch-key order, no more.
const MaxDeadGrouped = 10_000

// deadGroupPage is the page size DeadGroups reads with.
const deadGroupPage = 1_000

// DeadGroup is the dead rows sharing one LastError.
type DeadGroup struct {
	LastError   string
	Count       int
	First, Last time.Time // the earliest and latest FinishedAt
	SampleKey   string    // the group's first dispatch key
}

// DeadGroupsResult is what DeadGroups found. Capped is set when the store
// holds more dead rows than the MaxDeadGrouped it read: the counts are
// then lower bounds.
type DeadGroupsResult struct {
	Groups []DeadGroup // most rows first, then by LastError
	Rows   int         // the dead rows read
	Capped bool
}

// DeadGroups groups the dead rows of namespace ("" for every namespace) by
// LastError, from at most MaxDeadGrouped rows read with ListDead in pages
// of 1,000 (at most 11 store calls). It needs no store-side grouping.
func DeadGroups(ctx context.Context, s Store, namespace string) (DeadGroupsResult, error) {
	var res DeadGroupsResult
	byErr := map[string]*DeadGroup{}
	after := ""
	for res.Rows < MaxDeadGrouped {
		rows, err := s.ListDead(ctx, outbox.ListDeadParams{Namespace: namespace, After: after, Limit: deadGroupPage})
		if err != nil {
			return DeadGroupsResult{}, err
		}
		for _, r := range rows {
			g, ok := byErr[r.LastError]
			if !ok {
				g = &DeadGroup{LastError: r.LastError, First: r.FinishedAt, Last: r.FinishedAt, SampleKey: r.DispatchKey}
				byErr[r.LastError] = g
			}
			g.Count++
			if r.FinishedAt.Before(g.First) {
				g.First = r.FinishedAt
			}
			if r.FinishedAt.After(g.Last) {
				g.Last = r.FinishedAt
			}
		}
		res.Rows += len(rows)
		if len(rows) < deadGroupPage {
			break
		}
		after = rows[len(rows)-1].DispatchKey
	}
	if res.Rows >= MaxDeadGrouped {
		more, err := s.ListDead(ctx, outbox.ListDeadParams{Namespace: namespace, After: after, Limit: 1})
		if err != nil {
			return DeadGroupsResult{}, err
		}
		res.Capped = len(more) > 0
	}
	for _, g := range byErr {
		res.Groups = append(res.Groups, *g)
	}
	slices.SortFunc(res.Groups, func(a, b DeadGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.LastError, b.LastError))
	})
	return res, nil
}
