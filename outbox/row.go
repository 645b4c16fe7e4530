package outbox

import (
	"time"
)

// State is a row's lifecycle state as a store keeps it.
type State string

// The states of a row. A claimed row whose lease has expired is still
// StateClaimed; it is claimable again all the same (Stats counts it apart).
const (
	StatePending State = "pending" // never claimed, put back by Retry, or requeued
	StateClaimed State = "claimed" // claimed by the claim whose token the row holds
	StateSettled State = "settled" // done; kept for dedup and audit until purged
	StateDead    State = "dead"    // dead-lettered: never claimed again until requeued
)

// Valid reports whether s is one of the four states.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateClaimed, StateSettled, StateDead:
		return true
	}
	return false
}

// Row is an outbox row as a claim, Get or ListDead returns it.
type Row struct {
	ID          int64 // the store's row id, increasing in enqueue order
	DispatchKey string
	Namespace   string
	TaskQueue   string
	Shard       int // ShardFor(DispatchKey, the store's shard count), fixed at enqueue
	Payload     []byte
	State       State

	// Attempts counts the claims of this row so far, including the
	// current one: 1 on the first claim, less the claims a Snooze gave
	// back. Requeue resets it to 0.
	Attempts int

	// Snoozes counts the completions that snoozed this row (see
	// [Snooze]): claims that spent no attempt. Requeue keeps it.
	Snoozes int

	// MaxAttempts is the most claims the row gets: a Retry once Attempts
	// ≥ MaxAttempts dead-letters it. 0 means no limit.
	MaxAttempts int

	// Priority is the row's Message.Priority: within its route, rows of
	// higher priority are claimed first, then the oldest.
	Priority int

	// Token identifies the current (or last) claim of the row: a claim
	// draws a token larger than every earlier claim's, of any row (the
	// rows of one claim may share it), so (DispatchKey, Token) names one
	// claim of one row, and a later claim of a row has a larger token: a
	// fence token for a downstream that refuses a write with a token
	// smaller than one it has seen for the key. Completions and lease
	// extensions need it. 0 for a row never claimed.
	Token int64

	EnqueuedAt     time.Time // when the row was enqueued
	RunAt          time.Time // when the row becomes (or became) claimable: enqueue time, its RunAt, or the end of a retry delay
	ClaimedAt      time.Time // when the current (or last) claim was taken; zero if never claimed
	LeaseExpiresAt time.Time // when the current (or last) claim's lease ends; zero if never claimed
	FinishedAt     time.Time // when the row was settled or dead-lettered; zero otherwise
	LastError      string    // the error of the last Retry or DeadLetter (or Snooze that gave one), "" if none

	// Headers are the message's [Message.Headers] as enqueued; nil if it
	// had none. A claim's rows share no map with the store: a handler may
	// keep or change it.
	Headers map[string]string
}

// Route returns the row's route.
func (r Row) Route() Route {
	return Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}
}

// Lease returns the row's current claim, for a completion or an extension.
func (r Row) Lease() Lease { return Lease{DispatchKey: r.DispatchKey, Token: r.Token} }
