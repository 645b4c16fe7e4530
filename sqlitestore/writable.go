package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
)

// sqliteBusy is SQLite's primary result code for a lock another connection
// holds.
const sqliteBusy = 5

// checkWritable proves that the writer can write the file, changing
// nothing: in a write transaction (BEGIN IMMEDIATE) it rewrites
// outbox_meta's schema version with itself, and rolls back. SQLite opens a
// file it may not write (its permissions, a read-only mount, an immutable
// file) read-only without a word, begins the transaction, and refuses the
// first write with SQLITE_READONLY; the error is returned for Open to
// report as a *FileError. The probe does not wait for the write lock
// (busy_timeout 0 for its span, then busy again): when another connection
// holds it (SQLITE_BUSY), Open cannot tell and lets the file pass (its
// first write would report it), so that Open of a current database still
// succeeds while another writer works.
func (s *Store) checkWritable(ctx context.Context, busy time.Duration) (err error) {
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return err
	}
	defer func() {
		restore := fmt.Sprintf(`PRAGMA busy_timeout = %d`, busy.Milliseconds())
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), restore); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == sqliteBusy {
			return nil
		}
		return fmt.Errorf("check the file is writable: %w", err)
	}
	_, err = conn.ExecContext(ctx, `UPDATE outbox_meta SET value = value WHERE key = 'schema_version'`)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("check the file is writable: %w", err)
	}
	return nil
}
