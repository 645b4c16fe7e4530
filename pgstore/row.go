package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one row to enqueue.
type Message struct {
	DispatchKey string // unique across the outbox; enqueueing it again is a no-op
	Namespace   string // the tenant
	TaskQueue   string // the namespace's task queue: with Namespace, the route
	Payload     []byte // opaque to the store; nil is stored as empty
}

// Row is an outbox row as a claim (or Get) returns it.
type Row struct {
	ID          int64 // the row's id, increasing in enqueue order; oldest first means by (EnqueuedAt, ID)
	DispatchKey string
	Namespace   string
	TaskQueue   string
	Shard       int // backpressure.ShardFor(DispatchKey, ShardCount), fixed at enqueue
	Payload     []byte

	// Attempts counts the claims of this row so far, including the current
	// one: 1 on the first claim.
	Attempts int

	// Token identifies the current claim; every claim of every row draws a
	// fresh one from a database sequence. Settle and Retry need it. It is 0
	// for a row that was never claimed.
	Token int64

	EnqueuedAt     time.Time // when the row was first enqueued
	ClaimedAt      time.Time // when the current (or last) claim was taken; zero if never claimed
	LeaseExpiresAt time.Time // when the current (or last) claim's lease ends; zero if never claimed
}

// State is a row's lifecycle state as stored. A claimed row whose lease has
// expired is still StateClaimed; it is claimable again all the same.
type State string

// The states of a row.
const (
	StatePending State = "pending" // never claimed, or put back by Retry
	StateClaimed State = "claimed" // claimed; the lease may have expired
	StateSettled State = "settled" // settled by its claimer; never claimed again
)

// rowColumns are the columns scanRow reads, in order, qualified by o.
const rowColumns = `o.id, o.dispatch_key, o.namespace, o.task_queue, o.shard, o.payload,
	o.attempts, o.token, o.enqueued_at, o.claimed_at, o.lease_expires_at`

// scanRow reads rowColumns (plus any extra destinations after them).
func scanRow(rows pgx.CollectableRow, extra ...any) (Row, error) {
	var (
		r               Row
		shard, attempts int32
		claimed, leased *time.Time
	)
	dest := append([]any{&r.ID, &r.DispatchKey, &r.Namespace, &r.TaskQueue, &shard, &r.Payload,
		&attempts, &r.Token, &r.EnqueuedAt, &claimed, &leased}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return Row{}, err
	}
	r.Shard, r.Attempts = int(shard), int(attempts)
	r.EnqueuedAt = r.EnqueuedAt.UTC()
	if claimed != nil {
		r.ClaimedAt = claimed.UTC()
	}
	if leased != nil {
		r.LeaseExpiresAt = leased.UTC()
	}
	return r, nil
}
