package pgstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// windowClaimSQL is ClaimOutboxWindow's statement, fenced as [fenced]
// fences the other claims when fence is set. $1: clock, $2: lease µs, $3:
// owned shards, $4: After, $5: the namespaces to serve (n), $6: the
// namespaces to skip, $7, $8: the route cursors as parallel arrays
// (namespace, task queue), $9: all shards owned; fenced, $10: the epochs
// of the shards in $3, $11: the node.
//
// walk is windowCounts' walk at cap 1 — one index descent per route of
// outbox_route_claimable_idx, in the window's cyclic order after $4 — with
// its count k over the eligible namespaces only: not in $6, with a route
// that has a claimable row on the owned shards (c.n = 1) and is valid
// (Route.Validate: a text column holds no NUL and, in a UTF-8 database,
// only UTF-8, so only the lengths are checked). It stops at the first
// route of a new namespace once k passes $5: it reads the routes of the
// first n + 1 eligible namespaces and of those between them. served is the
// first n of them, if there are n + 1; chosen is, for each, its first
// eligible route after its route cursor in task-queue order (or its first),
// and whether it had any other route with a claimable row (other). picked
// locks the row ClaimOutboxRowsScoped with limit 1 would take on that
// route (claimableRows), highest priority first, then oldest, skipping
// locked rows; the claim's update follows (by ctid), returning each row
// with its namespace's other, joined by namespace: picked has one row per
// namespace.
func windowClaimSQL(fence bool) string {
	valid := func(r string) string {
		return `octet_length(` + r + `.namespace) BETWEEN 1 AND ` + strconv.Itoa(outbox.MaxNamespaceBytes) +
			` AND octet_length(` + r + `.task_queue) <= ` + strconv.Itoa(outbox.MaxTaskQueueBytes)
	}
	// routeCount at cap 1, with this statement's parameters.
	count := strings.NewReplacer("$3::int8", "1::int8", "$2::int4[]", "$3::int4[]").Replace(routeCount("$9::bool"))
	elig := `
	CROSS JOIN LATERAL (
		SELECT c.n > 0 AND ` + valid("nx") + ` AND NOT (nx.namespace = ANY ($6::text[])) AS elig
	) e`
	head, filter := `WITH RECURSIVE `, ""
	if fence {
		head = `WITH RECURSIVE owned AS MATERIALIZED (
	SELECT f.shard
	FROM {schema}.shard_owners f
	JOIN unnest($3::int4[], $10::int8[]) AS m (shard, epoch) ON m.shard = f.shard AND m.epoch = f.epoch
	WHERE f.owner = $11::text
		AND f.lease_expires_at > coalesce($1::timestamptz, now())
	ORDER BY f.shard
	FOR SHARE OF f
), `
		filter = `
					AND o.shard = ANY (ARRAY(SELECT owned.shard FROM owned))`
	}
	return head + `walk (namespace, task_queue, wrapped, n, elig, k, has) AS (
	SELECT nx.namespace, nx.task_queue, nx.wrapped, c.n, e.elig, e.elig::int::int8, e.elig
	FROM ` + firstWindowRoute + count + elig + `
	UNION ALL
	SELECT nx.namespace, nx.task_queue, nx.wrapped, c.n, e.elig,
		w.k + (e.elig AND NOT (w.has AND nx.namespace = w.namespace))::int::int8,
		e.elig OR (w.has AND nx.namespace = w.namespace)
	FROM walk w
	CROSS JOIN LATERAL ` + nextWindowRoute + count + elig + `
	WHERE w.k <= $5::int8 OR nx.namespace = w.namespace
), served AS (
	SELECT w.namespace, count(*) FILTER (WHERE w.n > 0) > 1 AS other
	FROM walk w
	GROUP BY w.namespace
	HAVING bool_or(w.elig) AND max(w.k) <= $5::int8
		AND (SELECT max(x.k) FROM walk x) > $5::int8
), chosen AS (
	SELECT DISTINCT ON (w.namespace) w.namespace, w.task_queue, s.other
	FROM walk w
	JOIN served s ON s.namespace = w.namespace
	LEFT JOIN unnest($7::text[], $8::text[]) AS rc (namespace, task_queue) ON rc.namespace = w.namespace
	WHERE w.elig
	ORDER BY w.namespace, (w.task_queue > rc.task_queue COLLATE "C") IS TRUE DESC, w.task_queue
), picked AS (
	SELECT p.ctid, ch.namespace, ch.other
	FROM chosen ch
	CROSS JOIN LATERAL ` + claimableRows("o.priority, o.enqueued_at, o.id", "o.priority DESC, o.enqueued_at, o.id", "1", `
					AND o.namespace = ch.namespace
					AND o.task_queue = ch.task_queue
					AND ($9::bool OR o.shard = ANY ($3::int4[]))`+filter) + ` p
), upd AS (
	UPDATE {schema}.outbox o SET
		state            = 'claimed',
		attempts         = o.attempts + 1,
		token            = nextval('{schema}.claim_token_seq'),
		claimed_at       = coalesce($1::timestamptz, now()),
		lease_expires_at = coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond'
	WHERE o.ctid = ANY (ARRAY(SELECT picked.ctid FROM picked))
	RETURNING o.*
)
SELECT ` + rowColumns + `, p.other
FROM upd o
JOIN picked p ON p.namespace = o.namespace -- one row per namespace: see chosen
ORDER BY o.namespace`
}

// ClaimOutboxWindow resolves the window rule w in one statement, as
// the window claim of [backpressure.OutboxStore] describes (see windowClaimSQL): one row of
// each of the first w.Namespaces namespaces after w.After that are not in
// w.Skip and have a claimable row on a valid route on the owned shards, if
// more than w.Namespaces such namespaces exist, from the first such route
// after the namespace's route cursor, highest priority first, then oldest.
// It reads the routes of those namespaces (and of those between them), one
// index descent each, as a window count does, and claims as
// ClaimOutboxRowsScoped does: rows another claimer holds locked are
// skipped, and on a Membership's store only the shards it holds are
// claimed, so a call may return fewer rows than w.Namespaces.
func (c windowClaimer) ClaimOutboxWindow(ctx context.Context, shards backpressure.OwnedShardFraction, window backpressure.CountParams, skip []string, routeAfter map[string]string) ([]outbox.Row, []backpressure.RouteCount, error) {
	s := (*Store)(c.claimer)
	const op = "ClaimOutboxWindow"
	if err := s.begin(ctx, op); err != nil {
		return nil, nil, err
	}
	owned, all, none, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, nil, err
	}
	w, err := call(op).Window(window, skip, routeAfter)
	if err != nil {
		return nil, nil, err
	}
	if none {
		return []outbox.Row{}, []backpressure.RouteCount{}, nil
	}
	if skip == nil {
		skip = []string{}
	}
	cursorNS := make([]string, 0, len(w.RouteAfter))
	cursorTQ := make([]string, 0, len(w.RouteAfter))
	for ns, tq := range w.RouteAfter {
		cursorNS, cursorTQ = append(cursorNS, ns), append(cursorTQ, tq)
	}
	sql := s.sql.claimWindow
	params := []any{s.clock(), s.lease.Microseconds(), owned, w.After, int64(w.Namespaces), skip, cursorNS, cursorTQ, all}
	if s.fence != nil {
		var ok bool
		if sql, params, ok = s.fence.fence(&s.sql, sql, params); !ok {
			return []outbox.Row{}, []backpressure.RouteCount{}, nil
		}
	}
	rows := []outbox.Row{}
	grants := []backpressure.RouteCount{}
	_, err = s.kept.Claim(func() ([]outbox.Row, error) {
		err := s.queryNoJIT(ctx, anyLoss, sql, params, func(res pgx.Rows) error {
			for res.Next() {
				var other bool
				r, err := scanRow(res, &other)
				if err != nil {
					return err
				}
				rows = append(rows, r)
				grants = append(grants, validate.WindowRoute(r.Route(), other))
			}
			return res.Err()
		})
		return rows, err
	})
	if err != nil {
		return nil, nil, opError(op, err)
	}
	return rows, grants, nil
}

var _ validate.WindowClaimer[outbox.Row] = windowClaimer{}
