// Package outbox is the vocabulary every outbox store shares: the message a
// producer enqueues, the row a claim returns, a row's states, the
// completions a dispatcher sends back, and the errors a store returns.
//
// Both stores of this module (sqlitestore and pgstore) speak it, the
// dispatch package consumes it, and the storetest conformance suite checks a
// store against it, so a user's own store that passes storetest works with
// dispatch unchanged. The package depends on nothing of the planner's
// (package backpressure): it defines what the planner and the stores share,
// the route rule ([Route.Validate]), the owned shard set and its ceilings
// ([OwnedShardFraction], [Apportionment]), a namespace's [Rate], the checks
// of the settings' values ([CheckQuota], [CheckWeight], [CheckRate],
// [CheckNamespace], their [*ConfigError]) and the store contract
// ([OutboxStore], with its extensions [Counter] and [TxSweeper]), and the
// planner names them with type aliases.
//
// A row's life:
//
//	Enqueue ──► pending ──claim──► claimed ──Settle──► settled ──PurgeSettled──► gone
//	              ▲  ▲                │  │
//	              │  ├──Retry (delay)─┤  └──DeadLetter, or Retry past MaxAttempts──► dead
//	              │  └──Snooze (delay,┘                                          │
//	              │     attempt given back)                                      │
//	              │                                                              │
//	              └──────────────────────────Requeue─────────────────────────────┘
//
// A claimed row whose lease expires is claimable again: a crashed
// dispatcher's rows come back. Every completion is fenced by the claim's
// token, so a claimer whose lease was lost can never settle a row that
// another claim holds.
//
// What is exported, and why: this is the vocabulary every store and the
// dispatcher share, so that backends cannot drift apart. [Message] and
// [Row] with its [State] are what goes in and comes out; a [Completion]
// (built by [SettleRow], [RetryRow], [DeadLetterRow] or [SnoozeRow]) with its [Outcome]
// is how a row finishes, and [Result] what a batched call did to each row;
// [Lease] names one claim, the fence of every completion, and [MinLease]
// and [DefaultLease] bound lease durations; [Store], [Completer] and
// [Notifier] are the capabilities a store offers, with [Stats] and
// [ListDeadParams] for inspection. The Max* constants
// are every limit a message meets at Enqueue, route limits included, so a
// message one store accepts every store accepts; [ValidateMessages] applies
// them. Errors are sentinels (ErrLeaseLost, ErrNotFound, ErrClosed, …) with
// a typed error per kind carrying the details, matched with errors.Is and
// errors.As.
package outbox
