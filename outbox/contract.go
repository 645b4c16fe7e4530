package outbox

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
// Route, oldest first (a store whose rows carry a priority takes the highest
// priority first, then the oldest; priorities never change the limits). A
// Plan's claims always have Limit ≥ 1.
type ScopedClaim struct {
	Route Route
	Limit int
}

// OutboxStore is the durable outbox a dispatcher drains. The planner chooses
// only the limit and scope of the store's claim; exactly-once settling is
// the store's (a row is settled, retried or dead-lettered by one claim only,
// fenced by its token; its handler runs at least once).
// Each method is one round trip to the database (one statement or one
// transaction; a count the store keeps from its own statements, none) and
// honours ctx: when ctx is done it returns ctx's error (wrapped is fine)
// and changes nothing.
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
// Arguments a plan never holds are refused, not guessed at: a claim Limit
// or a cap below 1, a route [Route.Validate] rejects (no row can be on it),
// a route named twice. Such a call returns an error (the outbox stores: an
// *outbox.ArgumentError naming the argument) and changes nothing. A call
// that fails returns nil results; one that succeeds returns a non-nil map
// or slice, empty when there is nothing to count or claim.
//
// Two optional extensions make a sweep cheaper; a store implements those
// that fit it. [Counter] counts only the namespaces a sweep can serve (fewer
// probes with many namespaces) and, for a store over a network, both counts
// in one round trip. [TxSweeper] runs a sweep's counts and claim in one
// transaction, which suits an in-process store.
//
// A third, the window claim, is a method found by type assertion (it adds
// no name to this package):
//
//	ClaimOutboxWindow(ctx context.Context, shards OwnedShardFraction, window CountParams,
//		skip []string, routeAfter map[string]string) (rows []R, routes []RouteCount, err error)
//
// It resolves the window rule in the claim: walking the namespaces in the
// cyclic order after window.After (as a [Counter] window does; CapPerRoute
// and Claimed are ignored), it claims, atomically, one row of each of the
// first window.Namespaces (≥ 1) namespaces with demand — not in skip
// (sorted, distinct: the namespaces without headroom) and with a claimable
// row on the owned shards on a route the store's pending counts report —
// if more than window.Namespaces namespaces have demand, and otherwise
// claims nothing and returns empty, non-nil slices. A namespace's row comes
// from its first such route in task-queue order after routeAfter[namespace]
// (cyclically; from the smallest when it has no entry), and is the row
// ClaimOutboxRowsScoped with Limit 1 would take there. rows[i] is the row
// of routes[i].Route, both in namespace order; routes[i].Count is 1 when
// that route was the namespace's only one with a claimable row, 2 when it
// had others. The store only reads routeAfter. Rows another claimer holds
// locked, or on shards a fenced store no longer holds, may be skipped, so a
// call may return fewer rows. Leases, tokens, exactly-once settling and the errors
// of bad arguments (window.Namespaces below 1, skip not sorted and
// distinct) are as for ClaimOutboxRowsScoped; [ErrNotSupported], returned
// at once, makes [backpressure.Sweep] count instead. Sweep uses it when the window rule
// applies with no weights, no rates and no claim of the node in flight:
// the claimed counts and the window claim are then the whole sweep. The
// storetest suite checks that its rows are exactly those a counted sweep
// claims on the same state.
//
// The package's conformance suite, storetest, checks this contract and the
// extensions against a real implementation; run it from the
// implementation's tests.
type OutboxStore[R any] interface {
	// CountClaimedOutboxRows returns, per namespace, the number of rows on
	// the owned shards that hold a live lease now. Pending, expired and
	// settled rows are not counted. Namespaces with no claimed rows may be
	// left out of the map; the map is never nil on success.
	CountClaimedOutboxRows(ctx context.Context, shards OwnedShardFraction) (map[string]int, error)

	// CountPendingOutboxRows returns, per route with at least one claimable
	// row on the owned shards, the number of claimable rows (visible pending
	// rows and rows whose lease expired), each count capped at capPerRoute
	// (capPerRoute ≥ 1; below it is an error), so the store never has to
	// count a whole backlog. Each route appears at most once, in
	// [Route.Compare] order; counts are ≥ 1.
	CountPendingOutboxRows(ctx context.Context, shards OwnedShardFraction, capPerRoute int) ([]RouteCount, error)

	// ClaimOutboxRowsScoped claims, atomically across all claims (all or
	// nothing), at most Limit claimable rows of each claim's Route on the
	// owned shards, oldest first within a route (highest priority first,
	// then oldest, in a store with priorities), and returns them with their
	// new lease and claim token, grouped by claim in the claims' order, in
	// that order within each. Rows it does not return are unchanged in
	// every column. Two concurrent callers never both hold a live lease on
	// one row, and settling a row requires the token of its current claim.
	// Every claim needs Limit ≥ 1 and a valid route, each route at most
	// once; else the call is an error and claims nothing. No claims, or no
	// shard owned, claim nothing without an error.
	ClaimOutboxRowsScoped(ctx context.Context, shards OwnedShardFraction, claims []ScopedClaim) ([]R, error)
}

// CountParams says what a [Counter] counts: the pending counts of every
// namespace or of a window of them, and, if asked, the claimed counts in
// the same round trip. It is a struct so that the extension can grow
// without a new interface per optimisation.
type CountParams struct {
	// CapPerRoute caps each route's pending count, as capPerRoute does in
	// CountPendingOutboxRows (≥ 1).
	CapPerRoute int

	// Namespaces is the most namespaces the pending counts cover (≥ 0).
	// 0 means every namespace: the counts CountPendingOutboxRows returns,
	// and After is ignored. n ≥ 1 means a window: walking namespaces in
	// the cyclic order After describes, the first n of them that have at
	// least one claimable row on the owned shards (all of them, when
	// fewer have).
	Namespaces int

	// After is where a window's walk starts: namespaces are taken in
	// ascending byte order from the first one greater than After,
	// wrapping around to the smallest after the largest, so After itself
	// (if it has rows) comes last. "" starts at the smallest.
	After string

	// Claimed asks for the claimed counts too: what CountClaimedOutboxRows
	// returns, from the same round trip (and the same snapshot of the
	// outbox, when the store can give one).
	Claimed bool
}

// Counter is an optional extension of [OutboxStore]: one call that counts
// more than the base interface's counts do, which [backpressure.Sweep] uses where the
// store serves it. A store gains from it in two ways:
//
//   - Windows (Namespaces ≥ 1): with many namespaces a full
//     CountPendingOutboxRows probes every route, but when more namespaces
//     are active than the batch has rows, a sweep only ever serves the
//     next B of them after its rotation cursor. Sweep then counts a window
//     of B + k + 1 namespaces (k: those it knows to be at their ceiling or
//     paused) and plans exactly what the full counts would give.
//   - Claimed: both of a sweep's counts in one round trip rather than two.
//     This pays where a round trip costs more than the statement, as over
//     a network; a store whose calls are in-process gains nothing.
//
// A store over a network should serve every combination of params; an
// in-process store should serve windows and may answer Claimed with
// [ErrNotSupported], implementing [TxSweeper] instead. The storetest suite
// checks a store's Counter against its own CountClaimedOutboxRows and
// CountPendingOutboxRows.
type Counter interface {
	// CountOutboxRows returns the pending counts p describes, each capped
	// at p.CapPerRoute, and, when p.Claimed, the claimed counts
	// CountClaimedOutboxRows(ctx, shards) returns (else claimed is nil).
	// With p.Namespaces 0 the pending counts are those
	// CountPendingOutboxRows(ctx, shards, p.CapPerRoute) returns; with a
	// window, they are every route with claimable rows of each of the
	// window's namespaces, sorted by namespace then task queue. One round
	// trip (one statement or one read transaction).
	//
	// A p.CapPerRoute below 1 or a negative p.Namespaces is an error. For
	// a combination of p.Claimed and window-or-not that the store does not
	// serve, it returns an error matching [ErrNotSupported] at once,
	// without I/O, whatever ctx, the store's state and p's other fields;
	// [backpressure.Sweep] then counts without it.
	CountOutboxRows(ctx context.Context, shards OwnedShardFraction, p CountParams) (claimed map[string]int, pending []RouteCount, err error)
}

// TxSweeper is an optional extension of [OutboxStore] for a store that can
// run a whole sweep, its counts and its claim, in one transaction. [backpressure.Sweep]
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
	// transaction). If the store implements [Counter], so does tx,
	// serving the same params.
	InSweepTx(ctx context.Context, fn func(tx OutboxStore[R]) error) error
}
