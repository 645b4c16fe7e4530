package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure"
)

// shardFilter returns the SQL condition restricting rows to the owned
// shards, with numbered parameters from ?first on, and their arguments.
// It is empty when every shard is owned. none reports that no shard is
// owned, so the caller can answer without a query.
func (s *Store) shardFilter(shards backpressure.OwnedShardFraction, first int) (cond string, args []any, none bool, err error) {
	if shards.ShardCount() != s.shardCount {
		return "", nil, false, &ShardCountError{Store: s.shardCount, Given: shards.ShardCount()}
	}
	owned := shards.Owned()
	switch len(owned) {
	case 0:
		return "", nil, true, nil
	case s.shardCount:
		return "", nil, false, nil
	}
	var b strings.Builder
	b.WriteString(" AND shard IN (")
	for i, id := range owned {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("?" + strconv.Itoa(first+i))
		args = append(args, id)
	}
	b.WriteByte(')')
	return b.String(), args, false, nil
}

// CountClaimedOutboxRows returns, per namespace, the rows on the owned
// shards that hold a live lease now (pending, expired and settled rows are
// not counted; namespaces with none are left out). One read statement over
// the live-lease index: O(live leases).
func (s *Store) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	cond, sargs, none, err := s.shardFilter(shards, 2)
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
	s.trips.Add(1)
	rows, err := s.reader.QueryContext(ctx, `
SELECT namespace, count(*) FROM outbox
WHERE state = 1 AND ready_at > ?1`+cond+`
GROUP BY namespace`, append([]any{nanos(s.now())}, sargs...)...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count claimed: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ns string
		var n int
		if err := rows.Scan(&ns, &n); err != nil {
			return nil, fmt.Errorf("sqlitestore: count claimed: %w", err)
		}
		counts[ns] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: count claimed: %w", err)
	}
	return counts, nil
}

// CountPendingOutboxRows returns, per route with claimable rows on the owned
// shards (visible pending rows and rows whose lease expired), the number of
// such rows capped at capPerRoute (≥ 1, else ErrInvalidArgument), sorted by
// namespace and task queue (the order the planner is fastest with). One read
// statement; it never counts past the cap, so its cost is
// O(routes × min(backlog, capPerRoute)) index entries, not the backlog.
func (s *Store) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	if capPerRoute < 1 {
		return nil, &ArgumentError{Name: "capPerRoute", Value: capPerRoute, Reason: "must be ≥ 1"}
	}
	cond, sargs, none, err := s.shardFilter(shards, 3)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if none {
		return []backpressure.RouteCount{}, nil
	}
	s.trips.Add(1)
	rows, err := s.reader.QueryContext(ctx, `
SELECT r.namespace, r.task_queue, (
	SELECT count(*) FROM (
		SELECT 1 FROM outbox o
		WHERE o.namespace = r.namespace AND o.task_queue = r.task_queue
		  AND o.state < 2 AND o.ready_at <= ?1`+cond+`
		LIMIT ?2))
FROM outbox_routes r
ORDER BY r.namespace, r.task_queue`, append([]any{nanos(s.now()), capPerRoute}, sargs...)...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count pending: %w", err)
	}
	defer rows.Close()
	counts := []backpressure.RouteCount{}
	for rows.Next() {
		var c backpressure.RouteCount
		if err := rows.Scan(&c.Route.Namespace, &c.Route.TaskQueue, &c.Count); err != nil {
			return nil, fmt.Errorf("sqlitestore: count pending: %w", err)
		}
		// Filtering here rather than in SQL keeps SQLite from evaluating
		// the count subquery twice.
		if c.Count > 0 {
			counts = append(counts, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: count pending: %w", err)
	}
	return counts, nil
}

// claimSet is the SET and RETURNING of every claim: ?1 token, ?2 now,
// ?3 lease end.
const (
	claimSet = `UPDATE outbox SET state = 1, attempts = attempts + 1, token = ?1,
	claimed_at = ?2, lease_expires_at = ?3, ready_at = ?3`
	claimReturning = ` RETURNING id, dispatch_key, namespace, task_queue, shard, payload, attempts, enqueued_at`
)

// ClaimOutboxRowsScoped claims, in one write transaction (all or nothing),
// at most Limit claimable rows of each claim's route on the owned shards,
// oldest (lowest ID) first, and returns them in ID order with a new lease of
// Options.Lease and one fresh token for the whole claim. A route named twice
// is claimed up to the sum of its limits. Rows it does not return are not
// touched. A Limit < 1 fails with ErrInvalidArgument before anything is
// claimed.
//
// The claim is one statement for all scopes: a recursive query walks each
// route's claimable rows in ID order through the route index, one seek per
// row, so its cost is O(Σ Limit · log rows) whatever the backlog, with no
// per-route statement overhead.
func (s *Store) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]Row, error) {
	limits := make(map[backpressure.Route]int, len(claims))
	scopes := make([][3]any, 0, len(claims))
	for i, c := range claims {
		if c.Limit < 1 {
			return nil, &ArgumentError{Name: "claims[" + strconv.Itoa(i) + "].Limit", Value: c.Limit, Reason: "must be ≥ 1"}
		}
		if _, dup := limits[c.Route]; !dup {
			scopes = append(scopes, [3]any{c.Route.Namespace, c.Route.TaskQueue, 0})
		}
		limits[c.Route] += c.Limit
	}
	for i, sc := range scopes {
		scopes[i][2] = limits[backpressure.Route{Namespace: sc[0].(string), TaskQueue: sc[1].(string)}]
	}
	cond, sargs, none, err := s.shardFilter(shards, 7)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if none || len(claims) == 0 {
		return []Row{}, nil
	}
	scopeJSON, err := json.Marshal(scopes)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	next := `SELECT o.id FROM outbox o
		WHERE o.namespace = %[1]s.namespace AND o.task_queue = %[1]s.task_queue
		  AND o.state < 2 AND o.ready_at <= ?2` + cond + `%[2]s
		ORDER BY o.id LIMIT 1`
	q := `WITH RECURSIVE
	scope(namespace, task_queue, lim) AS (
		SELECT value->>0, value->>1, value->>2 FROM json_each(?4)),
	pick(namespace, task_queue, lim, id, n) AS (
		SELECT namespace, task_queue, lim, (` + fmt.Sprintf(next, "scope", "") + `), 1 FROM scope
		UNION ALL
		SELECT namespace, task_queue, lim, (` + fmt.Sprintf(next, "p", " AND o.id > p.id") + `), n + 1
		FROM pick p WHERE p.n < p.lim AND p.id IS NOT NULL)
` + claimSet + `
WHERE id IN (SELECT id FROM pick WHERE id IS NOT NULL)` + claimReturning
	var out []Row
	err = s.write(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		token, err := s.nextToken(ctx, tx)
		if err != nil {
			return err
		}
		now := fromNanos(nanos(s.now()))
		leaseEnd := now.Add(s.lease)
		// ?5 and ?6 are unused here; binding them keeps the numbering shared.
		args := append([]any{token, nanos(now), nanos(leaseEnd), string(scopeJSON), nil, nil}, sargs...)
		if err := s.step(ctx); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		out, err = collect(out, rows, token, now, leaseEnd)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	return out, nil
}

// ClaimOutboxRowsUnscoped claims, in one write transaction, the limit oldest
// claimable rows on the owned shards whatever their route: the plain
// oldest-first claim with no fairness, the baseline the benchmarks compare
// a fair sweep against. A limit < 1 fails with ErrInvalidArgument.
func (s *Store) ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]Row, error) {
	if limit < 1 {
		return nil, &ArgumentError{Name: "limit", Value: limit, Reason: "must be ≥ 1"}
	}
	cond, sargs, none, err := s.shardFilter(shards, 7)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if none {
		return []Row{}, nil
	}
	q := claimSet + `
WHERE id IN (
	SELECT id FROM outbox
	WHERE state < 2 AND ready_at <= ?2` + cond + `
	ORDER BY id LIMIT ?6)` + claimReturning
	var out []Row
	err = s.write(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		token, err := s.nextToken(ctx, tx)
		if err != nil {
			return err
		}
		now := fromNanos(nanos(s.now()))
		leaseEnd := now.Add(s.lease)
		// ?4 and ?5 are unused here; binding them keeps the numbering shared.
		args := append([]any{token, nanos(now), nanos(leaseEnd), nil, nil, limit}, sargs...)
		if err := s.step(ctx); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		out, err = collect(out, rows, token, now, leaseEnd)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	return out, nil
}

// nextToken takes the next claim token: a counter that only grows.
func (s *Store) nextToken(ctx context.Context, tx *sql.Tx) (int64, error) {
	if err := s.step(ctx); err != nil {
		return 0, err
	}
	var token int64
	err := tx.QueryRowContext(ctx, `UPDATE outbox_meta SET value = value + 1 WHERE key = 'last_token' RETURNING value`).Scan(&token)
	return token, err
}

// collect appends the rows a claim statement returned, in ID order.
func collect(out []Row, rows *sql.Rows, token int64, now, leaseEnd time.Time) ([]Row, error) {
	defer rows.Close()
	start := len(out)
	for rows.Next() {
		r := Row{Token: token, ClaimedAt: now, LeaseExpiresAt: leaseEnd}
		var enqueued int64
		if err := rows.Scan(&r.ID, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &r.Shard, &r.Payload, &r.Attempts, &enqueued); err != nil {
			return out, err
		}
		r.EnqueuedAt = fromNanos(enqueued)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	slices.SortFunc(out[start:], func(a, b Row) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
