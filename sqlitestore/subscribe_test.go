package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// wait receives from ch or fails when the test's context ends first.
func wait(t *testing.T, ch <-chan struct{}, what string) (open bool) {
	t.Helper()
	select {
	case _, open = <-ch:
		return open
	case <-t.Context().Done():
		t.Fatalf("%s: no notification before the test's context ended", what)
		return false
	}
}

// TestSubscribe: an Enqueue of this store signals at once; a commit the
// store cannot see (EnqueueTx in an application transaction, another store
// on the file) is seen by polling; notifications coalesce to one; the
// channel closes when ctx ends or the store closes.
func TestSubscribe(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db := appDB(t, path)
	s, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatalf("notification before anything was enqueued")
	default:
	}

	// Many enqueues, one value held.
	for i := range 5 {
		enqueueT(t, s, msg("a"+itoa(int64(i))))
	}
	if len(ch) != 1 || cap(ch) != 1 {
		t.Errorf("after 5 enqueues the channel holds %d (cap %d), want 1 (cap 1)", len(ch), cap(ch))
	}
	wait(t, ch, "Enqueue")

	// A commit in the application's transaction: seen by polling.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("tx")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wait(t, ch, "EnqueueTx")

	// Another store on the file (another process, say).
	other := openT(t, path, Options{})
	enqueueT(t, other, msg("other"))
	wait(t, ch, "another store's Enqueue")

	// Requeue signals too.
	rows := claimAll(t, s)
	if _, err := s.Complete(ctx, []outbox.Completion{outbox.DeadLetterRow(rows[0], nil)}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Requeue(ctx, []string{rows[0].DispatchKey}); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	wait(t, ch, "Requeue")

	// ctx done: closed.
	sctx, cancel := context.WithCancel(ctx)
	ch2, err := s.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for wait(t, ch2, "cancel") {
	}
	// Store closed: closed, and Subscribe refused.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for wait(t, ch, "Close") {
	}
	if _, err := s.Subscribe(ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want outbox.ErrClosed", err)
	}
}
