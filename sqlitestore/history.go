package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Historian = (*Store)(nil)

// AppendHistory stores points in one transaction (see
// [outbox.Historian]); bad points are an [*outbox.ArgumentError].
func (s *Store) AppendHistory(ctx context.Context, points []outbox.HistoryPoint) error {
	const op = "AppendHistory"
	if err := s.writable(); err != nil {
		return s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	bodies, err := historyBodies(op, points)
	if err != nil {
		return err
	}
	if len(points) == 0 {
		return nil
	}
	return s.fail(op, s.write(ctx, func(tx *sql.Tx) error {
		if err := s.step(ctx); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO history (node, namespace, at, bucket, body) VALUES (?1, ?2, ?3, ?4, ?5)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, p := range points {
			if _, err := st.ExecContext(ctx, p.Node, p.Namespace, nanos(p.At), outbox.HistoryBucketOf(p.At), bodies[i]); err != nil {
				return err
			}
		}
		return nil
	}))
}

// historyBodies checks points and returns each one's JSON body.
func historyBodies(op string, points []outbox.HistoryPoint) ([]string, error) {
	if len(points) > outbox.MaxReportNamespaces {
		return nil, &outbox.ArgumentError{Op: op, Arg: "points", Reason: "more than outbox.MaxReportNamespaces points"}
	}
	bodies := make([]string, len(points))
	for i, p := range points {
		if err := outbox.CheckHistoryPoint(op, i, p); err != nil {
			return nil, err
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		bodies[i] = string(b)
	}
	return bodies, nil
}

// History returns the points p selects (see [outbox.Historian]) in one
// statement: a backward range of history_at, or of history_namespace for
// one namespace, of at most p.Limit rows.
func (s *Store) History(ctx context.Context, p outbox.HistoryParams) ([]outbox.HistoryPoint, error) {
	const op = "History"
	if err := s.read(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	since := int64(-1 << 63)
	if !p.Since.IsZero() {
		since = nanos(p.Since)
	}
	q := `SELECT body FROM history WHERE at >= ?1 ORDER BY at DESC, id DESC LIMIT ?2`
	args := []any{since, p.Limit}
	if p.Namespace != "" {
		q = `SELECT body FROM history WHERE namespace = ?3 AND at >= ?1 ORDER BY at DESC, id DESC LIMIT ?2`
		args = append(args, p.Namespace)
	}
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	out := []outbox.HistoryPoint{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, s.fail(op, err)
		}
		var pt outbox.HistoryPoint
		if err := json.Unmarshal([]byte(body), &pt); err != nil {
			return nil, s.fail(op, err)
		}
		out = append(out, pt)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	reverse(out)
	outbox.SortHistory(out)
	return out, nil
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// PruneHistory thins and bounds the history as [outbox.ThinHistory] does
// at now, in one transaction of two statements.
func (s *Store) PruneHistory(ctx context.Context, now time.Time) (int, error) {
	const op = "PruneHistory"
	if err := s.writable(); err != nil {
		return 0, s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.step(ctx); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM history WHERE at < ?1`, nanos(now.Add(-outbox.HistoryRetention)))
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		res, err = tx.ExecContext(ctx, `
DELETE FROM history WHERE at < ?1 AND EXISTS (
	SELECT 1 FROM history n WHERE n.node = history.node AND n.namespace = history.namespace AND n.bucket = history.bucket AND n.at < ?1
	AND (n.at > history.at OR (n.at = history.at AND n.id > history.id)))`, nanos(now.Add(-outbox.HistoryFull)))
		if err != nil {
			return err
		}
		m, _ := res.RowsAffected()
		n += m
		return nil
	})
	if err != nil {
		return 0, s.fail(op, err)
	}
	return int(n), nil
}
