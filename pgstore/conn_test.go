package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// terminate ends every session of application app, waiting until each is
// gone, and returns how many there were.
func terminate(t *testing.T, app string) int {
	t.Helper()
	var n int
	if err := adminPool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fill makes pool hold n idle connections.
func fill(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
}

// TestLostConnections terminates every session of the store's pool
// (pg_terminate_backend, as a restart or a failover does) before each
// sweep while a backlog drains through Sweep and Complete: no sweep fails
// (the first call to meet a dead connection drops every dead idle one and
// runs its read or claim once more), every row is claimed once and settled
// once, and nothing is left behind.
func TestLostConnections(t *testing.T) {
	ctx := t.Context()
	const conns, rows = 4, 300
	schema := testSchema(t)
	app := "lost_" + schema[len(schema)-8:]
	pool := newPool(t, nil, conns, "application_name", app)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := 0; i < rows; i++ {
		msgs = append(msgs, message(fmt.Sprintf("ns%d", i%10), "q", fmt.Sprintf("k%03d", i)))
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	bp, err := backpressure.New(backpressure.Config{BatchSize: 25, DefaultQuota: backpressure.Unlimited}, all)
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]int{}
	settled := 0
	for round := 0; settled < rows; round++ {
		if round > 2*rows/25 {
			t.Fatalf("round %d: %d of %d rows settled; the drain does not progress", round, settled, rows)
		}
		fill(t, pool, conns)
		if n := terminate(t, app); n != conns {
			t.Fatalf("round %d: terminated %d sessions, want the pool's %d", round, n, conns)
		}
		claimed, _, err := backpressure.Sweep(ctx, bp, s.Claimer())
		if err != nil {
			t.Fatalf("round %d: Sweep after the pool's connections were terminated: %v", round, err)
		}
		completions := make([]outbox.Completion, len(claimed))
		for i, r := range claimed {
			claims[r.DispatchKey]++
			completions[i] = outbox.SettleRow(r)
		}
		results, err := s.Complete(ctx, completions)
		if err != nil {
			t.Fatalf("round %d: Complete: %v", round, err)
		}
		for i, res := range results {
			if res.Err != nil {
				t.Errorf("round %d: settle %s: %v", round, claimed[i].DispatchKey, res.Err)
			} else {
				settled++
			}
		}
	}
	for k, n := range claims {
		if n != 1 {
			t.Errorf("row %s claimed %d times", k, n)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Settled != rows || st.Total != rows {
		t.Errorf("Stats after the drain = %+v, %v; want %d settled", st, err, rows)
	}
}

// TestLostConnectionWrite: a write that meets a dead connection after its
// statement was sent returns the error rather than guess (the server may
// have committed it); the dead connections are gone after it, so the next
// call works. Nothing is applied twice.
func TestLostConnectionWrite(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	app := "lostw_" + schema[len(schema)-8:]
	pool := newPool(t, nil, 3, "application_name", app)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, pool, 3)
	terminate(t, app)
	msgs := []outbox.Message{message("a", "q", "k1"), message("a", "q", "k2")}
	n, err := s.Enqueue(ctx, msgs)
	if err != nil {
		// Refused as sent: the next call runs on a live connection and,
		// by dedup, inserts what the first did not.
		again, err := s.Enqueue(ctx, msgs)
		if err != nil {
			t.Fatalf("second Enqueue after lost connections: %v", err)
		}
		n += again
	}
	if st, err := s.Stats(context.Background()); err != nil || st.Total != 2 || n != 2 {
		t.Errorf("after Enqueue across lost connections: inserted %d, Stats %+v, %v; want 2 rows", n, st, err)
	}
}
