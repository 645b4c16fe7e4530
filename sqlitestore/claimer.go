package sqlitestore

import (
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Claimer returns the store's planner-facing calls, for [backpressure.Sweep]
// and a dispatcher built on [outbox.Store]: the counts and the claim of
// [backpressure.OutboxStore]; [backpressure.Counter] for windows and full
// pending counts (a Claimed count is refused with
// [backpressure.ErrNotSupported]: in-process, two counts cost no more than
// one); and [backpressure.TxSweeper], so that a whole Sweep is one
// transaction. The returned value's calls behave as the store's own: each
// is one statement or one transaction, and each returns an error matching
// [outbox.ErrClosed] once s is closed (or for a nil or zero s). Claimer
// makes no call to the database, and every call returns the same value.
//
// The value also has
//
//	ClaimOutboxRowsUnscoped(ctx, shards, limit int) ([]outbox.Row, error)
//
// found by type assertion: it claims at most limit of the oldest claimable
// rows on the owned shards whatever their namespace, the claim of a
// dispatcher without backpressure. It is the baseline the benchmarks and
// bpsim measure the planner against, not a call for production use.
func (s *Store) Claimer() backpressure.OutboxStore[outbox.Row] { return (*claimer)(s) }

// claimer is the planner's view of a Store: the same store, so converting
// between the two is free and a closed Store's claimer is closed too. Its
// methods are in claim.go, window.go and sweeptx.go.
type claimer Store

var (
	_ backpressure.OutboxStore[outbox.Row] = (*claimer)(nil)
	_ backpressure.Counter                 = (*claimer)(nil)
	_ backpressure.TxSweeper[outbox.Row]   = (*claimer)(nil)
)
