package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// noJIT turns JIT off for the rest of the implicit transaction it runs in.
// set_config with is_local, not SET LOCAL: SET LOCAL outside an explicit
// transaction block logs a warning on every call.
const noJIT = `SELECT set_config('jit', 'off', true)`

// noJITGeneric is noJIT for the claims, which also run on their prepared
// statement's generic plan: a scoped claim's custom plans look cheaper to
// PostgreSQL than its generic one, so it never settles on the generic plan
// and plans every claim again (0 generic plans in 30+ calls on
// BenchmarkSteady's trickle: docs/pgstore.md, "Where a trickle's wake-up
// goes"). Both plans walk the same indexes (TestExplain checks each
// claim under force_generic_plan too). Like jit, the setting ends with the
// batch's implicit transaction.
const noJITGeneric = `SELECT set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

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
	return s.run(ctx, again, func() error { return s.batchNoJITOnce(ctx, noJIT, sql, args, read) })
}

// batchNoJITOnce sends first (noJIT or noJITGeneric) and sql with args as
// one batch.
func (s *Store) batchNoJITOnce(ctx context.Context, first, sql string, args []any, run func(pgx.BatchResults) error) (err error) {
	b := &pgx.Batch{}
	b.Queue(first)
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

// collectClaim is collectNoJIT for a claim statement: its batch starts
// with noJITGeneric.
func collectClaim[T any](ctx context.Context, s *Store, sql string, args []any, fn pgx.RowToFunc[T]) ([]T, error) {
	var out []T
	err := s.run(ctx, anyLoss, func() error {
		return s.batchNoJITOnce(ctx, noJITGeneric, sql, args, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, fn)
			return err
		})
	})
	return out, err
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
