package sqlitestore

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

func nsMsg(ns, key string) outbox.Message {
	return outbox.Message{DispatchKey: key, Namespace: ns, TaskQueue: "q"}
}

// TestPendingCap: a batch that would leave a namespace over its cap fails
// with an *outbox.PendingCapError and writes nothing (not even its rows of
// other namespaces); rows the batch does not insert (duplicates) do not
// count; a settled row frees its place; an override lifts or changes the
// cap; bad caps are refused at Open.
func TestPendingCap(t *testing.T) {
	ctx := t.Context()
	s := openT(t, ":memory:", Options{PendingCaps: outbox.PendingCaps{Default: 3, PerNamespace: map[string]int{"free": 0, "big": 5}}})
	total := func() int {
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Total
	}
	for i, c := range []struct {
		msgs []outbox.Message
		ns   string // "" when the batch must pass
		rows int    // rows in the store after it
	}{
		{[]outbox.Message{nsMsg("a", "a1"), nsMsg("a", "a2")}, "", 2},
		{[]outbox.Message{nsMsg("a", "a3"), nsMsg("b", "b1"), nsMsg("a", "a4")}, "a", 2}, // a would hold 4
		{[]outbox.Message{nsMsg("a", "a1"), nsMsg("a", "a2"), nsMsg("a", "a3")}, "", 3},  // two duplicates: a holds 3
		{[]outbox.Message{nsMsg("a", "a1")}, "", 3},                                      // a duplicate adds nothing
		{[]outbox.Message{nsMsg("a", "a4")}, "a", 3},
		{[]outbox.Message{nsMsg("big", "g1"), nsMsg("big", "g2"), nsMsg("big", "g3"), nsMsg("big", "g4"), nsMsg("big", "g5")}, "", 8},
		{[]outbox.Message{nsMsg("big", "g6")}, "big", 8},
		{[]outbox.Message{nsMsg("free", "f1"), nsMsg("free", "f2"), nsMsg("free", "f3"), nsMsg("free", "f4")}, "", 12},
	} {
		_, err := s.Enqueue(ctx, c.msgs)
		var pe *outbox.PendingCapError
		switch {
		case c.ns == "" && err != nil:
			t.Fatalf("step %d: Enqueue: %v", i, err)
		case c.ns != "" && (!errors.Is(err, outbox.ErrPendingCap) || !errors.As(err, &pe) || pe.Namespace != c.ns || pe.Cap != s.caps.Cap(c.ns) || pe.Op != "Enqueue"):
			t.Fatalf("step %d: Enqueue = %v, want a PendingCapError for %q", i, err, c.ns)
		}
		if got := total(); got != c.rows {
			t.Fatalf("step %d: %d rows, want %d", i, got, c.rows)
		}
	}
	// Settling a claimed row frees a place.
	rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, allShards(t, s), []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "a", TaskQueue: "q"}, Limit: 1}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v, %d rows", err, len(rows))
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{nsMsg("a", "a5")}); !errors.Is(err, outbox.ErrPendingCap) {
		t.Fatalf("a claimed row still counts: %v", err)
	}
	if err := s.Settle(ctx, rows[0].Lease()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{nsMsg("a", "a5")}); err != nil {
		t.Fatalf("after a settle: %v", err)
	}

	for _, c := range []outbox.PendingCaps{{Default: -1}, {Default: outbox.MaxPendingCap + 1}, {PerNamespace: map[string]int{"x": -1}}, {PerNamespace: map[string]int{"": 2}}} {
		if _, err := Open(ctx, ":memory:", Options{PendingCaps: c}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Open with %+v: %v, want an ArgumentError", c, err)
		}
	}
}

// TestPendingCapEnqueueTx: a refused EnqueueTx leaves the caller's
// transaction usable, without any of the batch: the business write before
// and after it commits.
func TestPendingCapEnqueueTx(t *testing.T) {
	ctx := t.Context()
	db := appDB(t, filepath.Join(t.TempDir(), "app.db"))
	s, err := New(ctx, db, Options{PendingCaps: outbox.PendingCaps{Default: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o1')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{nsMsg("a", "k1"), nsMsg("a", "k2"), nsMsg("a", "k3")}); !errors.Is(err, outbox.ErrPendingCap) {
		t.Fatalf("EnqueueTx over the cap = %v", err)
	}
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{nsMsg("a", "k4")}); err != nil {
		t.Fatalf("EnqueueTx after a refusal: %v", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o2')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil || orders != 2 {
		t.Fatalf("orders = %d, %v", orders, err)
	}
	for key, want := range map[string]bool{"k1": false, "k2": false, "k3": false, "k4": true} {
		_, err := s.Get(ctx, key)
		if got := err == nil; got != want {
			t.Errorf("row %s exists = %v, want %v (%v)", key, got, want, err)
		}
	}
}

// TestPendingCapConcurrent: producers in concurrent transactions, one
// message each, far more than the cap: exactly cap rows are written (SQLite
// runs one write transaction at a time, so the bound is exact), and every
// other producer gets ErrPendingCap.
func TestPendingCapConcurrent(t *testing.T) {
	ctx := t.Context()
	db := appDB(t, filepath.Join(t.TempDir(), "app.db"))
	const capRows, producers, each = 17, 8, 6
	s, err := New(ctx, db, Options{PendingCaps: outbox.PendingCaps{Default: capRows}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				_, err = s.EnqueueTx(ctx, tx, []outbox.Message{nsMsg("a", fmt.Sprintf("p%d-%d", p, i))})
				mu.Lock()
				switch {
				case err == nil:
					written++
				case errors.Is(err, outbox.ErrPendingCap):
					capped++
				default:
					t.Error(err)
				}
				mu.Unlock()
				if err := tx.Commit(); err != nil {
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
	if st.Total != capRows || written != capRows || capped != producers*each-capRows {
		t.Fatalf("%d rows (%d written, %d capped), want exactly the cap %d", st.Total, written, capped, capRows)
	}
}
