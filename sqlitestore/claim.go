package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// shardFilter returns the SQL condition restricting rows to the owned
// shards and its one argument, to be bound as parameter ?param: a blob with
// one byte per shard, 1 where the shard is owned, which the condition reads
// with substr (one bound parameter whatever the shard count, so any
// ShardCount works on a node owning part of the shards, and an O(1) test per
// row). cond is empty, and arg nil, when every shard is owned. none reports
// that no shard is owned, so the caller can answer without a query.
func (s *Store) shardFilter(shards backpressure.OwnedShardFraction, param int) (cond string, arg []byte, none bool, err error) {
	if shards.ShardCount() != s.shardCount {
		return "", nil, false, &outbox.ShardCountError{Store: s.shardCount, Given: shards.ShardCount()}
	}
	owned := shards.Owned()
	switch len(owned) {
	case 0:
		return "", nil, true, nil
	case s.shardCount:
		return "", nil, false, nil
	}
	return ownedCond(param), ownedBitmap(owned, s.shardCount), false, nil
}

// ownedCond is the condition shardFilter returns for a node that owns part
// of the shards, reading the bitmap bound as ?param.
func ownedCond(param int) string {
	return " AND substr(?" + strconv.Itoa(param) + ", shard + 1, 1) = x'01'"
}

// ownedBitmap is the argument of ownedCond: byte i is 1 iff shard i is owned.
func ownedBitmap(owned []int, shardCount int) []byte {
	b := make([]byte, shardCount)
	for _, id := range owned {
		b[id] = 1
	}
	return b
}

// withShards appends the shard filter's argument, if it has one, to args.
func withShards(args []any, arg []byte) []any {
	if arg == nil {
		return args
	}
	return append(args, arg)
}

// countClaimed is CountClaimedOutboxRows at now, on db or in tx on db. It
// counts a round trip when tx is nil.
func (s *Store) countClaimed(ctx context.Context, db *sql.DB, tx *sql.Tx, shards backpressure.OwnedShardFraction, now int64) (map[string]int, error) {
	cond, sarg, none, err := s.shardFilter(shards, 2)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	counts := map[string]int{}
	if none {
		return counts, nil
	}
	if tx == nil {
		s.trips.Add(1)
	} else if err := s.step(ctx); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, db, tx, countClaimedSQL(cond), withShards([]any{now}, sarg)...)
	if err != nil {
		return nil, s.fail("CountClaimedOutboxRows", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ns string
		var n int
		if err := rows.Scan(&ns, &n); err != nil {
			return nil, s.fail("CountClaimedOutboxRows", err)
		}
		counts[ns] = n
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("CountClaimedOutboxRows", err)
	}
	return counts, nil
}

// countFilter is the pending counts' shard filter (reading ?3), recorded
// in rec, returned once ctx is checked.
func (s *Store) countFilter(ctx context.Context, shards backpressure.OwnedShardFraction, rec *countedRows) (cond string, sarg []byte, none bool, err error) {
	if cond, sarg, none, err = s.shardFilter(shards, 3); err != nil {
		return "", nil, false, err
	}
	rec.filter(sarg, none)
	return cond, sarg, none, ctx.Err()
}

// countPending is CountPendingOutboxRows at now, on db or in tx on db,
// recording the rows counted in rec (when not nil), for the store method
// op. It counts a round trip when tx is nil.
func (s *Store) countPending(ctx context.Context, op string, db *sql.DB, tx *sql.Tx, shards backpressure.OwnedShardFraction, capPerRoute int, now int64, rec *countedRows) ([]backpressure.RouteCount, error) {
	if err := call(op).Positive("capPerRoute", capPerRoute); err != nil {
		return nil, err
	}
	cond, sarg, none, err := s.countFilter(ctx, shards, rec)
	if err != nil {
		return nil, err
	}
	if none {
		return []backpressure.RouteCount{}, nil
	}
	if tx == nil {
		s.trips.Add(1)
	} else if err := s.step(ctx); err != nil {
		return nil, err
	}
	mode, ids := modeFor(rec, capPerRoute), rec.byRoute()
	rows, err := s.query(ctx, db, tx, routeCountsSQL(cond, "", mode), withShards([]any{now, capPerRoute}, sarg)...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	counts := []backpressure.RouteCount{}
	for rows.Next() {
		c, err := scanRouteCount(rows, mode, ids)
		if err != nil {
			return nil, s.fail(op, err)
		}
		// Filtering here rather than in SQL keeps SQLite from evaluating
		// the count subquery twice. A route no claim can name (one that
		// backpressure.Route.Validate refuses, written by an older version
		// or by hand) is left out, so the planner never puts it in a claim
		// that would be refused.
		if c.Count > 0 && c.Route.Validate() == nil {
			counts = append(counts, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return counts, nil
}

// scanRouteCount scans a row of routeCountsSQL in mode, recording the IDs
// of the other modes in ids, in claim order (highest priority first, then
// oldest).
func scanRouteCount(rows *sql.Rows, mode countMode, ids map[backpressure.Route][]int64) (backpressure.RouteCount, error) {
	var c backpressure.RouteCount
	switch mode {
	case countOnly:
		err := rows.Scan(&c.Route.Namespace, &c.Route.TaskQueue, &c.Count)
		return c, err
	case countFirstID:
		var id sql.NullInt64
		if err := rows.Scan(&c.Route.Namespace, &c.Route.TaskQueue, &id); err != nil || !id.Valid {
			return c, err
		}
		ids[c.Route] = []int64{id.Int64}
		c.Count = 1
		return c, nil
	}
	var list sql.NullString
	if err := rows.Scan(&c.Route.Namespace, &c.Route.TaskQueue, &list); err != nil {
		return c, err
	}
	if !list.Valid || list.String == "" {
		return c, nil
	}
	got, err := claimOrderIDs(list.String)
	if err != nil {
		return c, fmt.Errorf("row IDs of %s: %w", c.Route, err)
	}
	ids[c.Route] = got
	c.Count = len(got)
	return c, nil
}

// claimSet is the SET and RETURNING of every claim: ?1 token, ?2 now,
// ?3 lease end.
const (
	claimSet = `UPDATE outbox SET state = 1, attempts = attempts + 1, token = ?1,
	claimed_at = ?2, lease_expires_at = ?3, ready_at = ?3`
	claimReturning = ` RETURNING id, dispatch_key, namespace, task_queue, shard, payload, attempts, enqueued_at,
	max_attempts, run_at, last_error, -claim_rank, headers, snoozes`
)

// ClaimOutboxRowsScoped claims, in one write transaction (all or nothing),
// at most Limit claimable rows of each claim's route on the owned shards,
// highest Message.Priority first, then oldest (lowest ID), and returns
// them grouped by claim in the claims' order, in claim order within each,
// with a new lease of
// Options.Lease and one fresh token for the whole claim. Rows it does not
// return are not touched.
//
// It fails with an *outbox.ArgumentError, before anything is claimed, when
// a Limit is < 1, when a route is named by two claims (the planner never
// does; summing or picking a limit would be a guess), or when
// backpressure.Route.Validate refuses a route (Enqueue refuses such rows, so
// no row could match).
//
// The claim is one statement for all scopes: a recursive query walks each
// route's claimable rows in ID order through the route index, one seek per
// claimed row, with no per-route statement overhead. Its cost is
// O(Σ Limit · log rows) plus the index entries it steps over: within each
// named route's range of the route index, the delayed rows (retried, not yet
// visible), the rows under a live lease and, on a node owning part of the
// shards, the rows on shards it does not own, that lie before the route's
// Limit-th claimable row (or all of them, when the route has fewer).
func (c *claimer) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]outbox.Row, error) {
	s := (*Store)(c)
	if err := s.writable(); err != nil {
		return nil, s.fail("ClaimOutboxRowsScoped", err)
	}
	if err := checkClaims("ClaimOutboxRowsScoped", claims); err != nil {
		return nil, err
	}
	cond, sarg, none, err := s.shardFilter(shards, 7)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if none || len(claims) == 0 {
		return []outbox.Row{}, nil
	}
	rows, err := s.writeClaim(ctx, func(tx *sql.Tx, now int64) ([]outbox.Row, error) {
		return s.claimScoped(ctx, tx, cond, sarg, claims, now)
	})
	if err != nil {
		return nil, err
	}
	return inClaimOrder(rows, claims), nil
}

// inClaimOrder sorts rows, claimed by claims and in ID (enqueue) order, into
// the order ClaimOutboxRowsScoped returns: grouped by claim in the claims'
// order and, within a claim, highest priority first, then oldest. Each
// row's claim is looked up once (not once per comparison), and rows
// already in that order are returned as they are. Cost: O(n log claims)
// for the look-ups, plus O(n log n) when the rows must move.
func inClaimOrder(rows []outbox.Row, claims []backpressure.ScopedClaim) []outbox.Row {
	index := claimIndex(claims)
	keys := make([]claimKey, len(rows))
	for i := range rows {
		keys[i] = claimKey{claim: index(rows[i].Route()), rank: -rows[i].Priority, id: rows[i].ID, at: i}
	}
	if slices.IsSortedFunc(keys, claimKey.compare) {
		return rows
	}
	slices.SortFunc(keys, claimKey.compare)
	out := make([]outbox.Row, len(rows))
	for i, k := range keys {
		out[i] = rows[k.at]
	}
	return out
}

// claimKey is where a claimed row goes in claim order: its claim's index,
// its claim rank (negated priority) and its ID, which no two rows share,
// so the order is total; at is the row's index before sorting.
type claimKey struct {
	claim, rank int
	id          int64
	at          int
}

func (a claimKey) compare(b claimKey) int {
	return cmp.Or(cmp.Compare(a.claim, b.claim), cmp.Compare(a.rank, b.rank), cmp.Compare(a.id, b.id))
}

// inListOrder puts rows, in ID order, into the order of ids, which lists
// the ID of every row (and perhaps IDs of no row) in the order wanted, and
// returns them. It serves a claim by the IDs a count listed in claim
// order, whose rows are then in claim order with no comparison of routes.
// It moves the rows in place, each once: one binary search per ID, then
// the permutation's cycles.
func inListOrder(rows []outbox.Row, ids []int64) []outbox.Row {
	from := make([]int, 0, len(rows)) // from[k]: the index in rows of the k-th row wanted
	for _, id := range ids {
		if i := sort.Search(len(rows), func(i int) bool { return rows[i].ID >= id }); i < len(rows) && rows[i].ID == id {
			from = append(from, i)
		}
	}
	if len(from) != len(rows) { // a row ids does not list: no claim by ID returns one
		return rows
	}
	for start := range from {
		if from[start] < 0 || from[start] == start {
			continue
		}
		held, k := rows[start], start
		for from[k] != start {
			rows[k], from[k], k = rows[from[k]], -1, from[k]
		}
		rows[k], from[k] = held, -1
	}
	return rows
}

// claimIndex returns a function giving the index in claims of the claim
// naming a route: a binary search when claims are in route order, else a
// map built once.
func claimIndex(claims []backpressure.ScopedClaim) func(backpressure.Route) int {
	if len(claims) < 2 {
		return func(backpressure.Route) int { return 0 }
	}
	if !slices.IsSortedFunc(claims, func(a, b backpressure.ScopedClaim) int { return a.Route.Compare(b.Route) }) {
		at := make(map[backpressure.Route]int, len(claims))
		for i, c := range claims {
			at[c.Route] = i
		}
		return func(r backpressure.Route) int { return at[r] }
	}
	byRoute := func(a backpressure.ScopedClaim, r backpressure.Route) int { return a.Route.Compare(r) }
	return func(r backpressure.Route) int { i, _ := slices.BinarySearchFunc(claims, r, byRoute); return i }
}

// writeClaim runs claim in one write transaction at the store's now.
func (s *Store) writeClaim(ctx context.Context, claim func(tx *sql.Tx, now int64) ([]outbox.Row, error)) ([]outbox.Row, error) {
	out, err := s.kept.Claim(func() (out []outbox.Row, err error) {
		err = s.write(ctx, func(tx *sql.Tx) (err error) {
			out, err = claim(tx, nanos(s.now()))
			return err
		})
		return out, err
	})
	if err != nil {
		return nil, s.fail("claim", err)
	}
	return out, nil
}

// checkClaims validates claims as ClaimOutboxRowsScoped documents.
func checkClaims(op string, claims []backpressure.ScopedClaim) error {
	return call(op).Claims(claims)
}

// claimScoped runs the scoped claim statement for claims at now in tx: the
// scopes go to SQLite as a JSON array of [namespace, task queue, limit].
func (s *Store) claimScoped(ctx context.Context, tx *sql.Tx, cond string, sarg []byte, claims []backpressure.ScopedClaim, now int64) ([]outbox.Row, error) {
	scopes := make([][3]any, len(claims))
	for i, c := range claims {
		scopes[i] = [3]any{c.Route.Namespace, c.Route.TaskQueue, c.Limit}
	}
	scopeJSON, err := json.Marshal(scopes)
	if err != nil {
		return nil, err
	}
	// ?5 and ?6 are unused here; binding them keeps the numbering shared.
	most := 0 // Σ Limit, saturating at maxPresize
	for _, c := range claims {
		most = min(maxPresize, most+min(c.Limit, maxPresize))
	}
	return s.claimIn(ctx, tx, scopedClaimSQL(cond), sarg, now, most, string(scopeJSON), nil, nil)
}

// ClaimOutboxRowsUnscoped claims, in one write transaction, the limit oldest
// claimable rows on the owned shards whatever their route: the plain
// oldest-first claim with no fairness, the baseline the benchmarks compare
// a fair sweep against. A limit < 1 fails with an *outbox.ArgumentError. It walks
// the claimable index in ID order from the oldest pending or claimed row,
// stepping over the scheduled, leased and unowned rows before the
// limit-th claimable one.
func (c *claimer) ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error) {
	s := (*Store)(c)
	if err := s.writable(); err != nil {
		return nil, s.fail("ClaimOutboxRowsUnscoped", err)
	}
	if err := call("ClaimOutboxRowsUnscoped").Positive("limit", limit); err != nil {
		return nil, err
	}
	cond, sarg, none, err := s.shardFilter(shards, 7)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if none {
		return []outbox.Row{}, nil
	}
	return s.writeClaim(ctx, func(tx *sql.Tx, now int64) ([]outbox.Row, error) {
		// ?4 and ?5 are unused here; binding them keeps the numbering shared.
		return s.claimIn(ctx, tx, unscopedClaimSQL(cond), sarg, now, limit, nil, nil, limit)
	})
}

// maxPresize bounds the rows a claim allocates room for before it reads
// them, so that a large limit on a small outbox costs no large allocation.
const maxPresize = 256

// claimIn runs a claim statement q in tx at now: it takes a fresh token
// and binds ?1 token, ?2 now, ?3 lease end, ?4..?6 from p4, p5 and p6, and
// the shard filter's argument (when there is one) as ?7. most is the most
// rows the claim can return, to size the result.
func (s *Store) claimIn(ctx context.Context, tx *sql.Tx, q string, sarg []byte, now int64, most int, p4, p5, p6 any) ([]outbox.Row, error) {
	token, err := s.nextToken(ctx, tx)
	if err != nil {
		return nil, err
	}
	at := fromNanos(now)
	leaseEnd := fromNanos(addNanos(now, s.lease))
	args := withShards([]any{token, now, nanos(leaseEnd), p4, p5, p6}, sarg)
	if err := s.step(ctx); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, s.writer, tx, q, args...)
	if err != nil {
		return nil, err
	}
	return collect(make([]outbox.Row, 0, max(0, min(most, maxPresize))), rows, token, at, leaseEnd)
}

// nextTokenSQL takes the next claim token.
const nextTokenSQL = `UPDATE outbox_meta SET value = value + 1 WHERE key = 'last_token' RETURNING value`

// nextToken takes the next claim token: a counter that only grows.
func (s *Store) nextToken(ctx context.Context, tx *sql.Tx) (int64, error) {
	if err := s.step(ctx); err != nil {
		return 0, err
	}
	rows, err := s.query(ctx, s.writer, tx, nextTokenSQL)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var token int64
	if !rows.Next() {
		return 0, errors.Join(errors.New("sqlitestore: the claim token counter is missing"), rows.Err())
	}
	if err := rows.Scan(&token); err != nil {
		return 0, err
	}
	return token, rows.Close()
}

// collect appends the rows a claim statement returned, in ID order.
func collect(out []outbox.Row, rows *sql.Rows, token int64, now, leaseEnd time.Time) ([]outbox.Row, error) {
	defer rows.Close()
	start := len(out)
	for rows.Next() {
		r := outbox.Row{State: outbox.StateClaimed, Token: token, ClaimedAt: now, LeaseExpiresAt: leaseEnd}
		var enqueued, runAt int64
		var headers []byte
		if err := rows.Scan(&r.ID, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &r.Shard, &r.Payload, &r.Attempts, &enqueued,
			&r.MaxAttempts, &runAt, &r.LastError, &r.Priority, &headers, &r.Snoozes); err != nil {
			return out, err
		}
		r.EnqueuedAt, r.RunAt = fromNanos(enqueued), fromNanos(runAt)
		if len(headers) > 0 {
			h, err := outbox.DecodeHeaders(headers)
			if err != nil {
				return out, err
			}
			r.Headers = h
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	if !byID(out[start:]) {
		slices.SortFunc(out[start:], func(a, b outbox.Row) int { return cmp.Compare(a.ID, b.ID) })
	}
	return out, nil
}

// byID reports whether rows are in ID order, as a claim by ID or the
// unscoped claim returns them: checked in place, where a sort's
// comparisons would copy two whole rows each.
func byID(rows []outbox.Row) bool {
	for i := 1; i < len(rows); i++ {
		if rows[i-1].ID > rows[i].ID {
			return false
		}
	}
	return true
}

// claimOrderIDs parses a countIDs list (see rankedID): one entry per row,
// "id" for a row of rank 0 (no priority) or "id:rank", in the order SQLite
// aggregated them, into the IDs in claim order: by rank (highest priority
// first), then ID (oldest first). Rows that arrive in that order, as the
// route index yields them, are not moved; the order does not rest on it.
func claimOrderIDs(list string) ([]int64, error) {
	keys := make([]claimKey, 0, strings.Count(list, ",")+1)
	for f := range strings.SplitSeq(list, ",") {
		idText, rankText, ranked := strings.Cut(f, ":")
		id, err := parseDecimal(idText)
		if err != nil {
			return nil, err
		}
		k := claimKey{id: id}
		if ranked {
			if k.rank, err = strconv.Atoi(rankText); err != nil {
				return nil, err
			}
		}
		keys = append(keys, k)
	}
	if !slices.IsSortedFunc(keys, claimKey.compare) {
		slices.SortFunc(keys, claimKey.compare)
	}
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = k.id
	}
	return ids, nil
}

// parseDecimal is strconv.ParseInt(s, 10, 64) with a fast path for what a
// count lists, a row ID: at most 18 digits (below 10¹⁸, so no overflow),
// no sign. A sweep parses about one per row it claims.
func parseDecimal(s string) (int64, error) {
	if len(s) == 0 || len(s) > 18 {
		return strconv.ParseInt(s, 10, 64)
	}
	var n int64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return strconv.ParseInt(s, 10, 64)
		}
		n = n*10 + int64(d)
	}
	return n, nil
}

// countClaimedSQL is CountClaimedOutboxRows's statement: ?1 now, cond the
// shard filter (parameter ?2). It reads only outbox_leased, whose
// namespace order is the GROUP BY's.
func countClaimedSQL(cond string) string {
	return `
SELECT namespace, count(*) FROM outbox
WHERE state = 1 AND ready_at > ?1` + cond + `
GROUP BY namespace`
}

// countPendingSQL is CountPendingOutboxRows's statement: ?1 now, ?2 the cap,
// cond the shard filter (parameter ?3). Per route, it walks the route's
// range of the route index and stops at the cap-th claimable row.
func countPendingSQL(cond string) string {
	return routeCountsSQL(cond, "", countOnly)
}

// countMode is what routeCountsSQL returns for each route.
type countMode int

const (
	countOnly    countMode = iota // the capped count
	countIDs                      // the IDs of the rows counted with their claim ranks, "id,id:rank,…" (see claimOrderIDs; NULL for none)
	countFirstID                  // the ID of the first row, for a cap of 1 (NULL for none)
)

// modeFor is the countMode of a count at capPerRoute that records IDs in
// rec, or only counts when rec is nil.
func modeFor(rec *countedRows, capPerRoute int) countMode {
	switch {
	case rec == nil:
		return countOnly
	case capPerRoute == 1:
		return countFirstID
	}
	return countIDs
}

// rankedID is a counted row's entry in a countIDs list: its ID, followed
// by ":" and its claim rank when that is not 0. Most rows have no priority,
// so most entries are the bare ID, and the count aggregates one value per
// row: two lists, "ids;ranks", one aggregate each, cost about 2k
// instructions more per row drained (BenchmarkDrainCost, callgrind).
const rankedID = `CASE o.claim_rank WHEN 0 THEN o.id ELSE o.id || ':' || o.claim_rank END`

// routeCountsSQL lists outbox_routes in key order with each route's capped
// claimable count (?1 now, ?2 the cap, cond the shard filter), restricted
// by where when it is not empty. The third column is the count, or in the
// other modes the IDs of the rows counted: what a sweep transaction counts
// with, to claim those rows without finding them again.
func routeCountsSQL(cond, where string, mode countMode) string {
	if where != "" {
		where = "\nWHERE " + where
	}
	rows := `
		SELECT o.id FROM outbox o
		WHERE o.namespace = r.namespace AND o.task_queue = r.task_queue
		  AND o.state < 2 AND o.ready_at <= ?1` + cond + `
		ORDER BY o.claim_rank, o.id -- the index's order, so free; the IDs must be the ones a claim takes first
		LIMIT ?2`
	if mode == countFirstID {
		// The first row's ID, or NULL: with a cap of 1 the probe itself,
		// with no aggregate over it.
		rows = strings.Replace(rows, "LIMIT ?2", "LIMIT 1", 1)
	} else {
		// The IDs with their claim ranks (see rankedID), which
		// claimOrderIDs puts in claim order (highest priority first, then
		// oldest) for the claim by ID to take the first of. Each entry
		// carries its own rank, so the list is right whatever order
		// SQLite feeds the aggregate; an ORDER BY in the aggregate would
		// sort every route's rows again in SQL, though the route index
		// already yields them in that order.
		agg := [...]string{countOnly: "count(*)", countIDs: "group_concat(e)"}[mode]
		if mode == countIDs {
			rows = strings.Replace(rows, "SELECT o.id FROM", "SELECT "+rankedID+" AS e FROM", 1)
		}
		rows = `
	SELECT ` + agg + ` FROM (` + rows + `)`
	}
	return `
SELECT r.namespace, r.task_queue, (` + rows + `)
FROM outbox_routes r` + where + `
ORDER BY r.namespace, r.task_queue`
}

// scopedClaimSQL is ClaimOutboxRowsScoped's statement: ?1 token, ?2 now,
// ?3 lease end, ?4 the scopes as a JSON array of [namespace, task queue,
// limit], cond the shard filter (parameter ?7). Each scope walks its route
// in the route index's order, highest priority (lowest claim_rank) first,
// then oldest, one row per recursive step: the next row of the same rank
// after the last (an equality and a range on the index: one seek), else the
// first row of a lower priority (one more seek). A row-value range
// (claim_rank, id) > (r, i) would say it in one, but SQLite seeks it on
// claim_rank alone and filters a whole priority's rows at every step.
func scopedClaimSQL(cond string) string {
	next := `SELECT o.id FROM outbox o
		WHERE o.namespace = %[1]s.namespace AND o.task_queue = %[1]s.task_queue
		  AND o.state < 2 AND o.ready_at <= ?2` + cond + `%[2]s
		ORDER BY o.claim_rank, o.id LIMIT 1`
	rank := "(SELECT q.claim_rank FROM outbox q WHERE q.id = p.id)"
	return `WITH RECURSIVE
	scope(namespace, task_queue, lim) AS (
		SELECT value->>0, value->>1, value->>2 FROM json_each(?4)),
	pick(namespace, task_queue, lim, id, n) AS (
		SELECT namespace, task_queue, lim, (` + fmt.Sprintf(next, "scope", "") + `), 1 FROM scope
		UNION ALL
		SELECT namespace, task_queue, lim, coalesce((` + fmt.Sprintf(next, "p", " AND o.claim_rank = "+rank+" AND o.id > p.id") + `),
			(` + fmt.Sprintf(next, "p", " AND o.claim_rank > "+rank) + `)), n + 1
		FROM pick p WHERE p.n < p.lim AND p.id IS NOT NULL)
` + claimSet + `
WHERE id IN (SELECT id FROM pick WHERE id IS NOT NULL)` + claimReturning
}

// unscopedClaimSQL is ClaimOutboxRowsUnscoped's statement: ?1 token, ?2 now,
// ?3 lease end, ?6 the limit, cond the shard filter (parameter ?7).
func unscopedClaimSQL(cond string) string {
	return claimSet + `
WHERE id IN (
	SELECT id FROM outbox
	WHERE state < 2 AND ready_at <= ?2` + cond + `
	ORDER BY id LIMIT ?6)` + claimReturning
}
