package sqlitestore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/sqlitestore"
)

// TestSharedSettingsBadRows runs dispatchtest.Settings on a SQLite file:
// settings rows written by SQL (JSON null for a paused namespace, a quota
// of -5, [1, 2]) never loosen a limit on a dispatcher node.
func TestSharedSettingsBadRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	open := func(t *testing.T) dispatchtest.SettingsStore {
		s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	open(t) // creates the schema before the raw connection uses it
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	dispatchtest.Settings{Open: open, Raw: func(ctx context.Context, bodies map[string]string) error { return rawSettings(ctx, db, bodies) }}.Run(t)
}

// rawSettings writes settings rows with bodies verbatim, as an
// operator's SQL would, with one new settings version.
func rawSettings(ctx context.Context, db *sql.DB, bodies map[string]string) error {
	arg, err := json.Marshal(bodies)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var v int64
	if err := tx.QueryRowContext(ctx, `UPDATE outbox_meta SET value = value + 1 WHERE key = 'settings_version' RETURNING value`).Scan(&v); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `
INSERT INTO namespace_settings (namespace, body, version, updated_at) SELECT key, value, ?2, 0 FROM json_each(?1) WHERE true
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body, version = excluded.version`, string(arg), v); err != nil {
		return err
	}
	return tx.Commit()
}

// TestHistory runs dispatchtest.History on SQLite files, one per check:
// the node's counters in the history, and a seeded drain's estimate.
func TestHistory(t *testing.T) {
	dir := t.TempDir()
	dispatchtest.History{Open: func(t *testing.T) dispatchtest.HistoryStore {
		s, err := sqlitestore.Open(t.Context(), filepath.Join(dir, filepath.Base(t.Name())+".db"), sqlitestore.Options{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
