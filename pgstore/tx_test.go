package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestEnqueueTx: rows enqueued in the caller's transaction exist exactly
// when it commits; until then no count or claim sees them or waits for
// them (the store's sessions give up on any lock wait after 2s, so a wait
// fails the test rather than hanging it); dedup works inside the
// transaction; a finished transaction is refused, typed.
func TestEnqueueTx(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := newPool(t, nil, 4, "lock_timeout", "2s")
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 10}, all)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{message("a", "q", "committed")}); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := adminPool.Exec(ctx, "CREATE TABLE "+q+".orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	// Rolled back: the business row and the outbox rows are gone together.
	tx, err := adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".orders VALUES ('o1')"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.EnqueueTx(ctx, tx, []outbox.Message{message("a", "q", "rolled-back")}); err != nil || n != 1 {
		t.Fatalf("EnqueueTx = %d, %v", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "rolled-back"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get after rollback = %v, want ErrNotFound", err)
	}

	// Uncommitted: invisible to every statement of a sweep, which does not
	// wait, even for the uncommitted row's dispatch key.
	tx, err = adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".orders VALUES ('o2')"); err != nil {
		t.Fatal(err)
	}
	msgs := []outbox.Message{message("a", "q", "in-tx"), message("b", "q", "in-tx-2"), message("a", "q", "committed")}
	if n, err := s.EnqueueTx(ctx, tx, msgs); err != nil || n != 2 {
		t.Fatalf("EnqueueTx with one committed key = %d, %v; want 2", n, err)
	}
	if n, err := s.EnqueueTx(ctx, tx, msgs[:2]); err != nil || n != 0 {
		t.Errorf("EnqueueTx again in the same transaction = %d, %v; want 0 (dedup)", n, err)
	}
	if c, err := claimerOf(s).CountPendingOutboxRows(ctx, all, 10); err != nil || len(c) != 1 || c[0].Count != 1 {
		t.Errorf("pending counts with an open transaction = %v, %v; want the committed row only", c, err)
	}
	for _, w := range []backpressure.CountParams{{CapPerRoute: 10}, {CapPerRoute: 1, Namespaces: 5}} {
		if _, p, err := claimerOf(s).CountOutboxRows(ctx, all, withClaimed(w)); err != nil || len(p) != 1 {
			t.Errorf("CountOutboxRows(%+v) with an open transaction = %v, %v; want the committed route only", w, p, err)
		}
	}
	if rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{claim("b", "q", 10)}); err != nil || len(rows) != 0 {
		t.Errorf("scoped claim of the uncommitted route = %v, %v; want nothing, at once", rows, err)
	}
	rows, _, err := backpressure.Sweep(ctx, bp, s.Claimer())
	if err != nil || len(rows) != 1 || rows[0].DispatchKey != "committed" {
		t.Fatalf("Sweep with an open transaction = %v, %v; want the committed row only", rows, err)
	}
	if rows, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, all, 10); err != nil || len(rows) != 0 {
		t.Errorf("unscoped claim with an open transaction = %v, %v; want nothing", rows, err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Total != 1 {
		t.Errorf("Stats with an open transaction = %+v, %v; want 1 row", st, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Committed: claimable, with the business row.
	rows, _, err = backpressure.Sweep(ctx, bp, s.Claimer())
	if err != nil || len(rows) != 2 {
		t.Errorf("Sweep after commit = %v, %v; want in-tx and in-tx-2", rows, err)
	}
	var orders int
	if err := adminPool.QueryRow(ctx, "SELECT count(*) FROM "+q+".orders").Scan(&orders); err != nil || orders != 1 {
		t.Errorf("orders = %d, %v; want o2 only", orders, err)
	}

	// A finished or missing transaction is an argument error.
	var ae *outbox.ArgumentError
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{message("a", "q", "late")}); !errors.As(err, &ae) || ae.Arg != "tx" {
		t.Errorf("EnqueueTx on a committed transaction = %v, want an *outbox.ArgumentError for tx", err)
	}
	if _, err := s.EnqueueTx(ctx, nil, []outbox.Message{message("a", "q", "late")}); !errors.As(err, &ae) || ae.Arg != "tx" {
		t.Errorf("EnqueueTx(nil) = %v, want an *outbox.ArgumentError for tx", err)
	}
	// An invalid message leaves the caller's transaction usable.
	tx, err = adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{message("a", "q", "")}); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Errorf("EnqueueTx of an invalid message = %v, want ErrInvalidMessage", err)
	}
	if n, err := s.EnqueueTx(ctx, tx, []outbox.Message{message("a", "q", "after")}); err != nil || n != 1 {
		t.Errorf("EnqueueTx after a refused batch = %d, %v; want 1", n, err)
	}
}
