package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/outboxkit/backpressure"
)

// nextDueSQL is NextDue's statement (?1 now, cond the shard filter reading
// ?2): per namespace with a pending or claimed row (outbox_routes), the
// first entry of its pending rows after now in outbox_pending, keyed
// (namespace, ready_at, shard) and covering: one seek each, then, on a node
// owning part of the shards, a step per row on a shard it does not own.
func nextDueSQL(cond string) string {
	return `
SELECT min((
	SELECT o.ready_at FROM outbox o INDEXED BY outbox_pending
	WHERE o.state = 0 AND o.namespace = r.namespace AND o.ready_at > ?1` + cond + `
	ORDER BY o.ready_at LIMIT 1))
FROM (SELECT DISTINCT namespace FROM outbox_routes) r`
}

// NextDue returns how long until the earliest pending row of the owned
// shards that is not claimable now (a RunAt or a retry delay ahead) becomes
// claimable, and true; 0 and false when there is none. It implements
// [outbox.DueProber], which a dispatcher uses to sweep when that row is
// due rather than at its next poll. Claimed rows are not counted. One read
// statement: O(namespaces · log rows), plus, on a node owning part of the
// shards, the scheduled rows on other shards it steps over.
func (s *Store) NextDue(ctx context.Context, shards backpressure.OwnedShardFraction) (time.Duration, bool, error) {
	const op = "NextDue"
	if err := s.ready(); err != nil {
		return 0, false, s.fail(op, err)
	}
	cond, sarg, none, err := s.shardFilter(shards, 2)
	if err != nil {
		return 0, false, s.fail(op, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, false, s.fail(op, err)
	}
	if none {
		return 0, false, nil
	}
	now := s.now()
	s.trips.Add(1)
	rows, err := s.query(ctx, s.reader, nil, nextDueSQL(cond), withShards([]any{nanos(now)}, sarg)...)
	if err != nil {
		return 0, false, s.fail(op, err)
	}
	defer rows.Close()
	var due sql.NullInt64
	if rows.Next() {
		if err := rows.Scan(&due); err != nil {
			return 0, false, s.fail(op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, false, s.fail(op, err)
	}
	if !due.Valid {
		return 0, false, nil
	}
	return max(0, time.Unix(0, due.Int64).Sub(now)), true, nil
}
