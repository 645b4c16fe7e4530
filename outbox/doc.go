// Package outbox is the vocabulary every outbox store shares: the message a
// producer enqueues, the row a claim returns, a row's states, the
// completions a dispatcher sends back, and the errors a store returns.
//
// Both stores of this module (sqlitestore and pgstore) speak it, the
// dispatch package consumes it, and the storetest conformance suite checks a
// store against it, so a user's own store that passes storetest works with
// dispatch unchanged. The package has no dependency beyond the planner's own
// route rule ([backpressure.Route.Validate]).
//
// A row's life:
//
//	Enqueue ──► pending ──claim──► claimed ──Settle──► settled ──PurgeSettled──► gone
//	              ▲  ▲                │  │
//	              │  └──Retry (delay)─┘  └──DeadLetter, or Retry past MaxAttempts──► dead
//	              │                                                              │
//	              └──────────────────────────Requeue─────────────────────────────┘
//
// A claimed row whose lease expires is claimable again: a crashed
// dispatcher's rows come back. Every completion is fenced by the claim's
// token, so a claimer whose lease was lost can never settle a row that
// another claim holds.
package outbox
