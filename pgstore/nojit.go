package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// noJIT turns JIT off for the rest of the implicit transaction it runs in.
// set_config with is_local, not SET LOCAL: SET LOCAL outside an explicit
// transaction block logs a warning on every call.
const noJIT = `SELECT set_config('jit', 'off', true)`

// batchNoJIT runs sql with args with JIT off, and run on its results:
// noJIT and sql go as one batch, one round trip, and run in one implicit
// transaction, so the setting ends with it and the pool's session keeps its
// own. The claims, the pending counts and PurgeSettled run this way. Their
// row limits are parameters the planner estimates at a tenth of a route or
// of an index, so with a large backlog their estimated cost passes
// jit_above_cost, and PostgreSQL would compile each call: at 2,000,000
// unsettled rows in 20 routes, about 15 ms for a claim whose work takes 4–5
// ms. JIT is decided when a plan is made but compiled when the executor
// starts, so turning it off also stops a cached generic plan that was made
// with it on.
//
// again says whether the batch may run a second time after a lost
// connection (see [Store.run]).
func (s *Store) batchNoJIT(ctx context.Context, again bool, sql string, args []any, read func(pgx.BatchResults) error) error {
	return s.run(ctx, again, func() error { return s.batchNoJITOnce(ctx, sql, args, read) })
}

func (s *Store) batchNoJITOnce(ctx context.Context, sql string, args []any, run func(pgx.BatchResults) error) (err error) {
	b := &pgx.Batch{}
	b.Queue(noJIT)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		// Always, even if run panics: closing releases the connection.
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err = br.Exec(); err != nil {
		return err
	}
	return run(br)
}

// queryNoJIT is batchNoJIT for a statement that returns rows, read by read.
func (s *Store) queryNoJIT(ctx context.Context, again bool, sql string, args []any, read func(pgx.Rows) error) error {
	return s.batchNoJIT(ctx, again, sql, args, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		return read(rows)
	})
}

// collectNoJIT is queryNoJIT collecting each row with fn.
func collectNoJIT[T any](ctx context.Context, s *Store, again bool, sql string, args []any, fn pgx.RowToFunc[T]) ([]T, error) {
	var out []T
	err := s.queryNoJIT(ctx, again, sql, args, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, fn)
		return err
	})
	return out, err
}
