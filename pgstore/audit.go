package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Auditor = (*Store)(nil)

// recordAuditSQL inserts one audit entry, stamped on the store's clock
// ($1), and deletes the entries outbox.MaxAuditEntries ($10) or more
// below it: a range of the primary key.
const recordAuditSQL = `
WITH e AS (
	INSERT INTO {schema}.audit_log (at, operator, action, namespace, before, after, rows, detail)
	VALUES (coalesce($1::timestamptz, now()), $2, $3, $4, $5, $6, $7, $8)
	RETURNING id
)
DELETE FROM {schema}.audit_log d USING e WHERE d.id <= e.id - $9::bigint`

// recordAudit writes e in tx: in the transaction of the change it records.
func (s *Store) recordAudit(ctx context.Context, tx pgx.Tx, e outbox.AuditEntry) error {
	_, err := tx.Exec(ctx, expand(pgx.Identifier{s.schema}.Sanitize(), recordAuditSQL), s.clock(), e.Operator, e.Action, e.Namespace, e.Before, e.After,
		int64(e.Rows), e.Detail, int64(outbox.MaxAuditEntries))
	return err
}

// recordAuditTx is recordAudit for the migrator, which has no Store: the
// database's clock.
func recordAuditTx(ctx context.Context, tx pgx.Tx, quoted string, e outbox.AuditEntry) error {
	_, err := tx.Exec(ctx, expand(quoted, recordAuditSQL), nil, e.Operator, e.Action, e.Namespace, e.Before, e.After,
		int64(e.Rows), e.Detail, int64(outbox.MaxAuditEntries))
	return err
}

// auditedRows runs change (a dead-letter action over keys: requeue or
// purge) and records its entry in one transaction; change returns how
// many rows it changed and their namespace when they share one.
func (s *Store) auditedRows(ctx context.Context, action string, keys []string, change func(pgx.Tx) (int, string, error)) (int, error) {
	var n int
	err := s.run(ctx, unsent, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var ns string
			var err error
			if n, ns, err = change(tx); err != nil {
				return err
			}
			return s.recordAudit(ctx, tx, outbox.RowsAudit(ctx, action, keys, n, ns))
		})
	})
	return n, err
}

// soleNamespaceSQL is the select list of a statement over the CTE
// changed(namespace): how many rows, and their namespace when they share
// one (the empty string otherwise).
const soleNamespaceSQL = `count(*), CASE WHEN count(DISTINCT namespace) = 1 THEN min(namespace) ELSE '' END`

// auditAllSQL and auditNamespaceSQL are Audit's statements: the entries
// below ID $1, newest first, at most $2, of namespace $3 for the second.
const (
	auditAllSQL = `
SELECT id, at, operator, action, namespace, before, after, rows, detail FROM {schema}.audit_log
WHERE id < $1 ORDER BY id DESC LIMIT $2`
	auditNamespaceSQL = `
SELECT id, at, operator, action, namespace, before, after, rows, detail FROM {schema}.audit_log
WHERE namespace = $3 AND id < $1 ORDER BY id DESC LIMIT $2`
)

// Audit returns the audit entries p selects, newest first (see
// [outbox.Auditor]), in one statement: a backward range of the primary
// key, or of audit_log_namespace_idx for one namespace, of at most
// p.Limit entries. Bad params are an [*outbox.ArgumentError].
func (s *Store) Audit(ctx context.Context, p outbox.AuditParams) ([]outbox.AuditEntry, error) {
	const op = "Audit"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	before := p.Before
	if before == 0 {
		before = 1<<63 - 1
	}
	q, args := auditAllSQL, []any{before, int64(p.Limit)}
	if p.Namespace != "" {
		q, args = auditNamespaceSQL, append(args, p.Namespace)
	}
	var out []outbox.AuditEntry
	err = s.run(ctx, anyLoss, func() error {
		out = []outbox.AuditEntry{}
		rows, err := s.pool.Query(ctx, expand(pgx.Identifier{s.schema}.Sanitize(), q), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e outbox.AuditEntry
			var at time.Time
			var n int64
			if err := rows.Scan(&e.ID, &at, &e.Operator, &e.Action, &e.Namespace, &e.Before, &e.After, &n, &e.Detail); err != nil {
				return err
			}
			e.At, e.Rows = at.UTC(), int(n)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError(op, err)
	}
	return out, nil
}
