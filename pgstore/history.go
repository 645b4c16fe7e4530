package pgstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Historian = (*Store)(nil)

// AppendHistory stores points in one statement (see [outbox.Historian]);
// bad points are an [*outbox.ArgumentError].
func (s *Store) AppendHistory(ctx context.Context, points []outbox.HistoryPoint) error {
	const op = "AppendHistory"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if len(points) > outbox.MaxReportNamespaces {
		return &outbox.ArgumentError{Op: op, Arg: "points", Reason: "more than outbox.MaxReportNamespaces points"}
	}
	nodes, nss, bodies := make([]string, len(points)), make([]string, len(points)), make([]string, len(points))
	ats, buckets := make([]int64, len(points)), make([]int64, len(points))
	for i, p := range points {
		if err := outbox.CheckHistoryPoint(op, i, p); err != nil {
			return err
		}
		b, err := json.Marshal(p)
		if err != nil {
			return opError(op, err)
		}
		nodes[i], nss[i], bodies[i] = p.Node, p.Namespace, string(b)
		ats[i], buckets[i] = p.At.UnixMicro(), outbox.HistoryBucketOf(p.At)
	}
	if len(points) == 0 {
		return nil
	}
	err := s.run(ctx, unsent, func() error {
		_, err := s.pool.Exec(ctx, s.historySQL(`
INSERT INTO {schema}.history (node, namespace, at, bucket, body)
SELECT n, ns, a, b, body::jsonb FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[]) WITH ORDINALITY AS u(n, ns, a, b, body, o)
ORDER BY o`), nodes, nss, ats, buckets, bodies)
		return err
	})
	if err != nil {
		return opError(op, err)
	}
	return nil
}

func (s *Store) historySQL(q string) string { return expand(pgx.Identifier{s.schema}.Sanitize(), q) }

// History returns the points p selects (see [outbox.Historian]) in one
// statement: a backward range of history_at_idx, or of
// history_namespace_idx for one namespace, of at most p.Limit rows.
func (s *Store) History(ctx context.Context, p outbox.HistoryParams) ([]outbox.HistoryPoint, error) {
	const op = "History"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	since := int64(-1 << 63)
	if !p.Since.IsZero() {
		since = p.Since.UnixMicro()
	}
	q := `SELECT body::text FROM {schema}.history WHERE at >= $1 ORDER BY at DESC, id DESC LIMIT $2`
	args := []any{since, int64(p.Limit)}
	if p.Namespace != "" {
		q = `SELECT body::text FROM {schema}.history WHERE namespace = $3 AND at >= $1 ORDER BY at DESC, id DESC LIMIT $2`
		args = append(args, p.Namespace)
	}
	var out []outbox.HistoryPoint
	err = s.run(ctx, anyLoss, func() error {
		out = []outbox.HistoryPoint{}
		rows, err := s.pool.Query(ctx, s.historySQL(q), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var body string
			if err := rows.Scan(&body); err != nil {
				return err
			}
			var pt outbox.HistoryPoint
			if err := json.Unmarshal([]byte(body), &pt); err != nil {
				return err
			}
			out = append(out, pt)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError(op, err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	outbox.SortHistory(out)
	return out, nil
}

// PruneHistory thins and bounds the history as [outbox.ThinHistory] does
// at now, in one statement.
func (s *Store) PruneHistory(ctx context.Context, now time.Time) (int, error) {
	const op = "PruneHistory"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var n int64
	err := s.run(ctx, anyLoss, func() error {
		tag, err := s.pool.Exec(ctx, s.historySQL(`
DELETE FROM {schema}.history h WHERE h.at < $1 OR (h.at < $2 AND EXISTS (
	SELECT 1 FROM {schema}.history n WHERE n.node = h.node AND n.namespace = h.namespace AND n.bucket = h.bucket
	AND n.at < $2 AND n.at >= $1 AND (n.at > h.at OR (n.at = h.at AND n.id > h.id))))`),
			now.Add(-outbox.HistoryRetention).UnixMicro(), now.Add(-outbox.HistoryFull).UnixMicro())
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, opError(op, err)
	}
	return int(n), nil
}
