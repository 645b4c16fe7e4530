package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Operator = (*Store)(nil)

// namespaceCountsSQL counts the namespaces of the CTE names(name), each
// count capped by a LIMIT at $2; $1 is the clock. The pending, dead and
// settled counts are each a range of outbox_namespace_state_idx, so they
// read at most $2 entries each. That index leaves claimed rows out (a claim
// adds no entry to it): the claimed counts are ranges of
// outbox_live_lease_idx (lease_expires_at over claimed rows; a claimed
// row's claimable_at is its lease_expires_at) with the namespace checked
// in the index entry, so they read at most the claimed rows of every
// namespace, which the ceilings bound. The ready rows' earliest
// claimable_at per state is the first entry of its range: one entry for
// the pending rows, the first of the namespace's for the claimed ones.
const namespaceCountsSQL = `
SELECT n.name, c.*
FROM names n, (SELECT coalesce($1::timestamptz, now()) AS now) t, LATERAL (SELECT
	(SELECT count(*) FROM (SELECT FROM {schema}.outbox o WHERE o.namespace = n.name AND o.state = 'pending' AND o.claimable_at <= t.now LIMIT $2) x),
	(SELECT count(*) FROM (SELECT FROM {schema}.outbox o WHERE o.state = 'claimed' AND o.lease_expires_at <= t.now AND o.namespace = n.name LIMIT $2) x),
	(SELECT count(*) FROM (SELECT FROM {schema}.outbox o WHERE o.namespace = n.name AND o.state = 'pending' AND o.claimable_at > t.now LIMIT $2) x),
	(SELECT count(*) FROM (SELECT FROM {schema}.outbox o WHERE o.state = 'claimed' AND o.lease_expires_at > t.now AND o.namespace = n.name LIMIT $2) x),
	(SELECT count(*) FROM (SELECT FROM {schema}.outbox o WHERE o.namespace = n.name AND o.state = 'dead' LIMIT $2) x),
	(SELECT count(*) FROM (SELECT FROM {schema}.outbox o WHERE o.namespace = n.name AND o.state = 'settled' LIMIT $2) x),
	least(
		(SELECT o.claimable_at FROM {schema}.outbox o WHERE o.namespace = n.name AND o.state = 'pending' AND o.claimable_at <= t.now ORDER BY o.claimable_at LIMIT 1),
		(SELECT o.lease_expires_at FROM {schema}.outbox o WHERE o.state = 'claimed' AND o.lease_expires_at <= t.now AND o.namespace = n.name ORDER BY o.lease_expires_at LIMIT 1)),
	t.now
) c
ORDER BY n.name`

// namespacesOneSQL is the counts of the one namespace $3.
const namespacesOneSQL = `
WITH names(name) AS (SELECT $3::text)` + namespaceCountsSQL

// namespacesPageSQL is the counts of the next $4 namespaces after $3,
// found by a loose scan of outbox_namespace_state_idx (every row but the
// claimed ones) and of outbox_route_claimable_idx (pending and claimed
// rows), whose union holds every row: two index probes per namespace.
var namespacesPageSQL = `
WITH RECURSIVE ns(name, k) AS (
	SELECT ` + nextNamespace("$3::text") + `, 1
	UNION ALL
	SELECT ` + nextNamespace("ns.name") + `, ns.k + 1
	FROM ns WHERE ns.name IS NOT NULL AND ns.k < $4::int
), names(name) AS (SELECT name FROM ns WHERE name IS NOT NULL)` + namespaceCountsSQL

// nextNamespace is the first namespace after after with a row in any
// state: the lesser of the first in outbox_namespace_state_idx (whose
// predicate leaves out claimed rows) and the first in
// outbox_route_claimable_idx (pending and claimed rows).
func nextNamespace(after string) string {
	return `least(
		(SELECT min(o.namespace) FROM {schema}.outbox o WHERE o.state <> 'claimed' AND o.namespace > ` + after + `),
		(SELECT min(o.namespace) FROM {schema}.outbox o WHERE o.state IN ('pending', 'claimed') AND o.namespace > ` + after + `))`
}

// Namespaces returns the state of the namespaces p selects (see
// [outbox.Operator]) in one statement, so every count is of one snapshot.
// Cost: two index probes per namespace for the page, then per namespace
// five range reads of outbox_namespace_state_idx of at most p.Cap entries
// each, and three of outbox_live_lease_idx (the claimed rows) of at most
// every claimed row each: O(namespaces × (log n + p.Cap + claimed));
// docs/operate-explain.md shows the plans.
// Bad params are an [*outbox.ArgumentError].
func (s *Store) Namespaces(ctx context.Context, p outbox.NamespacesParams) ([]outbox.NamespaceState, error) {
	const op = "Namespaces"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	q, args := s.operateSQL(namespacesPageSQL), []any{s.clock(), int64(p.Cap), p.After, int64(p.Limit)}
	if p.Namespace != "" {
		q, args = s.operateSQL(namespacesOneSQL), []any{s.clock(), int64(p.Cap), p.Namespace}
	}
	var out []outbox.NamespaceState
	err = s.run(ctx, anyLoss, func() error {
		out = out[:0]
		return s.indexRangesOnly(ctx, q, args, func(rows pgx.Rows) error {
			return scanNamespaces(rows, p, &out)
		})
	})
	if err != nil {
		return nil, opError(op, err)
	}
	if out == nil {
		out = []outbox.NamespaceState{}
	}
	return out, nil
}

// scanNamespaces appends the states of Namespaces' rows to out.
func scanNamespaces(rows pgx.Rows, p outbox.NamespacesParams, out *[]outbox.NamespaceState) error {
	for rows.Next() {
		var name string
		var n [6]int64
		var since *time.Time
		var now time.Time
		if err := rows.Scan(&name, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &since, &now); err != nil {
			return err
		}
		capN := int64(p.Cap)
		st := outbox.NamespaceState{Namespace: name, Ready: int(min(n[0]+n[1], capN)), Scheduled: int(n[2]), Claimed: int(n[3]),
			Dead: int(n[4]), Settled: int(n[5])}
		st.Capped = n[0]+n[1] >= capN || n[2] >= capN || n[3] >= capN || n[4] >= capN || n[5] >= capN
		if since != nil {
			st.ReadySince = since.UTC()
		}
		*out = append(*out, st)
	}
	return rows.Err()
}

// indexRangesOnly runs the operator read q in a read-only transaction
// that turns bitmap and sequential scans off, and hands its rows to scan.
// The statements of Namespaces and Routes read capped index ranges: an
// index scan under a LIMIT stops at the cap, but a bitmap scan reads the
// whole range first. Which of the two the planner picks depends on the
// table's statistics (how much of it the visibility map says is all
// visible: a long transaction anywhere in the cluster holds that back), so
// the bound of their docs holds by the plan only with the bitmap scan off.
// Cost: two more round trips (BEGIN with the settings, COMMIT).
func (s *Store) indexRangesOnly(ctx context.Context, q string, args []any, scan func(pgx.Rows) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, indexRangesOnlySQL); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return scan(rows)
	})
}

// indexRangesOnlySQL turns bitmap and sequential scans off for the rest
// of the transaction (see indexRangesOnly).
const indexRangesOnlySQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)`

// operateSQL expands a statement of this file for the store's schema.
func (s *Store) operateSQL(template string) string {
	return expand(pgx.Identifier{s.schema}.Sanitize(), template)
}

// DeleteDead deletes the dead rows among dispatchKeys (at most
// [outbox.MaxKeys]) in one statement and returns how many it deleted;
// other keys are left alone. Keys no row can have are an
// [*outbox.ArgumentError]; an empty list returns 0 without a round trip.
// The deletion is recorded in the audit trail in its transaction, with
// how many rows it deleted ([outbox.RowsAudit]). Cost:
// O(len(dispatchKeys) × log n).
func (s *Store) DeleteDead(ctx context.Context, dispatchKeys []string) (int, error) {
	const op = "DeleteDead"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	if len(dispatchKeys) > outbox.MaxKeys {
		return 0, argError(op, "dispatchKeys", "%d keys, more than %d", len(dispatchKeys), outbox.MaxKeys)
	}
	if err := call(op).Keys(dispatchKeys); err != nil {
		return 0, err
	}
	if len(dispatchKeys) == 0 {
		return 0, nil
	}
	if err := outbox.CheckOperation(ctx, op); err != nil {
		return 0, err
	}
	n, err := s.auditedRows(ctx, outbox.ActionPurge, dispatchKeys, func(tx pgx.Tx) (int, string, error) {
		var n int64
		var ns string
		err := tx.QueryRow(ctx, s.operateSQL(`
WITH changed AS (DELETE FROM {schema}.outbox WHERE dispatch_key = ANY ($1::text[]) AND state = 'dead' RETURNING namespace)
SELECT `+soleNamespaceSQL+` FROM changed`), dispatchKeys).Scan(&n, &ns)
		return int(n), ns, err
	})
	if err != nil {
		return 0, opError(op, err)
	}
	return n, nil
}

// ErrBadSettings matches [outbox.ErrBadSettings]. ListSettings no longer
// fails on a malformed settings row: it returns the row with its Fault
// set.
//
// Deprecated: use outbox.ErrBadSettings.
var ErrBadSettings = outbox.ErrBadSettings

// PutSettings stores set as its namespace's shared settings with the next
// version, in one transaction that locks settings_clock's row (so versions
// are given in commit order, and a poller of SettingsVersion misses no
// change); see [outbox.Operator]. The row is the JSON object of
// [outbox.EncodeSettings]. A namespace the route rule rejects, settings
// [outbox.CheckSettings] refuses (also matching
// backpressure.ErrInvalidConfig), or a new namespace beyond
// [outbox.MaxSettings] (also matching [outbox.ErrTooManySettings]) is an
// [*outbox.ArgumentError]. The change is recorded in the audit trail in
// the same transaction (see [Store.Audit]): who from ctx
// ([outbox.WithOperation]), the row before and after. Cost: four
// statements, O(log settings), plus a count of the settings.
func (s *Store) PutSettings(ctx context.Context, set outbox.NamespaceSettings) (outbox.NamespaceSettings, error) {
	const op = "PutSettings"
	if err := s.begin(ctx, op); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	if err := (backpressure.Route{Namespace: set.Namespace}).Validate(); err != nil {
		return outbox.NamespaceSettings{}, argError(op, "set.Namespace", "%v", err)
	}
	if err := outbox.CheckPutSettings("pgstore", op, set); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	if err := outbox.CheckOperation(ctx, op); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	body := outbox.EncodeSettings(set)
	out := set
	err := s.run(ctx, unsent, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, s.operateSQL(`UPDATE {schema}.settings_clock SET version = version + 1 RETURNING version`)).Scan(&out.Version); err != nil {
				return err
			}
			var before *string
			var count int
			if err := tx.QueryRow(ctx, s.operateSQL(`SELECT (SELECT body::text FROM {schema}.namespace_settings WHERE namespace = $1), (SELECT count(*) FROM {schema}.namespace_settings)`),
				set.Namespace).Scan(&before, &count); err != nil {
				return err
			}
			if before == nil && count >= outbox.MaxSettings {
				return outbox.SettingsCapError("pgstore", op, set.Namespace)
			}
			if err := tx.QueryRow(ctx, s.operateSQL(`
INSERT INTO {schema}.namespace_settings (namespace, body, version, updated_at) VALUES ($1, $2, $3, coalesce($4::timestamptz, now()))
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body, version = excluded.version, updated_at = excluded.updated_at
RETURNING updated_at`), set.Namespace, string(body), out.Version, s.clock()).Scan(&out.UpdatedAt); err != nil {
				return err
			}
			was := ""
			if before != nil {
				was = *before
			}
			return s.recordAudit(ctx, tx, outbox.SettingsAudit(ctx, was, set))
		})
	})
	var arg *outbox.ArgumentError
	if errors.As(err, &arg) {
		return outbox.NamespaceSettings{}, err
	}
	if err != nil {
		return outbox.NamespaceSettings{}, opError(op, err)
	}
	out.UpdatedAt = out.UpdatedAt.UTC()
	return out, nil
}

// ListSettings returns every namespace's shared settings in byte order (see
// [outbox.Operator]): a row that cannot be read or does not validate is
// returned with its Fault set ([outbox.DecodeSettings]), and more rows
// than [outbox.MaxSettings] are the first MaxSettings with an error
// matching [outbox.ErrTooManySettings]. One statement: O(settings).
func (s *Store) ListSettings(ctx context.Context) ([]outbox.NamespaceSettings, error) {
	const op = "ListSettings"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	var out []outbox.NamespaceSettings
	err := s.run(ctx, anyLoss, func() error {
		out = []outbox.NamespaceSettings{}
		rows, err := s.pool.Query(ctx, s.operateSQL(`SELECT namespace, body::text, version, updated_at FROM {schema}.namespace_settings ORDER BY namespace LIMIT $1`), outbox.MaxSettings+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var set outbox.NamespaceSettings
			var body string
			if err := rows.Scan(&set.Namespace, &body, &set.Version, &set.UpdatedAt); err != nil {
				return err
			}
			outbox.DecodeSettings(&set, []byte(body))
			set.UpdatedAt = set.UpdatedAt.UTC()
			out = append(out, set)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError(op, err)
	}
	if len(out) > outbox.MaxSettings {
		return out[:outbox.MaxSettings], outbox.SettingsOverflowError("pgstore")
	}
	return out, nil
}

// SettingsVersion returns the greatest settings version (see
// [outbox.Operator]): one read of settings_clock's one row.
func (s *Store) SettingsVersion(ctx context.Context) (int64, error) {
	const op = "SettingsVersion"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var v int64
	err := s.run(ctx, anyLoss, func() error {
		return s.pool.QueryRow(ctx, s.operateSQL(`SELECT version FROM {schema}.settings_clock`)).Scan(&v)
	})
	if err != nil {
		return 0, opError(op, err)
	}
	return v, nil
}

// PutNodeReport stores r, stamped on the store's clock and valid for ttl,
// and deletes the reports expired more than ttl ago, in one statement (see
// [outbox.Operator]). Cost: one upsert by primary key and a delete over
// node_reports (O(nodes)); at one report per node every 2s that is half a
// write per second per node.
func (s *Store) PutNodeReport(ctx context.Context, r outbox.NodeReport, ttl time.Duration) error {
	const op = "PutNodeReport"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := outbox.CheckNodeReport(op, r, ttl); err != nil {
		return err
	}
	r.ReportedAt, r.ExpiresAt = time.Time{}, time.Time{} // the statement sets them
	body, err := json.Marshal(r)
	if err != nil {
		return opError(op, err)
	}
	err = s.run(ctx, unsent, func() error {
		_, err := s.pool.Exec(ctx, s.operateSQL(`
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
gone AS (DELETE FROM {schema}.node_reports d USING t WHERE d.expires_at < t.now - $4::bigint * interval '1 microsecond')
INSERT INTO {schema}.node_reports (node, body, reported_at, expires_at)
SELECT $2, $3::jsonb, t.now, t.now + $4::bigint * interval '1 microsecond' FROM t
ON CONFLICT (node) DO UPDATE SET body = excluded.body, reported_at = excluded.reported_at, expires_at = excluded.expires_at`),
			s.clock(), r.Node, string(body), ttl.Microseconds())
		return err
	})
	if err != nil {
		return opError(op, err)
	}
	return nil
}

// NodeReports returns the reports that have not expired on the store's
// clock, by node (see [outbox.Operator]); a report that cannot be read is
// returned with its Fault set ([outbox.DecodeNodeReport]). One statement:
// O(nodes).
func (s *Store) NodeReports(ctx context.Context) ([]outbox.NodeReport, error) {
	const op = "NodeReports"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	var out []outbox.NodeReport
	err := s.run(ctx, anyLoss, func() error {
		out = []outbox.NodeReport{}
		rows, err := s.pool.Query(ctx, s.operateSQL(`
SELECT node, body::text, reported_at, expires_at FROM {schema}.node_reports
WHERE expires_at > coalesce($1::timestamptz, now()) ORDER BY node LIMIT $2`), s.clock(), outbox.MaxNodeReports)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var node, body string
			var at, until time.Time
			if err := rows.Scan(&node, &body, &at, &until); err != nil {
				return err
			}
			r := outbox.DecodeNodeReport(node, []byte(body))
			r.ReportedAt, r.ExpiresAt = at.UTC(), until.UTC()
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError(op, err)
	}
	return out, nil
}

// routesSQL reads the routes of namespace $1 after task queue $2 ({cmp} is
// > or >=), at most $3 of them, found by a loose scan of
// outbox_route_claimable_idx (namespace, task_queue, claimable_at), whose
// predicate is the live rows: one index probe per route. Each route then
// reads at most $4 of its live rows from the same index, in its order (the
// ORDER BY keeps the planner from a bitmap scan of the whole route),
// fetching each row's state from the heap to tell scheduled from claimed;
// $5 is the clock. Capped, the rows read are the earliest claimable.
const routesSQL = `
WITH RECURSIVE q(tq, k) AS (
	SELECT (SELECT min(o.task_queue) FROM {schema}.outbox o WHERE o.namespace = $1 AND o.state IN ('pending', 'claimed') AND o.task_queue {cmp} $2::text), 1
	UNION ALL
	SELECT (SELECT min(o.task_queue) FROM {schema}.outbox o WHERE o.namespace = $1 AND o.state IN ('pending', 'claimed') AND o.task_queue > q.tq), q.k + 1
	FROM q WHERE q.tq IS NOT NULL AND q.k < $3::int
)
SELECT q.tq, c.*
FROM q, (SELECT coalesce($5::timestamptz, now()) AS now) t, LATERAL (SELECT
	count(*) FILTER (WHERE x.claimable_at <= t.now),
	count(*) FILTER (WHERE x.claimable_at > t.now AND x.state = 'pending'),
	count(*) FILTER (WHERE x.claimable_at > t.now AND x.state = 'claimed'),
	count(*)
	FROM (SELECT o.claimable_at, o.state FROM {schema}.outbox o
		WHERE o.namespace = $1 AND o.task_queue = q.tq AND o.state IN ('pending', 'claimed') ORDER BY o.claimable_at LIMIT $4) x
) c
WHERE q.tq IS NOT NULL
ORDER BY q.tq`

// Routes returns the live rows of p.Namespace's routes (see
// [outbox.Operator]) in one statement, so every count is of one snapshot.
// Cost: one probe of outbox_route_claimable_idx per route, then per route
// a range read of at most p.Cap entries of it and as many heap fetches
// (the state): O(routes × (log n + p.Cap)). Bad params are an
// [*outbox.ArgumentError].
func (s *Store) Routes(ctx context.Context, p outbox.RoutesParams) ([]outbox.RouteState, error) {
	const op = "Routes"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	cmp := ">"
	if p.After == "" && !p.Started {
		cmp = ">="
	}
	q := s.operateSQL(strings.Replace(routesSQL, "{cmp}", cmp, 1))
	var out []outbox.RouteState
	err = s.run(ctx, anyLoss, func() error {
		out = []outbox.RouteState{}
		return s.indexRangesOnly(ctx, q, []any{p.Namespace, p.After, int64(p.Limit), int64(p.Cap), s.clock()}, func(rows pgx.Rows) error {
			return scanRoutes(rows, p.Cap, &out)
		})
	})
	if err != nil {
		return nil, opError(op, err)
	}
	return out, nil
}

// scanRoutes appends the states of Routes' rows to out; capN is the cap.
func scanRoutes(rows pgx.Rows, capN int, out *[]outbox.RouteState) error {
	for rows.Next() {
		var r outbox.RouteState
		var n [4]int64
		if err := rows.Scan(&r.TaskQueue, &n[0], &n[1], &n[2], &n[3]); err != nil {
			return err
		}
		r.Ready, r.Scheduled, r.Claimed, r.Capped = int(n[0]), int(n[1]), int(n[2]), n[3] >= int64(capN)
		*out = append(*out, r)
	}
	return rows.Err()
}
