package outbox

import "context"

// Pinger is an optional extension of [Store]: a check, at a cost that does
// not depend on how many rows the outbox holds, that the store can reach
// its database now. A health or readiness probe calls it, and so does a
// service at start-up, to fail fast on a store it cannot reach.
// sqlitestore and pgstore implement it.
type Pinger interface {
	// Ping returns nil if the store is open and its database answers one
	// round trip (it reads no outbox row): an error matching [ErrClosed]
	// on a closed or zero store, ctx's error (wrapped) when ctx is done,
	// and the database's error otherwise. It changes nothing.
	Ping(ctx context.Context) error
}
