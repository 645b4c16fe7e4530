// Package dispatch runs a fair, quota-capped worker pool over an outbox: a
// [Dispatcher] sweeps with the planner ([backpressure.SweepAhead]), hands each
// claimed row to a worker, extends the leases of the rows it holds, and
// completes them in batches through the store's [outbox.Completer].
//
// Most callers need three calls:
//
//	d, err := dispatch.New(bp, store, handle, dispatch.Options{Workers: 64})
//	if err != nil { ... }
//	err = d.Run(ctx) // until ctx is done; nil after a clean shutdown
//
// What a Dispatcher guarantees:
//
//   - Enforced credit. A sweep claims at most as many rows as there are idle
//     workers (and at most the planner's BatchSize), so a claimed row never
//     waits behind busy workers while its lease runs. At any instant
//     running handlers ≤ Options.Workers, and a namespace's running rows ≤
//     its per-node ceiling (they are claimed rows, which the planner caps).
//   - Leases. Every row the dispatcher holds, running or waiting for its
//     completion to be written, has its lease extended in one batched
//     [outbox.Completer.ExtendLeases] call well before it expires
//     (Options.LeaseRenewal). A row whose extension reports the lease lost
//     has its handler's ctx cancelled, and its result is never written.
//   - Completion. A handler's result is written in batches through
//     [outbox.Completer.Complete], fenced by the row's claim token: a row is
//     settled at most once, and a lost lease is reported (Metrics, debug
//     log), never retried.
//   - Failure. A handler error retries the row after Options.Backoff; an
//     error wrapped by [Permanent] dead-letters it; past its MaxAttempts the
//     store dead-letters it on retry; a panic is recovered, logged with its
//     stack, and retried like an error.
//   - Shutdown. When Run's ctx is done, the dispatcher stops claiming, lets
//     the running handlers finish for up to Options.ShutdownTimeout, writes
//     their results with a context that outlives ctx, then cancels the rest:
//     their rows come back when their leases expire. With Options.Queue,
//     rows still queued when ctx is done are not started: they too come
//     back when their leases expire, and Run counts them as abandoned.
//     Nothing is lost; a row whose handler was abandoned runs again
//     (at-least-once activities, settled at most once).
//   - Shard changes. Run sweeps through the Backpressure it was given, so a
//     [backpressure.Backpressure.SetOwnedShards] takes effect at the next
//     sweep; rows already claimed finish normally.
//   - Operating a cluster (opt-in, Options.Operate). Quotas, weights and
//     pauses kept in the store apply on every node within
//     Operate.SettingsInterval, validated as SetConfig (a bad one is
//     reported and the last good configuration kept), and each node
//     publishes a report of its last plan for outboxctl and the admin
//     pages; see [Operate].
//
// An idle dispatcher (its last sweep came back short) sweeps again at the
// first of:
//
//   - a notification, when the store implements [outbox.Notifier]: rows
//     were enqueued (Options.Coalesce later);
//   - a result written for a namespace the last sweep left at its ceiling,
//     which frees headroom (Coalesce later): a namespace at its quota with
//     workers to spare drains at the speed of its handlers;
//   - the next delayed or scheduled row's due time: a retry the dispatcher
//     wrote (known without asking the store), or, when the store implements
//     [outbox.DueProber], the store's answer, asked as the dispatcher goes
//     idle after rows may have been enqueued (at most every 20ms, or every
//     PollInterval if shorter);
//   - the next rate token of a namespace the last sweep held by its rate
//     ([backpressure.Backpressure.NextTokenAt]; at least Coalesce, and 1ms,
//     after the sweep), so that a backlogged namespace alone starts rows at
//     its rate;
//   - the end of a downstream's Retry-After hold of a namespace the last
//     sweep reported (with Options.Adaptive);
//   - the jittered Options.PollInterval, the fallback for a lost
//     notification, rows of other processes a store cannot announce, and a
//     store without DueProber.
//
// Logs (Options.Logger). Run logs one Info line when it starts ("dispatch:
// run started": workers, the store's type, shards owned of the shard
// count, batch size, the hand-off, the gate New verified and its mode) and
// one when it stops ("dispatch: run stopped": the results written, as
// settled, retried, dead-lettered and lease lost; the reason, ctx's cause;
// whether the shutdown was clean, and if not what it abandoned). At Debug,
// each namespace a plan holds at its ceiling, paused, or for an invalid
// route gets a line ("dispatch: namespace held": reason, held, claimed,
// ceiling, quota) at most once every 10 s while it stays held; a namespace
// waiting only for its turn in the batch gets none. Store failures,
// dead letters and panics are Warn and Error lines; an idle dispatcher logs
// nothing.
//
// Adaptive ceilings (Options.Adaptive, [AdaptiveCeilings]): a handler's
// [Overloaded] signal (HTTP 429 or 503 through [OverloadedResponse]) cuts
// its namespace's ceiling on this node to the calls the downstream took,
// and it is not raised before the Retry-After (with HoldClaims the
// namespace's rows are held until then); successes at the ceiling raise it
// back to the static one.
// [Dispatcher.AdaptiveCeilings] shows it, [Dispatcher.PinAdaptiveCeiling]
// and [Dispatcher.ResetAdaptiveCeiling] steer it, [Metrics].Adapted
// reports it, and after every sweep the dispatcher checks its claims
// against what the downstream asked (a Warn line on a breach). See
// docs/adaptive.md.
//
// What is exported, and why: [New], [Options] and the [Dispatcher] it
// returns are the service's whole loop; [Handler] is what the service
// writes, [Mux] routes rows to a handler per task queue and [JSON] decodes
// a typed JSON payload, with [Permanent] and [IsPermanent] to dead-letter a row at once
// and [Backoff] to shape retries; [Store] names the store calls the loop
// makes, so that any store (or a test double) fits. [Metrics], [NopMetrics]
// and the event types ([SweepEvent], [CompletionEvent], [LeaseLostEvent])
// are the observation hook that otelmetrics implements. Errors:
// [ErrInvalidOptions] with [OptionError] for New, [ErrRunning] for a second
// Run, [ErrUncleanShutdown] with [ShutdownError] for handlers abandoned at
// the deadline, and [PanicError], the result a panicking handler gets.
package dispatch
