package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxkit/backpressure/sqlitestore"
)

// sqliteDatabase runs each policy on a fresh SQLite file in a temporary
// directory, removed on Close. The files are throwaway, so commits do not
// wait for fsync (SyncNormal).
type sqliteDatabase struct {
	dir string
}

func openSQLite(parent string) (*sqliteDatabase, error) {
	dir, err := os.MkdirTemp(parent, "bpsim-")
	if err != nil {
		return nil, fmt.Errorf("bpsim: sqlite database: temporary directory: %w", err)
	}
	return &sqliteDatabase{dir: dir}, nil
}

func (d *sqliteDatabase) Name() string { return "sqlite database in " + d.dir }

func (d *sqliteDatabase) Close() error { return os.RemoveAll(d.dir) }

// ReportName is "": the file was temporary and is gone after the run.
func (d *sqliteDatabase) ReportName(string) string { return "" }

func (d *sqliteDatabase) Open(ctx context.Context, policy string, opts storeOptions) (*simStore, error) {
	path := filepath.Join(d.dir, policy+".db")
	name := "sqlite database " + path
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{ShardCount: opts.ShardCount, Lease: opts.Lease, Now: opts.Now, SyncNormal: true, PendingCaps: opts.PendingCaps})
	if err != nil {
		return nil, fmt.Errorf("bpsim: %s: %w", name, err)
	}
	return newSimStore(s, name)
}
