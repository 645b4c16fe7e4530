package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// ClaimOutboxWindow resolves the window rule w in one call, as
// the window claim of [backpressure.OutboxStore] describes: walking the namespaces in the
// cyclic order after w.After, it claims one row of each of the first
// w.Namespaces not in w.Skip with a claimable row on a valid route, if
// more than w.Namespaces such namespaces exist, from the first such route
// after w.RouteAfter's task queue (cyclically), highest priority first,
// then oldest. It is the naive reference: it lists every claimable row.
func (s *Store) ClaimOutboxWindow(ctx context.Context, shards backpressure.OwnedShardFraction, window backpressure.CountParams, skip []string, routeAfter map[string]string) ([]outbox.Row, []backpressure.RouteCount, error) {
	const op = "ClaimOutboxWindow"
	if err := s.begin(ctx, op); err != nil {
		return nil, nil, err
	}
	defer s.mu.Unlock()
	if err := s.checkShards(shards); err != nil {
		return nil, nil, fmt.Errorf("memstore: %s: %w", op, err)
	}
	w, err := call(op).Window(window, skip, routeAfter)
	if err != nil {
		return nil, nil, err
	}
	now := s.now()
	// Every route with a claimable row, valid or not, per namespace.
	routes := map[string][]string{}
	for _, r := range s.st.rows {
		if shards.Owns(r.Shard) && claimable(&r, now) && !slices.Contains(routes[r.Namespace], r.TaskQueue) {
			routes[r.Namespace] = append(routes[r.Namespace], r.TaskQueue)
		}
	}
	var eligible []string
	valid := map[string][]string{} // the valid routes' task queues, sorted
	for ns, tqs := range routes {
		if _, skipped := slices.BinarySearch(w.Skip, ns); skipped {
			continue
		}
		for _, tq := range tqs {
			if (backpressure.Route{Namespace: ns, TaskQueue: tq}).Validate() == nil {
				valid[ns] = append(valid[ns], tq)
			}
		}
		if len(valid[ns]) > 0 {
			slices.Sort(valid[ns])
			eligible = append(eligible, ns)
		}
	}
	slices.Sort(eligible)
	served := w.Served(eligible)
	if served == nil {
		return []outbox.Row{}, []backpressure.RouteCount{}, nil
	}
	next := s.st.clone()
	rows := make([]outbox.Row, 0, len(served))
	grants := make([]backpressure.RouteCount, 0, len(served))
	for _, ns := range served {
		route := backpressure.Route{Namespace: ns, TaskQueue: w.TaskQueue(ns, valid[ns])}
		cands := next.byID(func(r *outbox.Row) bool {
			return r.Route() == route && shards.Owns(r.Shard) && claimable(r, now)
		})
		slices.SortStableFunc(cands, func(a, b outbox.Row) int { return b.Priority - a.Priority })
		if err := s.step(op); err != nil {
			return nil, nil, err
		}
		rows = append(rows, next.claim(cands[0], now, s.lease))
		grants = append(grants, validate.WindowRoute(route, len(routes[ns]) > 1))
	}
	s.st = next
	return rows, grants, nil
}

var _ validate.WindowClaimer[outbox.Row] = (*Store)(nil)
