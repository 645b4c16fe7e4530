package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestPendingCap: a batch that would leave a namespace over its cap fails
// with an *outbox.PendingCapError and writes nothing; duplicates do not
// count; an override lifts or changes a cap; a refused EnqueueTx leaves the
// caller's transaction usable; bad caps are refused by New.
func TestPendingCap(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	pool := newPool(t, nil, 4, "lock_timeout", "5s")
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema,
		PendingCaps: outbox.PendingCaps{Default: 3, PerNamespace: map[string]int{"free": 0, "big": 5}}})
	if err != nil {
		t.Fatal(err)
	}
	total := func() int {
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Total
	}
	for i, c := range []struct {
		msgs []outbox.Message
		ns   string
		rows int
	}{
		{[]outbox.Message{message("a", "q", "a1"), message("a", "q", "a2")}, "", 2},
		{[]outbox.Message{message("a", "q", "a3"), message("b", "q", "b1"), message("a", "q", "a4")}, "a", 2},
		{[]outbox.Message{message("a", "q", "a1"), message("a", "q", "a2"), message("a", "q", "a3")}, "", 3},
		{[]outbox.Message{message("a", "q", "a4")}, "a", 3},
		{[]outbox.Message{message("big", "q", "g1"), message("big", "q", "g2"), message("big", "q", "g3"), message("big", "q", "g4"), message("big", "q", "g5")}, "", 8},
		{[]outbox.Message{message("big", "q", "g6")}, "big", 8},
		{[]outbox.Message{message("free", "q", "f1"), message("free", "q", "f2"), message("free", "q", "f3"), message("free", "q", "f4")}, "", 12},
	} {
		_, err := s.Enqueue(ctx, c.msgs)
		var pe *outbox.PendingCapError
		switch {
		case c.ns == "" && err != nil:
			t.Fatalf("step %d: Enqueue: %v", i, err)
		case c.ns != "" && (!errors.As(err, &pe) || !errors.Is(err, outbox.ErrPendingCap) || pe.Namespace != c.ns):
			t.Fatalf("step %d: Enqueue = %v, want a PendingCapError for %q", i, err, c.ns)
		}
		if got := total(); got != c.rows {
			t.Fatalf("step %d: %d rows, want %d", i, got, c.rows)
		}
	}

	// EnqueueTx: refused, then the same transaction goes on and commits.
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := adminPool.Exec(ctx, "CREATE TABLE "+q+".orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".orders VALUES ('o1')"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{message("c", "q", "c1"), message("c", "q", "c2"), message("c", "q", "c3"), message("c", "q", "c4")}); !errors.Is(err, outbox.ErrPendingCap) {
		t.Fatalf("EnqueueTx over the cap = %v", err)
	}
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{message("c", "q", "c5")}); err != nil {
		t.Fatalf("EnqueueTx after a refusal: %v", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+q+".orders VALUES ('o2')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"c1": false, "c4": false, "c5": true} {
		_, err := s.Get(ctx, key)
		if got := err == nil; got != want {
			t.Errorf("row %s exists = %v, want %v (%v)", key, got, want, err)
		}
	}

	for _, c := range []outbox.PendingCaps{{Default: -1}, {PerNamespace: map[string]int{"x": outbox.MaxPendingCap + 1}}, {PerNamespace: map[string]int{"": 1}}} {
		if _, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, PendingCaps: c}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("New with %+v: %v, want an ArgumentError", c, err)
		}
	}
}

// TestPendingCapConcurrent: producers in concurrent transactions (each a
// business write and an EnqueueTx of one row of "a" and one of "b", in
// either order, then a commit), far more than the caps: exactly the caps'
// rows are written, every other batch is refused, and no two producers
// deadlock on the namespaces' locks.
func TestPendingCapConcurrent(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	const capRows, producers, each = 13, 6, 5
	pool := newPool(t, nil, producers+2, "lock_timeout", "20s")
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, Now: func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) },
		PendingCaps: outbox.PendingCaps{Default: capRows}})
	if err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := adminPool.Exec(ctx, "CREATE TABLE "+q+".orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		written, capped int
	)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("p%d-%d", p, i)
				batch := []outbox.Message{message("a", "q", "a-"+key), message("b", "q", "b-"+key)}
				if (p+i)%2 == 1 {
					batch[0], batch[1] = batch[1], batch[0]
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "INSERT INTO "+q+".orders VALUES ($1)", key); err != nil {
						return err
					}
					_, err := s.EnqueueTx(ctx, tx, batch)
					if errors.Is(err, outbox.ErrPendingCap) {
						mu.Lock()
						capped++
						mu.Unlock()
						return nil // the transaction goes on, without the batch
					}
					if err == nil {
						mu.Lock()
						written++
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var orders int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".orders").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if st.Total != 2*capRows || written != capRows || capped != producers*each-capRows || orders != producers*each {
		t.Fatalf("%d rows (%d batches written, %d capped, %d orders), want exactly %d rows", st.Total, written, capped, orders, 2*capRows)
	}
}

// TestPendingCapThroughMembership: a Membership's store keeps its parent's
// pending caps (and clock and options): an Enqueue through it past a cap
// fails with a *PendingCapError and writes nothing, as the parent's does.
func TestPendingCapThroughMembership(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s, err := pgstore.New(ctx, newPool(t, nil, 4), pgstore.Options{Schema: schema, Lease: 30 * time.Second,
		PendingCaps: outbox.PendingCaps{Default: 2}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a", Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("Join: %v", err)
	}
	defer func() { _ = m.Leave(context.Background()) }()
	view := m.Store()
	if _, err := view.Enqueue(ctx, []outbox.Message{message("a", "q", "a1"), message("a", "q", "a2")}); err != nil {
		t.Fatalf("Enqueue within the cap: %v", err)
	}
	_, err = view.Enqueue(ctx, []outbox.Message{message("a", "q", "a3")})
	var pe *outbox.PendingCapError
	if !errors.As(err, &pe) || !errors.Is(err, outbox.ErrPendingCap) || pe.Namespace != "a" {
		t.Fatalf("Enqueue past the cap through the membership's store = %v, want a PendingCapError for a", err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Total != 2 {
		t.Fatalf("Stats = %+v, %v; want the 2 rows within the cap", st, err)
	}
}
