package sqlitestore

import "context"

// pingSQL reads one row of the store's own metadata table: it proves the
// database file is open and holds the store's schema, at a cost that does
// not depend on the outbox's size.
const pingSQL = `SELECT 1 FROM outbox_meta WHERE key = 'schema_version'`

// Ping implements [outbox.Pinger]: one read statement of one metadata row
// (no outbox row), so its cost is independent of the outbox's size. It
// returns an error matching [outbox.ErrClosed] on a closed or zero store,
// ctx's error when ctx is done, and the database's error otherwise.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.read(ctx); err != nil {
		return s.fail("Ping", err)
	}
	var one int
	if err := s.reader.QueryRowContext(ctx, pingSQL).Scan(&one); err != nil {
		return s.fail("Ping", err)
	}
	return nil
}
