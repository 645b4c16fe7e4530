package sim

import (
	"context"
	"errors"
	"os"
)

type sqliteDatabase struct{ dir string }

func openSQLite(parent string) (*sqliteDatabase, error) {
	dir, err := os.MkdirTemp(parent, "bpsim-")
	return &sqliteDatabase{dir}, err
}
func (d *sqliteDatabase) Name() string { return "sqlite" }
func (d *sqliteDatabase) Close() error { return os.RemoveAll(d.dir) }
func (d *sqliteDatabase) Open(ctx context.Context, policy string, opts storeOptions) (outbox, error) {
	return nil, errors.New("sqlite store not yet available")
}
