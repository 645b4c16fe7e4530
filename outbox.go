package backpressure

import (
	"context"
	"strings"
)

// Route is one namespace's task queue: the unit a scoped claim addresses.
type Route struct {
	Namespace string // the tenant that owns the rows
	TaskQueue string // the namespace's task queue
}

// String returns the route as "namespace/task-queue".
func (r Route) String() string { return r.Namespace + "/" + r.TaskQueue }

// Compare orders routes by namespace, then task queue, byte by byte: the
// order of a plan's claims and of a store's pending counts. It returns -1,
// 0 or +1 as r sorts before, equal to or after o.
func (r Route) Compare(o Route) int {
	if c := strings.Compare(r.Namespace, o.Namespace); c != 0 {
		return c
	}
	return strings.Compare(r.TaskQueue, o.TaskQueue)
}

// RouteCount is a count of rows on one route.
type RouteCount struct {
	Route Route
	Count int
}

// ScopedClaim asks a store to claim at most Limit visible pending rows of
// Route, oldest first. A Plan's claims always have Limit ≥ 1.
type ScopedClaim struct {
	Route Route
	Limit int
}

// OutboxStore is the durable outbox a dispatcher drains. The planner chooses
// only the limit and scope of the store's claim; exactly-once is the store's.
// Each method is one round trip to the database (one statement or one
// transaction) and honours ctx: when ctx is done it returns ctx's error
// (wrapped is fine) and changes nothing.
//
// Every method sees only rows whose shard, ShardFor(dispatch_key,
// shards.ShardCount()), is owned by shards. A store placed with a different
// shard count must return an error rather than guess.
//
// A row is pending when it has never been claimed or was put back by a retry,
// and visible when its visibility time (set by a retry delay) has come. A
// row is claimed while its lease is live; a claimed row whose lease expired
// is claimable again. A settled row is never claimed again.
//
// The package's conformance suite, storetest, checks this contract against
// a real implementation; run it from the implementation's tests.
type OutboxStore[R any] interface {
	// CountClaimedOutboxRows returns, per namespace, the number of rows on
	// the owned shards that hold a live lease now. Pending, expired and
	// settled rows are not counted. Namespaces with no claimed rows may be
	// left out of the map.
	CountClaimedOutboxRows(ctx context.Context, shards OwnedShardFraction) (map[string]int, error)

	// CountPendingOutboxRows returns, per route with at least one claimable
	// row on the owned shards, the number of claimable rows (visible pending
	// rows and rows whose lease expired), each count capped at capPerRoute
	// (capPerRoute ≥ 1), so the store never has to count a whole backlog.
	// Each route appears at most once; counts are ≥ 1.
	CountPendingOutboxRows(ctx context.Context, shards OwnedShardFraction, capPerRoute int) ([]RouteCount, error)

	// ClaimOutboxRowsScoped claims, atomically across all claims (all or
	// nothing), at most Limit claimable rows of each claim's Route on the
	// owned shards, oldest first within a route, and returns them with their
	// new lease and claim token. Rows it does not return are unchanged in
	// every column. Two concurrent callers never both hold a live lease on
	// one row, and settling a row requires the token of its current claim.
	ClaimOutboxRowsScoped(ctx context.Context, shards OwnedShardFraction, claims []ScopedClaim) ([]R, error)
}

// PendingWindow asks a [PendingWindowCounter] for the pending counts of a
// window of namespaces rather than of all of them.
type PendingWindow struct {
	// CapPerRoute caps each route's count, as in CountPendingOutboxRows
	// (≥ 1).
	CapPerRoute int

	// After is where the walk starts: namespaces are taken in ascending
	// byte order from the first one greater than After, wrapping around to
	// the smallest after the largest, so After itself (if it has rows)
	// comes last. "" starts at the smallest.
	After string

	// Namespaces is the most namespaces the window holds (≥ 1): the walk
	// stops once it has this many namespaces with at least one claimable
	// row on the owned shards. [SweepCounter.CountSweep] also takes 0, for
	// no window: every namespace.
	Namespaces int
}

// PendingWindowCounter is an optional extension of [OutboxStore] that lets
// a sweep count only the namespaces it can serve. With many namespaces a
// full CountPendingOutboxRows probes every route; when more namespaces are
// active than the batch has rows, a sweep only ever serves the next B of
// them after its rotation cursor, so [Sweep] asks for a window of
// B + k + 1 namespaces (k: the namespaces it knows to be at their ceiling
// or paused) and gets exactly the plan the full counts would give.
//
// The storetest suite checks a store's window against its full counts.
type PendingWindowCounter interface {
	// CountPendingOutboxRowsWindow returns what CountPendingOutboxRows
	// (ctx, shards, w.CapPerRoute) returns, restricted to the namespaces of
	// the window: walking namespaces in the cyclic order w.After describes,
	// the first w.Namespaces of them that have at least one claimable row
	// on the owned shards (all of them, when fewer have). For each such
	// namespace it returns every route with claimable rows, sorted by
	// namespace then task queue. One round trip (one statement or one
	// read transaction).
	CountPendingOutboxRowsWindow(ctx context.Context, shards OwnedShardFraction, w PendingWindow) ([]RouteCount, error)
}

// SweepCounter is an optional extension of [OutboxStore] for a store that
// can read both of a sweep's counts, the live claimed rows and the pending
// rows, in one round trip rather than two. [Sweep] then reads them with
// one call. It pays where a round trip costs more than the statement, as
// over a network: a store whose calls are in-process gains nothing.
//
// The storetest suite checks a store's combined counts against its own
// separate ones.
type SweepCounter interface {
	// CountSweep returns what CountClaimedOutboxRows(ctx, shards) and, in
	// the same round trip, the pending count w describes return:
	// CountPendingOutboxRows(ctx, shards, w.CapPerRoute) when w.Namespaces
	// is 0 (w.After is then ignored), else
	// CountPendingOutboxRowsWindow(ctx, shards, w). Sweep asks for a window
	// only of a store that implements [PendingWindowCounter]; a store that
	// does not may reject one. A w.CapPerRoute below 1 or a negative
	// w.Namespaces is an error. Both counts should come from one snapshot
	// of the outbox when the store can give one.
	CountSweep(ctx context.Context, shards OwnedShardFraction, w PendingWindow) (claimed map[string]int, pending []RouteCount, err error)
}

// TxSweeper is an optional extension of [OutboxStore] for a store that can
// run a whole sweep, its counts and its claim, in one transaction. [Sweep]
// then makes every call of the sweep on the view InSweepTx passes to fn, so
// the counts and the claim see one state of the outbox: the plan's headroom
// and pending counts are still exact when the claim runs, and the store may
// claim the rows its counts found without searching for them again. The
// whole sweep is then one transaction (which the round-trip convention of
// OutboxStore counts as one).
//
// The storetest suite checks a store's view against the store itself.
type TxSweeper[R any] interface {
	// InSweepTx runs fn once, inside one transaction, with tx: a view of
	// the store on which every call runs in that transaction, and at one
	// instant (the store reads its clock once, when the transaction
	// begins). The transaction commits if fn returns nil and rolls back
	// otherwise, leaving the outbox unchanged even if fn claimed rows
	// through tx. It returns fn's error as is, or the store's own. tx must
	// not be used after fn returns, and fn must not call the store itself
	// (a store may hold a lock or its only connection for the
	// transaction). If the store implements [PendingWindowCounter], so
	// does tx.
	InSweepTx(ctx context.Context, fn func(tx OutboxStore[R]) error) error
}
