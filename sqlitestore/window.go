package sqlitestore

import (
	"context"
	"database/sql"
	"slices"

	"github.com/outboxkit/backpressure"
)

// countOutboxRows is CountOutboxRows's pending counts at now, in its own
// read transaction on db (counting a round trip) when tx is nil, else in tx
// on db, recording the rows counted in rec (when not nil).
func (s *Store) countOutboxRows(ctx context.Context, db *sql.DB, tx *sql.Tx, shards backpressure.OwnedShardFraction, p backpressure.CountParams, now int64, rec *countedRows) ([]backpressure.RouteCount, error) {
	const op = "CountOutboxRows"
	if err := call(op).CountParams(p); err != nil {
		return nil, err
	}
	if p.Namespaces == 0 {
		return s.countPending(ctx, op, db, tx, shards, p.CapPerRoute, now, rec)
	}
	cond, sarg, none, err := s.countFilter(ctx, shards, rec)
	if err != nil {
		return nil, err
	}
	counts := []backpressure.RouteCount{}
	if none {
		return counts, nil
	}
	if tx == nil {
		if err := s.step(ctx); err != nil {
			return nil, s.fail(op, err)
		}
		s.trips.Add(1)
		tx, err = db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return nil, s.fail(op, err)
		}
		// Read only: rolling back ends the transaction whatever happened.
		defer func() { _ = tx.Rollback() }()
	}

	walk := windowWalk{
		ctx:  ctx,
		s:    s,
		db:   db,
		tx:   tx,
		mode: modeFor(rec, p.CapPerRoute),
		ids:  rec.byRoute(),
		cond: cond,
		// ?3 is bound even when cond does not read it, so ?4 and ?5 keep
		// their numbers.
		args: []any{now, p.CapPerRoute, sarg},
		want: p.Namespaces,
		out:  counts,
	}
	if err := walk.run(p.After); err != nil {
		return nil, s.fail(op, err)
	}
	return walk.out, nil
}

// windowWalk is one CountOutboxRows window walk over outbox_routes
// inside its read transaction.
type windowWalk struct {
	ctx  context.Context
	s    *Store
	db   *sql.DB // the database tx runs on
	tx   *sql.Tx
	mode countMode
	ids  map[backpressure.Route][]int64 // filled with the IDs of the rows counted, unless mode is countOnly
	cond string                         // the shard filter, reading ?3
	args []any                          // ?1 now, ?2 cap, ?3 the shard bitmap (or nil)
	want int                            // the window's size in namespaces

	out  []backpressure.RouteCount
	got  int    // namespaces in out
	last string // the namespace of out's last entry, if got > 0
}

// run walks the namespaces after after, then those up to and including it,
// completes the last namespace of a full window, and leaves out sorted by
// namespace and task queue.
func (w *windowWalk) run(after string) error {
	wrapped := -1 // where in out the walk wrapped around, once it has
	for _, part := range []string{windowAfter, windowUpTo} {
		if part == windowUpTo {
			wrapped = len(w.out)
		}
		full, err := w.scan(part, after)
		if err != nil {
			return err
		}
		if full != nil {
			// The window is full: count the rest of its last namespace
			// only. Its routes after full.taskQueue come after every entry
			// of this part, so they append in order and add no namespace.
			if _, err := w.scan(windowRestOf, full.namespace, full.taskQueue); err != nil {
				return err
			}
			break
		}
	}
	if wrapped > 0 {
		// Each part is sorted and every namespace up to after sorts before
		// every namespace past it: put the wrapped-around part first.
		w.out = append(slices.Clone(w.out[wrapped:]), w.out[:wrapped]...)
	}
	return nil
}

// windowFull says where a scan stopped because the window filled up: the
// route that completed it.
type windowFull struct {
	namespace, taskQueue string
}

// scan runs countPendingWindowSQL with the bound part and its arguments
// (?4, ?5), appending each route with a count to out. It stops, returning
// where, as soon as the window holds w.want namespaces; it returns nil when
// it ran out of routes first.
func (w *windowWalk) scan(part string, bounds ...any) (*windowFull, error) {
	if err := w.s.step(w.ctx); err != nil {
		return nil, err
	}
	args := append(append([]any(nil), w.args...), bounds...)
	rows, err := w.s.query(w.ctx, w.db, w.tx, countPendingWindowSQL(w.cond, part, w.mode), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanRouteCount(rows, w.mode, w.ids)
		if err != nil {
			return nil, err
		}
		// As in CountPendingOutboxRows: filtered here so the count
		// subquery runs once, and unclaimable names are left out.
		if c.Count <= 0 || c.Route.Validate() != nil {
			continue
		}
		w.out = append(w.out, c)
		if w.got > 0 && w.last == c.Route.Namespace {
			continue
		}
		w.got++
		w.last = c.Route.Namespace
		if w.got == w.want && part != windowRestOf {
			// Closing rows here stops SQLite before it counts another
			// route.
			return &windowFull{namespace: c.Route.Namespace, taskQueue: c.Route.TaskQueue}, rows.Close()
		}
	}
	return nil, rows.Err()
}

// The parts of outbox_routes a window walk reads, as conditions on r: ?4 a
// namespace, ?5 a task queue.
const (
	windowAfter  = `r.namespace > ?4`
	windowUpTo   = `r.namespace <= ?4`
	windowRestOf = `r.namespace = ?4 AND r.task_queue > ?5`
)

// countPendingWindowSQL is countPendingSQL restricted to the routes where
// part holds: ?1 now, ?2 the cap, cond the shard filter (parameter ?3), part
// one of the window conditions (?4, ?5). It seeks outbox_routes' primary key
// to the part and counts each route as it is stepped to, so a caller that
// stops reading stops the counting.
func countPendingWindowSQL(cond, part string, mode countMode) string {
	return routeCountsSQL(cond, part, mode)
}
