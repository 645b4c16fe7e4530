package sqlitestore

import (
	"strconv"
	"time"
)

// Message is one row to enqueue.
type Message struct {
	DispatchKey string // unique across the outbox; enqueueing it again is a no-op
	Namespace   string // the tenant; must not be empty
	TaskQueue   string // the namespace's task queue
	Payload     []byte // opaque to the store
}

// Row is an outbox row as a claim returns it.
type Row struct {
	ID             int64 // the store's row id; ascending in enqueue order
	DispatchKey    string
	Namespace      string
	TaskQueue      string
	Shard          int // backpressure.ShardFor(DispatchKey, ShardCount)
	Payload        []byte
	Attempts       int   // claims of this row so far, including the current one
	Token          int64 // the current claim's token; unique per claim; Settle and Retry need it
	EnqueuedAt     time.Time
	ClaimedAt      time.Time // zero if never claimed
	LeaseExpiresAt time.Time // zero if never claimed
}

// State is a row's stored lifecycle state.
type State int

// The states of a row. A claimed row whose lease has expired is still
// StateClaimed; it is claimable again (see [Stats] for the split).
const (
	StatePending State = iota // never claimed, or put back by Retry
	StateClaimed              // claimed by the claim whose token the row holds
	StateSettled              // settled; kept for audit, never claimed again
)

// String returns "pending", "claimed" or "settled".
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateClaimed:
		return "claimed"
	case StateSettled:
		return "settled"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}
