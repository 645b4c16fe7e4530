package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// unscopedClaimer is the one call bpsim needs beyond [outbox.Store]: the
// unscoped oldest-first claim the unscoped policy measures. Both stores'
// Claimers have it, as a benchmark baseline.
type unscopedClaimer interface {
	ClaimOutboxRowsUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error)
}

// simStore is one fresh outbox a policy runs on: any [outbox.Store] whose
// Claimer can also claim unscoped, with its Claimer's calls at hand and a
// name for errors.
type simStore struct {
	outbox.Store
	backpressure.OutboxStore[outbox.Row] // the store's Claimer
	unscoped                             unscopedClaimer
	name                                 string // the database (and schema or file), for errors
}

// newSimStore wraps s, whose Claimer must also claim unscoped.
func newSimStore(s outbox.Store, name string) (*simStore, error) {
	c := s.Claimer()
	u, ok := c.(unscopedClaimer)
	if !ok {
		s.Close()
		return nil, fmt.Errorf("bpsim: %s: the store's Claimer has no ClaimOutboxRowsUnscoped", name)
	}
	return &simStore{Store: s, OutboxStore: c, unscoped: u, name: name}, nil
}

// Name names the database (and schema or file) in errors.
func (o *simStore) Name() string { return o.name }

// ClaimUnscoped claims up to limit of the oldest claimable rows on shards.
func (o *simStore) ClaimUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]outbox.Row, error) {
	return o.unscoped.ClaimOutboxRowsUnscoped(ctx, shards, limit)
}

// rowState is what the audit reads back of one dispatch key.
type rowState struct {
	Found    bool
	Settled  bool // the stored state is settled
	State    string
	Attempts int // claims of the row, 1 when it ran exactly once
}

// Inspect reads back the row of key for the audit.
func (o *simStore) Inspect(ctx context.Context, key string) (rowState, error) {
	r, err := o.Get(ctx, key)
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		return rowState{}, nil
	case err != nil:
		return rowState{}, err
	}
	return rowState{Found: true, Settled: r.State == outbox.StateSettled, State: string(r.State), Attempts: r.Attempts}, nil
}

// storeOptions are what every store is opened with.
type storeOptions struct {
	ShardCount int
	Lease      time.Duration
	Now        func() time.Time
	// PendingCaps caps each tenant's unfinished rows (the zero value: none).
	PendingCaps outbox.PendingCaps
}

// database makes one fresh, empty outbox per policy run, and cleans up
// after them.
type database interface {
	// Name names the database in errors and in the report, with no secret.
	Name() string
	// Open returns a fresh, empty outbox named after the policy.
	Open(ctx context.Context, policy string, opts storeOptions) (*simStore, error)
	// ReportName is what the report says the policy ran on, once Close
	// has removed it: "" when there is nothing left worth naming.
	ReportName(policy string) string
	// Close releases what Open made (files, schemas, connections).
	Close() error
}
