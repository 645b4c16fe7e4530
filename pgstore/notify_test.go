package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// waitLimit bounds every wait for something that must happen; it is a
// guard against a hang, never a measured duration.
const waitLimit = 30 * time.Second

// listen opens a connection of its own listening on s's channel.
func listen(t *testing.T, s *pgstore.Store) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{pgstore.Channel(s)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// next returns the next notification on conn.
func next(t *testing.T, conn *pgx.Conn) *pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return n
}

// TestEnqueueNotifies checks what the enqueue statement sends: nothing for
// a rolled-back transaction or a batch of duplicates, one notification per
// statement that inserted rows, all at the commit, each carrying its
// transaction's id and rows per route. Notifications of
// one channel arrive in commit order, and each carries the sending
// session's pid, so a marker committed from another session afterwards
// tells what came before it.
func TestEnqueueNotifies(t *testing.T) {
	f := newFixture(t)
	conn := listen(t, f.s)
	ctx := f.ctx
	txA, err := adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pidOf := func(tx pgx.Tx) uint32 { return tx.Conn().PgConn().PID() }
	marker := func(key string) uint32 {
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pid := pidOf(tx)
		if _, err := f.s.EnqueueTx(ctx, tx, []outbox.Message{message("m", "q", key)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	// Rolled back: nothing.
	if _, err := f.s.EnqueueTx(ctx, txA, []outbox.Message{message("a", "q", "r1")}); err != nil {
		t.Fatal(err)
	}
	_ = txA.Rollback(ctx)
	if pid := marker("marker-1"); next(t, conn).PID != pid {
		t.Errorf("the first notification is not the marker's: a rolled-back enqueue notified")
	}
	// Three statements in one transaction: three notifications, at the
	// commit, of one transaction id, that add up to its six rows.
	txA, err = adminPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := pidOf(txA)
	for i := 0; i < 3; i++ {
		if _, err := f.s.EnqueueTx(ctx, txA, []outbox.Message{message("a", "q", fmt.Sprint("t", i)), message("b", "q", fmt.Sprint("u", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var xact string
	if err := txA.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xact); err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	for i := 0; i < 3; i++ {
		n := next(t, conn)
		if n.PID != a || n.Channel != pgstore.Channel(f.s) {
			t.Fatalf("notification %+v, want one from the committed transaction (pid %d)", n, a)
		}
		var p struct {
			X string  `json:"x"`
			R [][]any `json:"r"`
		}
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil || p.X != xact {
			t.Fatalf("payload %q: want transaction %s's rows (%v)", n.Payload, xact, err)
		}
		for _, r := range p.R {
			if len(r) != 5 || r[4] != nil {
				t.Fatalf("payload %q: want [namespace, queue, shard, n, null] per route and shard", n.Payload)
			}
			rows[r[0].(string)] += int(r[3].(float64))
		}
	}
	if want := map[string]int{"a": 3, "b": 3}; !maps.Equal(rows, want) {
		t.Errorf("the transaction's notifications add up to %v rows, want %v", rows, want)
	}
	// A batch of keys the outbox holds inserts nothing and says nothing.
	if n, err := f.s.Enqueue(ctx, []outbox.Message{message("a", "q", "t0")}); err != nil || n != 0 {
		t.Fatalf("Enqueue of a held key = %d, %v", n, err)
	}
	if pid := marker("marker-2"); next(t, conn).PID != pid {
		t.Errorf("a transaction of three enqueues notified more than once, or a duplicate batch notified")
	}
}

// recv waits for a value or the close of ch; it reports which.
func recv(t *testing.T, ch <-chan struct{}) (open bool) {
	t.Helper()
	select {
	case _, open = <-ch:
		return open
	case <-time.After(waitLimit):
		t.Fatalf("nothing on the subscription")
		return false
	}
}

// TestSubscribe: a wake-up after a commit, coalesced; a wake-up after the
// listening connection is lost and opened again; closed on ctx done and on
// Close; refused on a closed store.
func TestSubscribe(t *testing.T) {
	f := newFixture(t)
	app := "pgstore_sub_" + f.schema[len(f.schema)-8:]
	pool := newPool(t, nil, 2, "application_name", app)
	s, err := pgstore.New(f.ctx, pool, pgstore.Options{Schema: f.schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	ch, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Subscribe(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.Enqueue(f.ctx, []outbox.Message{message("a", "q", fmt.Sprint("k", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if !recv(t, ch) || !recv(t, other) {
		t.Fatal("a subscription closed early")
	}
	if len(ch) > 1 || cap(ch) != 1 {
		t.Errorf("subscription holds %d of %d: want at most one wake-up", len(ch), cap(ch))
	}
	// The listening connection dies: it is opened again, and says so.
	for len(ch) > 0 {
		<-ch
	}
	var killed int
	if err := adminPool.QueryRow(f.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d listening sessions, %v; want 1", killed, err)
	}
	if !recv(t, ch) {
		t.Fatal("subscription closed after its connection was lost")
	}
	if _, err := s.Enqueue(f.ctx, []outbox.Message{message("a", "q", "after")}); err != nil {
		t.Fatal(err)
	}
	if !recv(t, ch) {
		t.Fatal("subscription closed")
	}
	// ctx done closes one subscription, Close the rest.
	cancel()
	for recv(t, ch) {
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for recv(t, other) {
	}
	if _, err := s.Subscribe(f.ctx); err == nil {
		t.Error("Subscribe on a closed store succeeded")
	}
}
