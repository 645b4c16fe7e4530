package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/backpressure"
)

// nextDueSQL is NextDue's statement ($1 the clock, $2 owned shards, $3 all
// shards owned): the pending counts' walk over the routes (pendingCounts'
// WITH clause: one descent of outbox_route_claimable_idx per route), and
// per route one
// range seek of that index for its first entry after now on an owned
// shard. The index covers pending and claimed rows alike (claimable_at is
// a pending row's run-at, a claimed row's lease expiry), so a live lease
// may be what it finds: early, as [outbox.DueProber] allows, and read
// from the index alone. It returns the earliest such time (NULL for none)
// and the statement's now.
var nextDueSQL = pendingCounts.with + `
SELECT min(d.at), coalesce($1::timestamptz, now())
FROM routes nx
CROSS JOIN LATERAL ` + routeDue("$3::bool") + ` d`

// routeDue is the seek both nextDueSQL and the kept counts' reads
// (kept_sql.go) make per route nx: its first entry of
// outbox_route_claimable_idx after now ($1) on an owned shard ($2, or
// every shard when all is true), as at.
func routeDue(all string) string {
	return `(
	SELECT o.claimable_at AS at
	FROM {schema}.outbox o
	WHERE o.namespace = nx.namespace
		AND o.task_queue = nx.task_queue
		AND o.state IN ('pending', 'claimed')
		AND o.claimable_at > coalesce($1::timestamptz, now())
		AND (` + all + ` OR o.shard = ANY ($2::int4[]))
	ORDER BY o.claimable_at
	LIMIT 1
)`
}

// NextDue returns how long until the earliest row of the owned shards
// that is not claimable now becomes claimable, and true; 0 and false when
// there is none. It implements [outbox.DueProber], which a dispatcher uses
// to sweep when a delayed or scheduled row is due rather than at its next
// poll. It may also find a claimed row's lease expiry (early, never late:
// see the statement). One read statement: O(r · log n) index descents, plus
// on a node owning part of the shards the entries of other shards stepped
// over; times are the database's (or the injected clock's).
func (s *Store) NextDue(ctx context.Context, shards backpressure.OwnedShardFraction) (time.Duration, bool, error) {
	const op = "NextDue"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	owned, all, none, err := s.ownedShards(op, shards)
	if err != nil {
		return 0, false, err
	}
	if none {
		return 0, false, nil
	}
	q := expand(pgx.Identifier{s.schema}.Sanitize(), nextDueSQL)
	var due *time.Time
	var now time.Time
	err = s.run(ctx, anyLoss, func() error {
		return s.pool.QueryRow(ctx, q, s.clock(), owned, all).Scan(&due, &now)
	})
	if err != nil {
		return 0, false, opError(op, err)
	}
	if due == nil {
		return 0, false, nil
	}
	return max(0, due.Sub(now)), true, nil
}
