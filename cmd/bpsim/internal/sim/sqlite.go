package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxkit/backpressure"
	vocab "github.com/outboxkit/backpressure/outbox"
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

func (d *sqliteDatabase) Open(ctx context.Context, policy string, opts storeOptions) (outbox, error) {
	path := filepath.Join(d.dir, policy+".db")
	name := "sqlite database " + path
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{ShardCount: opts.ShardCount, Lease: opts.Lease, Now: opts.Now, SyncNormal: true})
	if err != nil {
		return nil, fmt.Errorf("bpsim: %s: %w", name, err)
	}
	return &sqliteOutbox{s: s, name: name}, nil
}

// sqliteOutbox adapts a sqlitestore.Store to outbox.
type sqliteOutbox struct {
	s    *sqlitestore.Store
	name string
}

func (o *sqliteOutbox) Name() string { return o.name }

func (o *sqliteOutbox) Enqueue(ctx context.Context, msgs []message) (int, error) {
	m := make([]vocab.Message, len(msgs))
	for i, x := range msgs {
		m[i] = vocab.Message{DispatchKey: x.Key, Namespace: x.Namespace, TaskQueue: x.TaskQueue}
	}
	return o.s.Enqueue(ctx, m)
}

func (o *sqliteOutbox) CountClaimedOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction) (map[string]int, error) {
	return o.s.CountClaimedOutboxRows(ctx, shards)
}

func (o *sqliteOutbox) CountPendingOutboxRows(ctx context.Context, shards backpressure.OwnedShardFraction, capPerRoute int) ([]backpressure.RouteCount, error) {
	return o.s.CountPendingOutboxRows(ctx, shards, capPerRoute)
}

func (o *sqliteOutbox) ClaimOutboxRowsScoped(ctx context.Context, shards backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]row, error) {
	rs, err := o.s.ClaimOutboxRowsScoped(ctx, shards, claims)
	return sqliteRows(rs), err
}

func (o *sqliteOutbox) ClaimUnscoped(ctx context.Context, shards backpressure.OwnedShardFraction, limit int) ([]row, error) {
	rs, err := o.s.ClaimOutboxRowsUnscoped(ctx, shards, limit)
	return sqliteRows(rs), err
}

func (o *sqliteOutbox) Settle(ctx context.Context, key string, token int64) error {
	err := o.s.Settle(ctx, vocab.Lease{DispatchKey: key, Token: token})
	if errors.Is(err, vocab.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", errLeaseLost, err)
	}
	return err
}

func (o *sqliteOutbox) Inspect(ctx context.Context, key string) (rowState, error) {
	r, err := o.s.Get(ctx, key)
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		return rowState{}, nil
	case err != nil:
		return rowState{}, err
	}
	return rowState{Found: true, Settled: r.State == vocab.StateSettled, State: string(r.State), Attempts: r.Attempts}, nil
}

func (o *sqliteOutbox) Close() error { return o.s.Close() }

func sqliteRows(rs []vocab.Row) []row {
	out := make([]row, len(rs))
	for i, r := range rs {
		out[i] = row{Key: r.DispatchKey, Token: r.Token, EnqueuedAt: r.EnqueuedAt, ClaimedAt: r.ClaimedAt}
	}
	return out
}
