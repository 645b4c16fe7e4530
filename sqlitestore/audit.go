package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Auditor = (*Store)(nil)

// execTx is a transaction or the migrator's connection.
type execTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// recordAudit writes e at the store's clock in tx: in the transaction of
// the change it records.
func (s *Store) recordAudit(ctx context.Context, tx execTx, e outbox.AuditEntry) error {
	return recordAudit(ctx, tx, s.now(), e)
}

// recordAudit writes e, at at, through x, and deletes the entries
// outbox.MaxAuditEntries or more below it: a range of the rowid.
func recordAudit(ctx context.Context, x execTx, at time.Time, e outbox.AuditEntry) error {
	var id int64
	if err := x.QueryRowContext(ctx, `INSERT INTO audit_log (at, operator, action, namespace, before, after, rows, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id`,
		nanos(at), e.Operator, e.Action, e.Namespace, e.Before, e.After, e.Rows, e.Detail).Scan(&id); err != nil {
		return err
	}
	_, err := x.ExecContext(ctx, `DELETE FROM audit_log WHERE id <= ?1`, id-outbox.MaxAuditEntries)
	return err
}

// Audit returns the audit entries p selects, newest first (see
// [outbox.Auditor]), in one statement: a backward range of the rowid, or
// of audit_log_namespace for one namespace, of at most p.Limit entries.
// Bad params are an [*outbox.ArgumentError].
func (s *Store) Audit(ctx context.Context, p outbox.AuditParams) ([]outbox.AuditEntry, error) {
	const op = "Audit"
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	before := p.Before
	if before == 0 {
		before = 1<<63 - 1
	}
	q := `SELECT id, at, operator, action, namespace, before, after, rows, detail FROM audit_log WHERE id < ?1 ORDER BY id DESC LIMIT ?2`
	args := []any{before, p.Limit}
	if p.Namespace != "" {
		q = `SELECT id, at, operator, action, namespace, before, after, rows, detail FROM audit_log WHERE namespace = ?3 AND id < ?1 ORDER BY id DESC LIMIT ?2`
		args = append(args, p.Namespace)
	}
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	out := []outbox.AuditEntry{}
	for rows.Next() {
		var e outbox.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Operator, &e.Action, &e.Namespace, &e.Before, &e.After, &e.Rows, &e.Detail); err != nil {
			return nil, s.fail(op, err)
		}
		e.At = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// soleNamespace is the namespace of every route of routes ((namespace,
// task queue) pairs) when they share one, else "".
func soleNamespace(routes [][2]string) string {
	if len(routes) == 0 {
		return ""
	}
	for _, r := range routes {
		if r[0] != routes[0][0] {
			return ""
		}
	}
	return routes[0][0]
}
