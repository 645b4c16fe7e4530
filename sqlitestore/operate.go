package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Operator = (*Store)(nil)

// namespaceCounts counts one namespace's rows, each count a range of the
// partial index of the state it counts, keyed by namespace first
// (outbox_pending, outbox_leased, outbox_dead, outbox_settled), capped at
// ?3 by a LIMIT, so it reads at most ?3 entries per count: ?1 namespace,
// ?2 now, ?3 cap. The min(ready_at) of a namespace's pending or claimed
// rows is the first entry of its range.
const namespaceCounts = `
SELECT
	(SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_pending WHERE state = 0 AND namespace = ?1 AND ready_at <= ?2 LIMIT ?3)),
	(SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_leased WHERE state = 1 AND namespace = ?1 AND ready_at <= ?2 LIMIT ?3)),
	(SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_pending WHERE state = 0 AND namespace = ?1 AND ready_at > ?2 LIMIT ?3)),
	(SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_leased WHERE state = 1 AND namespace = ?1 AND ready_at > ?2 LIMIT ?3)),
	(SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_dead WHERE state = 3 AND namespace = ?1 LIMIT ?3)),
	(SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_settled WHERE state = 2 AND namespace = ?1 LIMIT ?3)),
	coalesce((SELECT min(ready_at) FROM outbox INDEXED BY outbox_pending WHERE state = 0 AND namespace = ?1), 0),
	coalesce((SELECT min(ready_at) FROM outbox INDEXED BY outbox_leased WHERE state = 1 AND namespace = ?1), 0)`

// namespaceAfter is the first namespace after after (an SQL expression)
// with a row in any state: the least of one probe of each state's index.
func namespaceAfter(after string) string {
	var probes []string
	for _, ix := range []struct{ index, state string }{
		{"outbox_pending", "0"}, {"outbox_leased", "1"}, {"outbox_settled", "2"}, {"outbox_dead", "3"},
	} {
		probes = append(probes, `SELECT (SELECT min(namespace) FROM outbox INDEXED BY `+ix.index+` WHERE state = `+ix.state+` AND namespace > `+after+`) AS name`)
	}
	return `(SELECT min(name) FROM (` + strings.Join(probes, " UNION ALL ") + `))`
}

// namespacePage finds the next ?2 namespaces after ?1 with a loose scan of
// the four state indexes: four index probes per namespace.
var namespacePage = `
WITH RECURSIVE ns(name, n) AS (
	SELECT ` + namespaceAfter("?1") + `, 1
	UNION ALL
	SELECT ` + namespaceAfter("ns.name") + `, n + 1
	FROM ns WHERE ns.name IS NOT NULL AND n < ?2
)
SELECT name FROM ns WHERE name IS NOT NULL`

// Namespaces returns the state of the namespaces p selects (see
// [outbox.Operator]): one read transaction, so every count is of one
// snapshot. Cost: four index probes per namespace for the page, then per
// namespace eight range reads of the state indexes of at most p.Cap
// entries each: O(namespaces × (log rows + p.Cap)). Bad params are an
// *outbox.ArgumentError.
func (s *Store) Namespaces(ctx context.Context, p outbox.NamespacesParams) ([]outbox.NamespaceState, error) {
	const op = "Namespaces"
	if err := s.ready(); err != nil {
		return nil, s.fail(op, err)
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	limit, capN := p.Limit, p.Cap
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	names := []string{p.Namespace}
	if p.Namespace == "" {
		names, err = queryStrings(ctx, tx, namespacePage, p.After, limit)
		if err != nil {
			return nil, s.fail(op, err)
		}
	}
	now := nanos(s.now())
	out := make([]outbox.NamespaceState, 0, len(names))
	for _, name := range names {
		var readyP, readyC, sched, claimed, dead, settled int
		var minP, minC int64
		if err := tx.QueryRowContext(ctx, namespaceCounts, name, now, capN).Scan(
			&readyP, &readyC, &sched, &claimed, &dead, &settled, &minP, &minC); err != nil {
			return nil, s.fail(op, err)
		}
		st := outbox.NamespaceState{Namespace: name, Ready: min(readyP+readyC, capN), Scheduled: sched, Claimed: claimed, Dead: dead, Settled: settled}
		st.Capped = readyP+readyC >= capN || sched >= capN || claimed >= capN || dead >= capN || settled >= capN
		since := int64(0)
		for _, m := range []int64{minP, minC} {
			if m != 0 && m <= now && (since == 0 || m < since) {
				since = m
			}
		}
		st.ReadySince = fromNanos(since)
		out = append(out, st)
	}
	return out, nil
}

func queryStrings(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// DeleteDead deletes the dead rows among dispatchKeys (at most
// outbox.MaxKeys) in one write transaction and returns how many it
// deleted; other keys are left alone. Keys no row can have are an
// *outbox.ArgumentError. Cost: O(len(dispatchKeys) × log rows).
func (s *Store) DeleteDead(ctx context.Context, dispatchKeys []string) (int, error) {
	const op = "DeleteDead"
	if err := s.writable(); err != nil {
		return 0, s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(dispatchKeys) > outbox.MaxKeys {
		return 0, argError(op, "dispatchKeys", fmt.Sprintf("%d keys, more than %d", len(dispatchKeys), outbox.MaxKeys))
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
	arg, err := json.Marshal(dispatchKeys)
	if err != nil {
		return 0, s.fail(op, err)
	}
	var n int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		if err := s.step(ctx); err != nil {
			return err
		}
		var ns string
		if err := tx.QueryRowContext(ctx, `
WITH changed AS (SELECT namespace FROM outbox WHERE dispatch_key IN (SELECT value FROM json_each(?1)) AND state = 3)
SELECT count(*), CASE WHEN count(DISTINCT namespace) = 1 THEN min(namespace) ELSE '' END FROM changed`, string(arg)).Scan(&n, &ns); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE dispatch_key IN (SELECT value FROM json_each(?1)) AND state = 3`, string(arg))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx, outbox.RowsAudit(ctx, outbox.ActionPurge, dispatchKeys, int(n), ns))
	})
	if err != nil {
		return 0, s.fail(op, err)
	}
	return int(n), nil
}

// PutSettings stores set as its namespace's shared settings with the next
// version, in one write transaction (see [outbox.Operator]), as the JSON
// object of [outbox.EncodeSettings]. A namespace the route rule rejects,
// settings [outbox.CheckSettings] refuses (also matching
// backpressure.ErrInvalidConfig), or a new namespace beyond
// outbox.MaxSettings (also matching outbox.ErrTooManySettings) is an
// *outbox.ArgumentError. The change is recorded in the audit trail in the
// same transaction (see [Store.Audit]): who from ctx
// ([outbox.WithOperation]), the row before and after. Cost: O(log
// settings), plus a count of the settings.
func (s *Store) PutSettings(ctx context.Context, set outbox.NamespaceSettings) (outbox.NamespaceSettings, error) {
	const op = "PutSettings"
	if err := s.writable(); err != nil {
		return outbox.NamespaceSettings{}, s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	if err := (backpressure.Route{Namespace: set.Namespace}).Validate(); err != nil {
		return outbox.NamespaceSettings{}, argError(op, "set.Namespace", err.Error())
	}
	if err := outbox.CheckPutSettings("sqlitestore", op, set); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	if err := outbox.CheckOperation(ctx, op); err != nil {
		return outbox.NamespaceSettings{}, err
	}
	body := outbox.EncodeSettings(set)
	out := set
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.step(ctx); err != nil {
			return err
		}
		var before sql.NullString
		var count int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT body FROM namespace_settings WHERE namespace = ?1), (SELECT count(*) FROM namespace_settings)`,
			set.Namespace).Scan(&before, &count); err != nil {
			return err
		}
		if !before.Valid && count >= outbox.MaxSettings {
			return outbox.SettingsCapError("sqlitestore", op, set.Namespace)
		}
		now := nanos(s.now())
		if err := tx.QueryRowContext(ctx, `UPDATE outbox_meta SET value = value + 1 WHERE key = 'settings_version' RETURNING value`).Scan(&out.Version); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO namespace_settings (namespace, body, version, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body, version = excluded.version, updated_at = excluded.updated_at`,
			set.Namespace, string(body), out.Version, now)
		if err != nil {
			return err
		}
		out.UpdatedAt = fromNanos(now)
		return s.recordAudit(ctx, tx, outbox.SettingsAudit(ctx, before.String, set))
	})
	if err != nil {
		return outbox.NamespaceSettings{}, s.fail(op, err)
	}
	return out, nil
}

// ListSettings returns every namespace's shared settings in byte order (see
// [outbox.Operator]): a row that cannot be read or does not validate is
// returned with its Fault set ([outbox.DecodeSettings]), and more rows
// than outbox.MaxSettings are the first MaxSettings with an error matching
// outbox.ErrTooManySettings. One statement: O(settings).
func (s *Store) ListSettings(ctx context.Context) ([]outbox.NamespaceSettings, error) {
	const op = "ListSettings"
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT namespace, body, version, updated_at FROM namespace_settings ORDER BY namespace LIMIT ?1`, outbox.MaxSettings+1)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	out := []outbox.NamespaceSettings{}
	for rows.Next() {
		var set outbox.NamespaceSettings
		var body string
		var at int64
		if err := rows.Scan(&set.Namespace, &body, &set.Version, &at); err != nil {
			return nil, s.fail(op, err)
		}
		outbox.DecodeSettings(&set, []byte(body))
		set.UpdatedAt = fromNanos(at)
		out = append(out, set)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	if len(out) > outbox.MaxSettings {
		return out[:outbox.MaxSettings], outbox.SettingsOverflowError("sqlitestore")
	}
	return out, nil
}

// ErrBadSettings matches [outbox.ErrBadSettings]. ListSettings no longer
// fails on a malformed settings row: it returns the row with its Fault
// set.
//
// Deprecated: use outbox.ErrBadSettings.
var ErrBadSettings = outbox.ErrBadSettings

// SettingsVersion returns the greatest settings version (see
// [outbox.Operator]): one read of outbox_meta.
func (s *Store) SettingsVersion(ctx context.Context) (int64, error) {
	const op = "SettingsVersion"
	if err := s.read(ctx); err != nil {
		return 0, s.fail(op, err)
	}
	var v int64
	if err := s.reader.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'settings_version'`).Scan(&v); err != nil {
		return 0, s.fail(op, err)
	}
	return v, nil
}

// PutNodeReport stores r, stamped on the store's clock and valid for ttl,
// and deletes reports expired more than ttl ago, in one write transaction
// (see [outbox.Operator]). Cost: one upsert and one delete over the
// reports (O(nodes)).
func (s *Store) PutNodeReport(ctx context.Context, r outbox.NodeReport, ttl time.Duration) error {
	const op = "PutNodeReport"
	if err := s.writable(); err != nil {
		return s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := outbox.CheckNodeReport(op, r, ttl); err != nil {
		return err
	}
	now := s.now()
	r.ReportedAt, r.ExpiresAt = now.UTC(), now.Add(ttl).UTC()
	body, err := json.Marshal(r)
	if err != nil {
		return s.fail(op, err)
	}
	return s.fail(op, s.write(ctx, func(tx *sql.Tx) error {
		if err := s.step(ctx); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM node_reports WHERE expires_at < ?1`, nanos(now.Add(-ttl))); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO node_reports (node, body, reported_at, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (node) DO UPDATE SET body = excluded.body, reported_at = excluded.reported_at, expires_at = excluded.expires_at`,
			r.Node, string(body), nanos(now), nanos(r.ExpiresAt))
		return err
	}))
}

// NodeReports returns the reports that have not expired on the store's
// clock, by node (see [outbox.Operator]); a report that cannot be read is
// returned with its Fault set ([outbox.DecodeNodeReport]). One statement:
// O(nodes).
func (s *Store) NodeReports(ctx context.Context) ([]outbox.NodeReport, error) {
	const op = "NodeReports"
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT node, body, reported_at, expires_at FROM node_reports WHERE expires_at > ?1 ORDER BY node LIMIT ?2`,
		nanos(s.now()), outbox.MaxNodeReports)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	out := []outbox.NodeReport{}
	for rows.Next() {
		var node, body string
		var at, until int64
		if err := rows.Scan(&node, &body, &at, &until); err != nil {
			return nil, s.fail(op, err)
		}
		r := outbox.DecodeNodeReport(node, []byte(body))
		if r.Fault != "" {
			r.ReportedAt, r.ExpiresAt = fromNanos(at).UTC(), fromNanos(until).UTC()
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// routeNext finds the next task queue of namespace ?1 after ?2 ({cmp} is >
// or >=) with live rows: one probe of outbox_route_claimable, whose
// predicate is the live rows.
const routeNext = `SELECT min(task_queue) FROM outbox INDEXED BY outbox_route_claimable WHERE state < 2 AND namespace = ?1 AND task_queue {cmp} ?2`

// routeCounts counts at most ?3 live rows of route (?1, ?2) from
// outbox_route_claimable, which covers ready_at and state; ?4 is now.
const routeCounts = `
SELECT coalesce(sum(ready_at <= ?4), 0), coalesce(sum(ready_at > ?4 AND state = 0), 0), coalesce(sum(ready_at > ?4 AND state = 1), 0), count(*)
FROM (SELECT ready_at, state FROM outbox INDEXED BY outbox_route_claimable WHERE state < 2 AND namespace = ?1 AND task_queue = ?2 LIMIT ?3)`

// Routes returns the live rows of p.Namespace's routes (see
// [outbox.Operator]): one read transaction, so every count is of one
// snapshot. Cost: per route one probe of outbox_route_claimable to find
// it and a range read of at most p.Cap entries of it (a covering index: no
// table reads): O(routes × (log rows + p.Cap)). Bad params are an
// *outbox.ArgumentError.
func (s *Store) Routes(ctx context.Context, p outbox.RoutesParams) ([]outbox.RouteState, error) {
	const op = "Routes"
	if err := s.ready(); err != nil {
		return nil, s.fail(op, err)
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	now := nanos(s.now())
	cmp := ">"
	if p.After == "" && !p.Started {
		cmp = ">="
	}
	out := []outbox.RouteState{}
	after := p.After
	for len(out) < p.Limit {
		var tq sql.NullString
		if err := tx.QueryRowContext(ctx, strings.Replace(routeNext, "{cmp}", cmp, 1), p.Namespace, after).Scan(&tq); err != nil {
			return nil, s.fail(op, err)
		}
		if !tq.Valid {
			break
		}
		r := outbox.RouteState{TaskQueue: tq.String}
		var total int
		if err := tx.QueryRowContext(ctx, routeCounts, p.Namespace, tq.String, p.Cap, now).Scan(&r.Ready, &r.Scheduled, &r.Claimed, &total); err != nil {
			return nil, s.fail(op, err)
		}
		r.Capped = total >= p.Cap
		out = append(out, r)
		after, cmp = tq.String, ">"
	}
	return out, nil
}
