package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/outboxkit/backpressure/outbox"
)

// pendingCountSQL counts a namespace's unfinished rows (?1), up to ?2, over
// the route index (state < 2 is its predicate): at most ?2 entries read.
const pendingCountSQL = `
SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_route_claimable
	WHERE namespace = ?1 AND state < 2 LIMIT ?2)`

// checkPendingCaps fails with an *outbox.PendingCapError if, after msgs were
// inserted in tx, a capped namespace of msgs holds more unfinished rows than
// its cap. It runs inside the enqueue's write transaction (Enqueue's own,
// or EnqueueTx's savepoint), which then rolls the batch back: no other
// writer runs between the inserts and the count, so the cap is exact.
func (s *Store) checkPendingCaps(ctx context.Context, tx *sql.Tx, op string, msgs []outbox.Message) error {
	namespaces, caps := s.caps.Capped(msgs)
	for i, ns := range namespaces {
		if err := s.step(ctx); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, pendingCountSQL, ns, caps[i]+1).Scan(&n); err != nil {
			return err
		}
		if n > caps[i] {
			return &outbox.PendingCapError{Op: op, Namespace: ns, Cap: caps[i]}
		}
	}
	return nil
}
