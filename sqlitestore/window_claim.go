package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/outboxkit/backpressure"
	check "github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// ClaimOutboxWindow resolves the window rule w, as
// the window claim of [backpressure.OutboxStore] describes, in one write transaction (one
// round trip): one row of each of the first w.Namespaces namespaces after
// w.After that are not in w.Skip and have a claimable row on the owned
// shards, if more than w.Namespaces such namespaces exist, from the first
// such route after the namespace's route cursor, highest priority first,
// then oldest. Routes CountPendingOutboxRows leaves out (names a claim
// would refuse) are left out here too, for OtherRoutes as well.
//
// The transaction counts the window CountOutboxRows would at cap 1, of
// w.Namespaces + 1 + len(w.Skip) namespaces (so it holds the first
// w.Namespaces + 1 not skipped, if there are so many), recording each
// route's first claimable row; it chooses the routes, and claims those
// rows by ID, as InSweepTx's view claims rows it counted. Its cost is the
// window count's plus a claim by primary key.
func (c *claimer) ClaimOutboxWindow(ctx context.Context, shards backpressure.OwnedShardFraction, window backpressure.CountParams, skip []string, routeAfter map[string]string) ([]outbox.Row, []backpressure.RouteCount, error) {
	s := (*Store)(c)
	const op = "ClaimOutboxWindow"
	if err := s.writable(); err != nil {
		return nil, nil, s.fail(op, err)
	}
	w, err := call(op).Window(window, skip, routeAfter)
	if err != nil {
		return nil, nil, err
	}
	_, _, none, err := s.shardFilter(shards, 7)
	if err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if none {
		return []outbox.Row{}, []backpressure.RouteCount{}, nil
	}
	var (
		rows   []outbox.Row
		grants []backpressure.RouteCount
	)
	_, err = s.kept.Claim(func() ([]outbox.Row, error) {
		err := s.write(ctx, func(tx *sql.Tx) (err error) {
			rows, grants, err = s.claimWindowIn(ctx, tx, shards, w, nanos(s.now()))
			return err
		})
		return rows, err
	})
	if err != nil {
		return nil, nil, s.fail("claim", err)
	}
	return rows, grants, nil
}

// ClaimOutboxWindow is the store's ClaimOutboxWindow in the sweep's
// transaction, at its instant.
func (v *sweepView) ClaimOutboxWindow(ctx context.Context, shards backpressure.OwnedShardFraction, window backpressure.CountParams, skip []string, routeAfter map[string]string) ([]outbox.Row, []backpressure.RouteCount, error) {
	if err := v.check(ctx); err != nil {
		return nil, nil, err
	}
	w, err := call("ClaimOutboxWindow").Window(window, skip, routeAfter)
	if err != nil {
		return nil, nil, err
	}
	v.counted = nil // rows may be claimed now: count again
	v.claiming()
	rows, grants, err := v.s.claimWindowIn(ctx, v.tx, shards, w, v.now)
	v.claimed(rows, err)
	if err != nil {
		return nil, nil, v.s.fail("claim", err)
	}
	return rows, grants, nil
}

// claimWindowIn is ClaimOutboxWindow in tx at now, w already checked.
func (s *Store) claimWindowIn(ctx context.Context, tx *sql.Tx, shards backpressure.OwnedShardFraction, w check.Window, now int64) ([]outbox.Row, []backpressure.RouteCount, error) {
	rows, grants := []outbox.Row{}, []backpressure.RouteCount{}
	cond, sarg, none, err := s.shardFilter(shards, 7)
	if err != nil || none {
		return rows, grants, err
	}
	rec := newCountedRows()
	p := backpressure.CountParams{CapPerRoute: 1, After: w.After, Namespaces: w.Namespaces + 1 + len(w.Skip)}
	counts, err := s.countOutboxRows(ctx, s.writer, tx, shards, p, now, rec)
	if err != nil {
		return nil, nil, err
	}
	// The window's eligible routes' task queues, by namespace (sorted).
	var eligible []string
	tqs := map[string][]string{}
	for _, c := range counts {
		if _, skipped := slices.BinarySearch(w.Skip, c.Route.Namespace); skipped {
			continue
		}
		if n := len(eligible); n == 0 || eligible[n-1] != c.Route.Namespace {
			eligible = append(eligible, c.Route.Namespace)
		}
		tqs[c.Route.Namespace] = append(tqs[c.Route.Namespace], c.Route.TaskQueue)
	}
	served := w.Served(eligible)
	if served == nil {
		return rows, grants, nil
	}
	ids := make([]int64, 0, len(served))
	for _, ns := range served {
		route := backpressure.Route{Namespace: ns, TaskQueue: w.TaskQueue(ns, tqs[ns])}
		ids = append(ids, rec.ids[route][0])
		grants = append(grants, check.WindowRoute(route, len(tqs[ns]) > 1))
	}
	rows, err = s.claimIn(ctx, tx, claimByIDSQL(cond), sarg, now, len(ids), idList(ids), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if len(rows) != len(ids) {
		return nil, nil, errWindowLost
	}
	// ids are in namespace order (served is sorted, one row each), so
	// putting the rows in the order of ids sorts them by namespace, each
	// row moved once rather than swapped whole by a sort.
	return inListOrder(rows, ids), grants, nil
}

// errWindowLost is a row counted claimable in a write transaction that its
// claim by ID did not find: a broken invariant, not a race.
var errWindowLost = errors.New("sqlitestore: ClaimOutboxWindow: a row counted claimable was not claimed")

var (
	_ check.WindowClaimer[outbox.Row] = (*claimer)(nil)
	_ check.WindowClaimer[outbox.Row] = (*sweepView)(nil)
)
