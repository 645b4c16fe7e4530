package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

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

// subscriptionGoroutines counts the goroutines running, or created by, the
// subscription machinery: Subscribe's watchers and the poller.
func subscriptionGoroutines() (pollers, all int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sqlitestore.(*subscribers).poll(") {
			pollers++
		}
		if strings.Contains(g, "sqlitestore.(*subscribers)") || strings.Contains(g, "sqlitestore.(*Store).Subscribe") {
			all++
		}
	}
	return pollers, all
}

// TestSubscribePollerLeavesNothing: every time the last subscriber leaves,
// the poller stops, and whatever it started stops with it, so subscribing
// and leaving again and again does not pile up goroutines while the store
// stays open.
func TestSubscribePollerLeavesNothing(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{PollInterval: time.Millisecond})
	for range 10 {
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := s.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for wait(t, ch, "cancel") {
		}
		// The poller notices at its next tick that no one is left.
		for {
			s.subs.mu.Lock()
			polling := s.subs.polling
			s.subs.mu.Unlock()
			if !polling {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The last poller has stopped polling; let it return.
	for {
		if pollers, _ := subscriptionGoroutines(); pollers == 0 {
			break
		}
		runtime.Gosched()
	}
	if _, all := subscriptionGoroutines(); all != 0 {
		t.Errorf("after 10 subscriptions ended, %d goroutines of the subscription machinery remain, want 0", all)
	}
}

// TestSubscribeNewcomerSignalsOthers: a commit only the poller could see
// (another writer of the file) that a new subscriber finds before the
// poller does is signalled to the subscribers already there, rather than
// swallowed by the newcomer raising what counts as signalled. The poller is
// taken as running, so its timing plays no part.
func TestSubscribeNewcomerSignalsOthers(t *testing.T) {
	b := &subscribers{polling: true}
	first, second := make(chan struct{}, 1), make(chan struct{}, 1)
	if _, ok := b.add(nil, first, 5); !ok {
		t.Fatal("add refused on an open store")
	}
	if len(first) != 0 {
		t.Fatal("the first subscriber was signalled for nothing")
	}
	// Commits 6 and 7 happened since; the second subscriber finds 7.
	if _, ok := b.add(nil, second, 7); !ok {
		t.Fatal("add refused on an open store")
	}
	if len(first) != 1 {
		t.Errorf("the first subscriber holds %d after a newcomer found commits 6..7 it was not told of, want 1", len(first))
	}
	if len(second) != 0 {
		t.Errorf("the newcomer holds %d for commits before it subscribed, want 0", len(second))
	}
	select {
	case <-first:
	default:
	}
	// A third finding nothing new signals no one.
	third := make(chan struct{}, 1)
	b.add(nil, third, 7)
	if len(first)+len(second)+len(third) != 0 {
		t.Errorf("a newcomer that found nothing new signalled: %d %d %d, want 0 0 0", len(first), len(second), len(third))
	}
	b.closeAll()
}
