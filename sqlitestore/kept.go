package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/keptcount"
)

// Kept counts (package doc, "Kept counts"): with Options.RecountInterval
// positive the store answers the planner's counts from internal/keptcount
// when nothing can have changed them, and otherwise reads them (keptRead)
// and keeps what it read. The claims and Complete report what they did
// (keptchange.go; a sweep transaction's claims only once it committed:
// sweeptx.go); Enqueue and Requeue make namespaces stale; a failed claim
// or completion forgets everything. What the store cannot see — a commit of any other
// connection to the file: another Store, another process, an application
// transaction that ran EnqueueTx — it detects before every kept answer by
// PRAGMA data_version on its writer connection, which changes exactly when
// another connection committed; a change forgets everything. The store's
// own commits all go through that connection (Open's writer has one), so
// they never change it. In memory no other connection exists: no check.

// dataVersionSQL tells whether another connection committed since the
// connection last ran it.
const dataVersionSQL = `PRAGMA data_version`

// keptState is what the store needs beside the Counts: the statements
// its kept reads run, and the data_version its writer connection last
// returned.
type keptState struct {
	watch *sql.Stmt             // PRAGMA data_version on the writer; nil in memory, where no other connection exists
	stmts map[stmtKey]*sql.Stmt // the reads' own statements, prepared as the hot ones are
	hits  atomic.Int64          // counts answered from the kept values (tests read it)

	mu      sync.Mutex // guards seen and counted, and orders checks with the Forget they make
	seen    int64
	counted bool // seen holds a value
}

// prepareKept prepares the data_version statement of a file store that
// keeps counts.
func (s *Store) prepareKept(ctx context.Context) error {
	if s.kept == nil {
		return nil
	}
	s.keptSt.stmts = map[stmtKey]*sql.Stmt{}
	for _, db := range []*sql.DB{s.reader, s.writer} {
		for _, q := range []string{
			namespacesCountSQL(""), namespacesCountSQL(ownedCond(3)),
			keptDueSQL("", false), keptDueSQL(ownedCond(2), false), keptDueSQL("", true), keptDueSQL(ownedCond(2), true),
		} {
			if _, dup := s.keptSt.stmts[stmtKey{db, q}]; dup { // in memory, reader is writer
				continue
			}
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				return err
			}
			s.keptSt.stmts[stmtKey{db, q}] = st
		}
	}
	if s.path == "" {
		return nil
	}
	st, err := s.writer.PrepareContext(ctx, dataVersionSQL)
	s.keptSt.watch = st
	return err
}

// closeKept closes the statements prepareKept prepared.
func (s *Store) closeKept() {
	for _, st := range s.keptSt.stmts {
		_ = st.Close()
	}
	if s.keptSt.watch != nil {
		_ = s.keptSt.watch.Close()
	}
}

// keptQuery runs q, one of prepareKept's statements, with args in tx on db.
func (s *Store) keptQuery(ctx context.Context, db *sql.DB, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st, ok := s.keptSt.stmts[stmtKey{db, q}]; ok {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

// keptCheck reads data_version on the writer connection (in tx when not
// nil, which is on it) and forgets the kept values when another connection
// committed since the last check; a check that fails forgets them too.
// checked reports that it ran a statement. usable false: it could not
// check without waiting for one of the store's own write transactions
// (perhaps the caller's: a count of the Store's made inside InSweepTx's
// fn), so the kept values must be neither used nor refreshed.
func (s *Store) keptCheck(ctx context.Context, tx *sql.Tx) (checked, usable bool) {
	st := s.keptSt.watch
	if st == nil {
		return false, true
	}
	if tx == nil && s.writing.Load() > 0 {
		return false, false
	}
	if tx != nil {
		st = tx.StmtContext(ctx, st)
	}
	var v int64
	err := st.QueryRowContext(ctx).Scan(&v)
	s.keptSt.mu.Lock()
	defer s.keptSt.mu.Unlock()
	if err != nil || !s.keptSt.counted || v != s.keptSt.seen {
		s.kept.Forget()
	}
	s.keptSt.seen, s.keptSt.counted = v, err == nil
	return true, true
}

// hit records a count answered from the kept values, after a check that
// ran a statement (checked) outside a transaction: one round trip.
func (s *Store) hit(checked bool, tx *sql.Tx) {
	if checked && tx == nil {
		s.trips.Add(1)
	}
	s.keptSt.hits.Add(1)
}

// keptDB is the database a count in tx (nil: its own) runs on.
func (s *Store) keptDB(tx *sql.Tx) *sql.DB {
	if tx != nil {
		return s.writer
	}
	return s.reader
}

// claimedKept is CountClaimedOutboxRows at now (in tx when not nil) from
// the kept values, or a read of the claimed counts that it keeps.
func (s *Store) claimedKept(ctx context.Context, tx *sql.Tx, shards backpressure.OwnedShardFraction, now int64) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	checked, usable := s.keptCheck(ctx, tx)
	if !usable {
		return s.countClaimed(ctx, s.reader, nil, shards, now)
	}
	at := fromNanos(now)
	if claimed, ok := s.kept.Claimed(shards, at); ok {
		s.hit(checked, tx)
		return claimed, nil
	}
	t := s.kept.Ticket(at)
	claimed, err := s.countClaimed(ctx, s.keptDB(tx), tx, shards, now)
	if err == nil {
		s.kept.RefreshedClaimed(t, shards, claimed)
	}
	return claimed, err
}

// pendingKept is CountOutboxRows's pending counts for p (checked) at now,
// in tx when not nil, from the kept values, or read and kept. filled
// reports that rec holds the rows counted (a full read in tx made them);
// a window the kept values do not hold is read as before, and not kept.
func (s *Store) pendingKept(ctx context.Context, op string, tx *sql.Tx, shards backpressure.OwnedShardFraction, p backpressure.CountParams, now int64, rec *countedRows) (pending []backpressure.RouteCount, filled bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	checked, usable := s.keptCheck(ctx, tx) // with the read, if any, one round trip
	if !usable {
		pending, err := s.countOutboxRows(ctx, s.reader, nil, shards, p, now, nil)
		return pending, false, err
	}
	at := fromNanos(now)
	if p.Namespaces > 0 {
		if pending, ok := s.kept.Window(shards, at, p); ok {
			s.hit(checked, tx)
			return pending, false, nil
		}
		pending, err := s.countOutboxRows(ctx, s.keptDB(tx), tx, shards, p, now, rec)
		return pending, err == nil && rec != nil, err
	}
	if pending, ok := s.kept.Pending(shards, at, p.CapPerRoute); ok {
		s.hit(checked, tx)
		return pending, false, nil
	}
	pending, filled, err = s.readKept(ctx, tx, shards, p.CapPerRoute, now, rec)
	if err != nil {
		return nil, false, s.fail(op, err)
	}
	return pending, filled, nil
}

// maxStaleRead is the most namespaces a read of stale namespaces names;
// with more, the store reads every namespace.
const maxStaleRead = 1000

// readKept reads the claimed counts, the pending counts at capPerRoute and
// the next instant a row turns claimable by itself — of the stale
// namespaces when the kept values know the others, else of all — in one
// read transaction (tx, or its own), and keeps them. filled: rec holds the
// rows counted (a full read).
func (s *Store) readKept(ctx context.Context, tx *sql.Tx, shards backpressure.OwnedShardFraction, capPerRoute int, now int64, rec *countedRows) ([]backpressure.RouteCount, bool, error) {
	k, at, db := s.kept, fromNanos(now), s.keptDB(tx)
	if tx == nil {
		if err := s.read(ctx); err != nil {
			return nil, false, err
		}
		var err error
		if tx, err = s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}); err != nil {
			return nil, false, err
		}
		defer func() { _ = tx.Rollback() }() // read only
		rec = nil
	}
	if names, ok := k.Stale(shards, at, capPerRoute); ok && len(names) <= maxStaleRead {
		// The kept claimed counts, when known, stand for a read of them:
		// the ticket keeps the read only if nothing changed them since.
		claimed, known := k.Claimed(shards, at)
		t := k.Ticket(at)
		claimed, routes, err := s.keptRead(ctx, db, tx, shards, capPerRoute, now, names, claimed, known, nil)
		if err != nil {
			return nil, false, err
		}
		if pending, ok := k.Refreshed(t, keptcount.Snapshot{}, shards, claimed, names, routes, capPerRoute); ok {
			return pending, false, nil
		}
	}
	t := k.Ticket(at)
	claimed, routes, err := s.keptRead(ctx, db, tx, shards, capPerRoute, now, nil, nil, false, rec)
	if err != nil {
		return nil, false, err
	}
	k.Refreshed(t, keptcount.Snapshot{}, shards, claimed, nil, routes, capPerRoute)
	pending := []backpressure.RouteCount{}
	for _, r := range routes {
		if r.Count > 0 {
			pending = append(pending, backpressure.RouteCount{Route: r.Route, Count: r.Count})
		}
	}
	return pending, rec != nil, nil
}

// keptRead reads in tx (on db), at now, on shards: the claimed counts, the routes
// of namespaces (nil: all) with claimable rows, each capped at
// capPerRoute, and, as one more entry with no route, the earliest instant
// after now at which a row of those namespaces not claimable now turns
// claimable (a run-at, a retry delay, a lease's end). A full read records
// the rows counted in rec. The claimed counts are read unless known, when
// they are claimed.
func (s *Store) keptRead(ctx context.Context, db *sql.DB, tx *sql.Tx, shards backpressure.OwnedShardFraction, capPerRoute int, now int64, namespaces []string, claimed map[string]int, known bool, rec *countedRows) (map[string]int, []keptcount.RouteRead, error) {
	var err error
	if !known {
		if claimed, err = s.countClaimed(ctx, db, tx, shards, now); err != nil {
			return nil, nil, err
		}
	}
	var pending []backpressure.RouteCount
	if namespaces == nil {
		pending, err = s.countPending(ctx, "CountPendingOutboxRows", db, tx, shards, capPerRoute, now, rec)
	} else {
		pending, err = s.countNamespaces(ctx, db, tx, shards, capPerRoute, now, namespaces)
	}
	if err != nil {
		return nil, nil, err
	}
	routes := make([]keptcount.RouteRead, 0, len(pending)+1)
	for _, c := range pending {
		routes = append(routes, keptcount.RouteRead{Route: c.Route, Count: c.Count})
	}
	due, err := s.keptDue(ctx, db, tx, shards, now, namespaces)
	if err != nil {
		return nil, nil, err
	}
	return claimed, append(routes, keptcount.RouteRead{Due: due}), nil
}

// countNamespaces is countPending of the routes of namespaces alone.
func (s *Store) countNamespaces(ctx context.Context, db *sql.DB, tx *sql.Tx, shards backpressure.OwnedShardFraction, capPerRoute int, now int64, namespaces []string) ([]backpressure.RouteCount, error) {
	cond, sarg, none, err := s.shardFilter(shards, 3)
	if err != nil || none {
		return []backpressure.RouteCount{}, err
	}
	names, err := json.Marshal(namespaces)
	if err != nil {
		return nil, err
	}
	if err := s.step(ctx); err != nil {
		return nil, err
	}
	rows, err := s.keptQuery(ctx, db, tx, namespacesCountSQL(cond), now, capPerRoute, sarg, string(names))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := []backpressure.RouteCount{}
	for rows.Next() {
		c, err := scanRouteCount(rows, countOnly, nil)
		if err != nil {
			return nil, err
		}
		if c.Count > 0 && c.Route.Validate() == nil { // as countPending
			counts = append(counts, c)
		}
	}
	return counts, rows.Err()
}

// namespacesCountSQL is countPendingSQL of the routes of the namespaces
// ?4 lists (a JSON array).
func namespacesCountSQL(cond string) string {
	return routeCountsSQL(cond, `r.namespace IN (SELECT value FROM json_each(?4))`, countOnly)
}

// keptDue returns the earliest instant after now at which a pending or
// claimed row of namespaces (nil: all) on shards turns claimable by
// itself; zero for none.
func (s *Store) keptDue(ctx context.Context, db *sql.DB, tx *sql.Tx, shards backpressure.OwnedShardFraction, now int64, namespaces []string) (time.Time, error) {
	cond, sarg, none, err := s.shardFilter(shards, 2)
	if err != nil || none {
		return time.Time{}, err
	}
	if err := s.step(ctx); err != nil {
		return time.Time{}, err
	}
	args := []any{now}
	if cond != "" || namespaces != nil {
		args = append(args, sarg) // bound even when cond does not read it, so ?3 keeps its number
	}
	if namespaces != nil {
		names, err := json.Marshal(namespaces)
		if err != nil {
			return time.Time{}, err
		}
		args = append(args, string(names))
	}
	rows, err := s.keptQuery(ctx, db, tx, keptDueSQL(cond, namespaces != nil), args...)
	if err != nil {
		return time.Time{}, err
	}
	defer rows.Close()
	var due sql.NullInt64
	if rows.Next() {
		if err := rows.Scan(&due); err != nil {
			return time.Time{}, err
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, err
	}
	if !due.Valid {
		return time.Time{}, nil
	}
	return fromNanos(due.Int64), nil
}

// keptDueSQL is keptDue's statement: ?1 now, cond the shard filter reading
// ?2, and when some, ?3 the namespaces as a JSON array. Per namespace with
// a pending or claimed row, the first entry after now of its pending rows
// (outbox_pending: a run-at or a retry delay) and of its claimed rows
// (outbox_leased: a lease's end), both keyed (namespace, ready_at, shard):
// two seeks each, as NextDue's one.
func keptDueSQL(cond string, some bool) string {
	where := ""
	if some {
		where = " WHERE namespace IN (SELECT value FROM json_each(?3))"
	}
	first := func(index string, state int) string {
		return `(SELECT o.ready_at FROM outbox o INDEXED BY ` + index + `
		WHERE o.state = ` + strconv.Itoa(state) + ` AND o.namespace = r.namespace AND o.ready_at > ?1` + cond + `
		ORDER BY o.ready_at LIMIT 1)`
	}
	names := `(SELECT DISTINCT namespace FROM outbox_routes` + where + `) r`
	return `
SELECT min(d) FROM (
	SELECT ` + first("outbox_pending", 0) + ` AS d FROM ` + names + `
	UNION ALL
	SELECT ` + first("outbox_leased", 1) + ` FROM ` + names + `)`
}

// countPendingKept is the Claimer's CountPendingOutboxRows with kept
// counts on.
func (s *Store) countPendingKept(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	const op = "CountPendingOutboxRows"
	if err := call(op).Positive("capPerRoute", capPerRoute); err != nil {
		return nil, err
	}
	pending, _, err := s.pendingKept(ctx, op, nil, shards, backpressure.CountParams{CapPerRoute: capPerRoute}, nanos(s.now()), nil)
	return pending, err
}

// countOutboxKept is the Claimer's CountOutboxRows (p.Claimed not set)
// with kept counts on.
func (s *Store) countOutboxKept(ctx context.Context, shards backpressure.OwnedShardFraction, p backpressure.CountParams) ([]backpressure.RouteCount, error) {
	const op = "CountOutboxRows"
	if err := call(op).CountParams(p); err != nil {
		return nil, err
	}
	pending, _, err := s.pendingKept(ctx, op, nil, shards, p, nanos(s.now()), nil)
	return pending, err
}
