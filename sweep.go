package backpressure

import (
	"context"
	"math"
)

// Sweep runs one sweep of a dispatcher node against store: it counts the
// rows each namespace has claimed and those pending per route on the
// node's shards, plans them as [Backpressure.Plan] does, and claims the
// plan's rows in one atomic ClaimOutboxRowsScoped. It returns the rows
// claimed and the plan.
//
// The claims are exactly those Plan would make from uncapped counts of
// the outbox as it is when the sweep counts, less the grants of claims
// still in flight on b (see [SweepAhead]). A report's Pending, Demand and
// Held may be lower bounds (see [NamespaceReport.Capped] and
// [Plan.Windowed]). A sweep runs with the configuration and shards b has
// when it starts. Sweeps on one b plan one at a time: Sweep waits for a
// sweep in progress.
//
// On error no row is claimed and b's rotation is unchanged. The error is
// ctx's if ctx is done before the sweep starts; one matching [ErrStore]
// (a *[StoreError] naming the failed call) if the store failed, or if its
// answer broke its contract (the StoreError then wraps a *[SnapshotError]
// saying how); or one
// matching [ErrInvalidConfig] if b was not built by [New] or store is nil.
// How a sweep reads is in docs/engine.md.
func Sweep[R any](ctx context.Context, b *Backpressure, store OutboxStore[R]) ([]R, Plan, error) {
	return sweep(ctx, b, store, math.MaxInt)
}

// SweepN is [Sweep] with a budget of min(n, B) rows for this sweep, B the
// batch size it starts with, as a dispatcher with n idle workers asks for
// no more rows than it can start. The plan's guarantees hold with that
// budget in place of B, and the rotation carries over whatever the
// budgets. With n ≤ 0 it returns (nil, Plan{}, nil) without calling the
// store. Errors are as for Sweep; SweepN forgets counts a SweepAhead read
// ahead.
func SweepN[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweep(ctx, b, store, n)
}

// SweepAhead is [SweepN] for a caller that sweeps again at once while
// sweeps come back full (a dispatcher draining a backlog), possibly from
// several goroutines. It reads the next sweep's counts beside a full
// sweep's claim, and the next SweepAhead within the last one's duration
// plans from them, corrected by every grant since the read
// (K′ = K + Σg, P′ = min(max(0, P − Σg), c)). And it lets the next plan
// start while its claim is in flight; that plan counts the grants in flight
// as claimed and no longer pending. Plans stay one at a time, in order.
//
// Every ceiling and the budget per plan hold as with [Sweep], given shard
// ownership that never overlaps; rows enqueued since a read wait a few
// sweeps. The store must be safe for concurrent use, and ctx should outlive
// the call (a read-ahead runs under it). Errors are as for Sweep, but a
// failed claim leaves the rotation to a plan made meanwhile, if any.
// docs/engine.md has the mechanism.
func SweepAhead[R any](ctx context.Context, b *Backpressure, store OutboxStore[R], n int) ([]R, Plan, error) {
	return sweepAhead(ctx, b, store, n)
}
