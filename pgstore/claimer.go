package pgstore

import (
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Claimer returns the store's planner-facing calls, for [backpressure.Sweep]
// and a dispatcher built on [outbox.Store]: the counts and the claim of
// [backpressure.OutboxStore], and [backpressure.Counter], serving every
// [backpressure.CountParams] (windows and both counts in one statement).
// The returned value's calls behave as the store's own: each is one SQL
// statement, returns an error matching [outbox.ErrClosed] once s is
// closed (or for a nil or zero s), and on a Membership's store
// ([Membership.Store]) claims only on the shards the membership holds.
// Claimer makes no call to the database, and every call returns the same
// value.
//
// The value also has
//
//	ClaimOutboxRowsUnscoped(ctx, shards, limit int) ([]outbox.Row, error)
//
// found by type assertion: it claims at most limit of the oldest claimable
// rows on the owned shards whatever their namespace, the claim of a
// dispatcher without backpressure. It is the baseline the benchmarks and
// bpsim measure the planner against, not a call for production use.
//
// With [Options.WindowClaims] the value also has the window claim,
// ClaimOutboxWindow, that [backpressure.OutboxStore] describes.
func (s *Store) Claimer() backpressure.OutboxStore[outbox.Row] {
	if s != nil && s.windowClaim {
		return windowClaimer{(*claimer)(s)}
	}
	return (*claimer)(s)
}

// windowClaimer is the claimer with the window claim (Options.WindowClaims):
// every claimer method, and ClaimOutboxWindow (window_claim.go).
type windowClaimer struct{ *claimer }

// claimer is the planner's view of a Store: the same store, so that
// converting between the two is free and a closed or fenced Store's rules
// hold for its claimer too. Its methods are in outbox.go (this package's).
type claimer Store

var (
	_ backpressure.OutboxStore[outbox.Row] = (*claimer)(nil)
	_ backpressure.Counter                 = (*claimer)(nil)
)
