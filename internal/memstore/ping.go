package memstore

import "context"

// Ping implements outbox.Pinger: nil while the store is open and ctx live,
// one round trip (it honours FailNth).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.begin(ctx, "Ping"); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}
