package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
)

// Statements returns the store's SQL by name, for the EXPLAIN tests.
func Statements(s *Store) map[string]string {
	return map[string]string{
		"enqueue":            s.sql.enqueue,
		"countClaimed":       s.sql.countClaimed,
		"countPending":       s.sql.countPending,
		"countPendingWindow": s.sql.countPendingWindow,
		"sweepCount":         s.sql.sweepCount,
		"sweepCountWindow":   s.sql.sweepCountWindow,
		"claimScoped":        s.sql.claimScoped,
		"claimUnscoped":      s.sql.claimUnscoped,
		"complete":           s.sql.complete,
		"extend":             s.sql.extend,
		"get":                s.sql.get,
		"stats":              s.sql.stats,
		"listDead":           s.sql.listDead,
		"requeue":            s.sql.requeue,
		"purgeSettled":       s.sql.purgeSettled,
		"purgeDead":          s.sql.purgeDead,
	}
}

// MigrationCount is the number of migrations the package knows.
func MigrationCount() int { return len(migrations) }

// Migration returns migration v (1-based) with the quoted schema filled in,
// for the tests that build an older schema by hand.
func Migration(v int, schema string) string {
	return expand(pgx.Identifier{schema}.Sanitize(), migrations[v-1])
}

// PoolOf returns the pool a store runs on.
func PoolOf(s *Store) *pgxpool.Pool { return s.pool }

// QueryNoJIT runs sql as the claims and the pending counts run, and returns
// its first column as text.
func QueryNoJIT(ctx context.Context, s *Store, sql string) ([]string, error) {
	return collectNoJIT(ctx, s, anyLoss, sql, nil, pgx.RowTo[string])
}

// Channel returns the store's LISTEN/NOTIFY channel.
func Channel(s *Store) string { return s.channel }

// JoinManual joins without background heartbeats: the test calls
// Heartbeat.
func JoinManual(ctx context.Context, s *Store, opts MembershipOptions) (*Membership, error) {
	return s.Join(context.WithValue(ctx, manualKey{}, true), opts)
}

// SetHeld installs shards as the held set of a membership of a store of
// shardCount shards that held none, and returns what it then owns, its
// owned set and setHeld's error.
func SetHeld(shardCount int, shards ...int32) (backpressure.OwnedShardFraction, error) {
	none, err := backpressure.NewOwnedShardFraction(nil, shardCount)
	if err != nil {
		return backpressure.OwnedShardFraction{}, err
	}
	m := &Membership{
		store:   &Store{shardCount: shardCount},
		held:    map[int32]int64{},
		owned:   none,
		none:    none,
		changes: make(chan backpressure.OwnedShardFraction, 1),
	}
	held := map[int32]int64{}
	for _, s := range shards {
		held[s] = 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	err = m.setHeld(held)
	return m.owned, err
}

// MembershipDone returns the channel closed when m's heartbeat loop has
// stopped.
func MembershipDone(m *Membership) <-chan struct{} { return m.done }
