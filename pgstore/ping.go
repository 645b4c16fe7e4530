package pgstore

import "context"

// Ping implements [outbox.Pinger]: one round trip of an empty statement on
// a pooled connection (no outbox row is read), so its cost is independent
// of the outbox's size. A connection found dead is dropped with the pool's
// other dead connections and the ping tried once more, as every call of
// the store does. It returns an error matching [outbox.ErrClosed] on a nil,
// zero or closed store (a Membership's store included, once it left or its
// store closed), ctx's error when ctx is done, and the pool's or the
// database's error otherwise.
func (s *Store) Ping(ctx context.Context) error {
	const op = "Ping"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if err := s.run(ctx, true, func() error { return s.pool.Ping(ctx) }); err != nil {
		return opError(op, err)
	}
	return nil
}
