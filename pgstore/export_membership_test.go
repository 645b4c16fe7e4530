package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SetLockedHook makes m's heartbeats call hook inside their transaction,
// between the statement that locks the ownership rows and the one that
// rebalances them: a test stalls a heartbeat there, holding the locks, as a
// node frozen mid-heartbeat would. Nil removes it.
func SetLockedHook(m *Membership, hook func(context.Context, pgx.Tx)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lockedHook = hook
}
