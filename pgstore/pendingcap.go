package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
)

// capLockClassSQL is the first key of the advisory locks that serialise the
// producers of a capped namespace: pg_advisory_xact_lock(capLockClassSQL,
// hashtext(schema || '.' || namespace)). Two int4 keys are a lock space of
// their own, apart from the bigint keys of the migrators' lock; two
// namespaces whose hashes collide only wait for each other.
const capLockClassSQL = "1868722275" // 0x6f627063, "obpc"

// capLockSQL locks $2's namespaces in the order given (the caller sorts
// them), $1 the schema.
const capLockSQL = `
SELECT count(pg_advisory_xact_lock(` + capLockClassSQL + `, hashtext($1::text || '.' || u.n)))
FROM (SELECT n FROM unnest($2::text[]) WITH ORDINALITY AS u (n, i) ORDER BY i) u`

// capCountSQL returns the namespaces of $1 holding more unfinished rows than
// their caps $2: per namespace a walk of outbox_route_oldest_idx's entries
// of the namespace (its predicate is the unfinished rows), stopped at the
// cap + 1.
const capCountSQL = `
SELECT u.n, u.c
FROM unnest($1::text[], $2::int8[]) AS u (n, c)
WHERE (SELECT count(*) FROM (
	SELECT 1 FROM {schema}.outbox o
	WHERE o.namespace = u.n AND o.state NOT IN ('settled', 'dead')
	LIMIT u.c + 1) x) > u.c
LIMIT 1`

// enqueueCapped is Enqueue for a batch with capped namespaces: in one
// transaction, the locks, the insert, the count; rolled back if a count is
// over its cap.
func (s *Store) enqueueCapped(ctx context.Context, op string, msgs []outbox.Message, args []any, namespaces []string, caps []int) (int, error) {
	var inserted int
	// The guarded insert (enqueueTxSQL) serves both paths; on the store's
	// own pool its identity check always passes.
	args = append(args[:len(args):len(args)], s.identity.database, s.identity.settings, s.identity.storeID)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		inserted, err = s.enqueueCappedTx(ctx, tx, op, args, namespaces, caps)
		return err
	})
	return inserted, err
}

// enqueueCappedTx locks namespaces in tx (until tx ends), then inserts in a
// savepoint and counts; over a cap, it rolls back to the savepoint, so tx
// holds nothing of the batch and stays usable, and returns a
// *outbox.PendingCapError.
func (s *Store) enqueueCappedTx(ctx context.Context, tx pgx.Tx, op string, args []any, namespaces []string, caps []int) (int, error) {
	if _, err := tx.Exec(ctx, capLockSQL, s.schema, namespaces); err != nil {
		return 0, err
	}
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return 0, err
	}
	inserted, err := s.enqueueTxRows(ctx, sp, op, args)
	if err != nil {
		return 0, errors.Join(err, sp.Rollback(context.WithoutCancel(ctx)))
	}
	caps64 := make([]int64, len(caps))
	for i, c := range caps {
		caps64[i] = int64(c)
	}
	var (
		ns  string
		cap int64
	)
	switch err := sp.QueryRow(ctx, s.sql.capCount, namespaces, caps64).Scan(&ns, &cap); {
	case errors.Is(err, pgx.ErrNoRows):
		return inserted, sp.Commit(ctx) // RELEASE
	case err != nil:
		return 0, errors.Join(err, sp.Rollback(context.WithoutCancel(ctx)))
	}
	if err := sp.Rollback(ctx); err != nil {
		return 0, err
	}
	return 0, &outbox.PendingCapError{Op: op, Namespace: ns, Cap: int(cap)}
}
