package pgstore

import (
	"context"
	"maps"
	"time"

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
		"nextDue":            expand(pgx.Identifier{s.schema}.Sanitize(), nextDueSQL),
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
		"keptAll":            s.keptSQL.all,
		"keptNamespaces":     s.keptSQL.namespaces,
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

// SetReplyHook makes every later heartbeat of m run hook once its
// transaction has committed, before its reply is judged: a hook that
// sleeps holds the heartbeat's reply, as a slow network would.
func SetReplyHook(m *Membership, hook func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replyHook = hook
}

// HeldNow returns, for each of ms at one instant (every one's lock held),
// the shards it would claim on with their epochs: its held set, or none if
// it has lapsed, exactly as Owned and the fence judge it.
func HeldNow(ms ...*Membership) []map[int32]int64 {
	for _, m := range ms {
		m.mu.Lock()
	}
	now := time.Now()
	out := make([]map[int32]int64, len(ms))
	for i, m := range ms {
		out[i] = map[int32]int64{}
		if !m.lapsed(now) {
			maps.Copy(out[i], m.held)
		}
	}
	for _, m := range ms {
		m.mu.Unlock()
	}
	return out
}
