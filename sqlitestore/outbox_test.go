package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// clocked opens a store on a manual clock.
func clocked(t *testing.T, path string, opts Options) (*Store, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	opts.Now = clock.Now
	return openT(t, path, opts), clock
}

func enqueueT(t *testing.T, s *Store, msgs ...outbox.Message) {
	t.Helper()
	if _, err := s.Enqueue(t.Context(), msgs); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
}

func claimAll(t *testing.T, s *Store) []outbox.Row {
	t.Helper()
	rows, err := claimerOf(s).ClaimOutboxRowsUnscoped(t.Context(), allShards(t, s), 1000)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

func getT(t *testing.T, s *Store, key string) outbox.Row {
	t.Helper()
	r, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

func msg(key string) outbox.Message {
	return outbox.Message{DispatchKey: key, Namespace: "n", TaskQueue: "q", Payload: []byte(key)}
}

// everyMethod calls every method of outbox.Store and outbox.Notifier (and
// the store's own extras) on s, returning each error by name.
func everyMethod(ctx context.Context, s *Store) map[string]error {
	f, _ := backpressure.AllShards(64)
	lease := outbox.Lease{DispatchKey: "k", Token: 1}
	errs := map[string]error{}
	errs["Enqueue"] = second(s.Enqueue(ctx, []outbox.Message{msg("k")}))
	errs["EnqueueTx"] = second(s.EnqueueTx(ctx, nil, []outbox.Message{msg("k")}))
	// A closed store says so before judging the batch, as pgstore does.
	errs["Enqueue (invalid batch)"] = second(s.Enqueue(ctx, []outbox.Message{msg("")}))
	errs["EnqueueTx (invalid batch)"] = second(s.EnqueueTx(ctx, nil, []outbox.Message{msg("")}))
	errs["CountClaimedOutboxRows"] = second(claimerOf(s).CountClaimedOutboxRows(ctx, f))
	errs["CountPendingOutboxRows"] = second(claimerOf(s).CountPendingOutboxRows(ctx, f, 1))
	_, _, errs["CountOutboxRows"] = claimerOf(s).CountOutboxRows(ctx, f, backpressure.CountParams{CapPerRoute: 1, Namespaces: 1})
	errs["ClaimOutboxRowsScoped"] = second(claimerOf(s).ClaimOutboxRowsScoped(ctx, f, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "n"}, Limit: 1}}))
	errs["ClaimOutboxRowsUnscoped"] = second(claimerOf(s).ClaimOutboxRowsUnscoped(ctx, f, 1))
	errs["InSweepTx"] = claimerOf(s).InSweepTx(ctx, func(backpressure.OutboxStore[outbox.Row]) error { return nil })
	errs["Complete"] = second(s.Complete(ctx, []outbox.Completion{{Lease: lease, Outcome: outbox.Settle}}))
	errs["ExtendLeases"] = second(s.ExtendLeases(ctx, []outbox.Lease{lease}))
	errs["Settle"] = s.Settle(ctx, lease)
	errs["Retry"] = s.Retry(ctx, lease, 0, nil)
	errs["Get"] = second(s.Get(ctx, "k"))
	errs["Stats"] = second(s.Stats(ctx))
	errs["ListDead"] = second(s.ListDead(ctx, outbox.ListDeadParams{}))
	errs["Requeue"] = second(s.Requeue(ctx, []string{"k"}))
	errs["PurgeSettled"] = second(s.PurgeSettled(ctx, time.Now(), 10))
	errs["PurgeDead"] = second(s.PurgeDead(ctx, time.Now(), 10))
	errs["Subscribe"] = second(s.Subscribe(ctx))
	errs["Close"] = s.Close()
	return errs
}

// TestClosedNilAndZeroStores: a nil *Store, a zero Store and a closed one
// return outbox.ErrClosed from every method, and never panic.
func TestClosedNilAndZeroStores(t *testing.T) {
	closedFile := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
	closedMem := openT(t, ":memory:", Options{})
	for _, s := range []*Store{closedFile, closedMem} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range map[string]*Store{"nil": nil, "zero": {}, "closed file": closedFile, "closed memory": closedMem} {
		for method, err := range everyMethod(t.Context(), s) {
			if method == "Close" && strings.HasPrefix(name, "closed") {
				if err != nil {
					t.Errorf("%s store: Close again = %v, want nil", name, err)
				}
				continue
			}
			if !errors.Is(err, outbox.ErrClosed) {
				t.Errorf("%s store: %s = %v, want outbox.ErrClosed", name, method, err)
			}
		}
		if s.ShardCount() != 0 && name != "closed file" && name != "closed memory" {
			t.Errorf("%s store: ShardCount = %d, want 0", name, s.ShardCount())
		}
	}
	var nilStore *Store
	if _, _, err := backpressure.Sweep(t.Context(), mustBP(t, 64), nilStore.Claimer()); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Sweep(nil store) = %v, want outbox.ErrClosed", err)
	}
}

func mustBP(t *testing.T, shards int) *backpressure.Backpressure {
	t.Helper()
	f, err := backpressure.AllShards(shards)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited}, f)
	if err != nil {
		t.Fatal(err)
	}
	return bp
}

// TestOptionsRejected: options that cannot work are refused with an
// *outbox.ArgumentError naming the option.
func TestOptionsRejected(t *testing.T) {
	for _, c := range []struct {
		opts Options
		arg  string
	}{
		{Options{Lease: time.Nanosecond}, "Options.Lease"},
		{Options{Lease: outbox.MinLease - time.Millisecond}, "Options.Lease"},
		{Options{Lease: -time.Second}, "Options.Lease"},
		{Options{BusyTimeout: 500 * time.Microsecond}, "Options.BusyTimeout"},
		{Options{BusyTimeout: -1}, "Options.BusyTimeout"},
		{Options{MaxAttempts: -1}, "Options.MaxAttempts"},
		{Options{MaxAttempts: outbox.MaxAttemptsLimit + 1}, "Options.MaxAttempts"},
		{Options{Lease: outbox.MaxLease + time.Nanosecond}, "Options.Lease"},
		{Options{Readers: MaxReaders + 1}, "Options.Readers"},
		{Options{PollInterval: time.Microsecond}, "Options.PollInterval"},
		{Options{ShardCount: -1}, "Options.ShardCount"},
		{Options{ShardCount: backpressure.MaxShardCount + 1}, "Options.ShardCount"},
		{Options{Readers: -1}, "Options.Readers"},
		{Options{ReadOnly: true}, "Options.ReadOnly"}, // on ":memory:"
	} {
		_, err := Open(t.Context(), ":memory:", c.opts)
		var arg *outbox.ArgumentError
		if !errors.As(err, &arg) || arg.Arg != c.arg || !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Open(%+v) = %v, want an *outbox.ArgumentError on %s", c.opts, err, c.arg)
		}
	}
	s := openT(t, ":memory:", Options{Lease: outbox.MinLease, BusyTimeout: time.Millisecond})
	if s.Lease() != outbox.MinLease {
		t.Errorf("Lease() = %v, want the floor %v itself accepted", s.Lease(), outbox.MinLease)
	}
}

// TestEnqueueOverLimitWritesNothing: a payload over outbox.MaxPayloadBytes
// (which SQLite would refuse with a raw error code 18 past its own limit)
// and every other invalid message fail the batch with an
// *outbox.MessageError before the database is touched.
func TestEnqueueOverLimitWritesNothing(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
	before := s.roundTrips()
	for name, m := range map[string]outbox.Message{
		"payload":      {DispatchKey: "big", Namespace: "n", Payload: make([]byte, outbox.MaxPayloadBytes+1)},
		"key":          {DispatchKey: strings.Repeat("k", outbox.MaxDispatchKeyBytes+1), Namespace: "n"},
		"namespace":    {DispatchKey: "k", Namespace: strings.Repeat("n", outbox.MaxNamespaceBytes+1)},
		"task queue":   {DispatchKey: "k", Namespace: "n", TaskQueue: "a\x00"},
		"max attempts": {DispatchKey: "k", Namespace: "n", MaxAttempts: -1},
	} {
		n, err := s.Enqueue(t.Context(), []outbox.Message{msg("ok"), m})
		var me *outbox.MessageError
		if n != 0 || !errors.As(err, &me) || me.Index != 1 || !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("%s: Enqueue = %d, %v; want 0 and an *outbox.MessageError on msgs[1]", name, n, err)
		}
	}
	if got := s.roundTrips(); got != before {
		t.Errorf("invalid batches made %d round trips, want none", got-before)
	}
	if st, err := s.Stats(t.Context()); err != nil || st.Total != 0 {
		t.Errorf("Stats = %+v, %v; want nothing written", st, err)
	}
}

// holdWriteLock opens a second connection on path and holds SQLite's write
// lock (BEGIN IMMEDIATE) until the test ends or release is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(1)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			_ = conn.Close()
			_ = db.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// TestOpenWhileAnotherHoldsTheWriteLock: Open reads the schema version
// first and migrates only when needed, so opening a current database
// succeeds while another connection holds the write lock; creating one
// cannot, and fails (after the busy timeout) instead of hanging.
func TestOpenWhileAnotherHoldsTheWriteLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := openT(t, path, Options{})
	enqueueT(t, s, msg("a"))
	_ = s.Close()

	release := holdWriteLock(t, path)
	s2, err := Open(t.Context(), path, Options{BusyTimeout: time.Millisecond})
	if err != nil {
		t.Fatalf("Open(current database, write lock held elsewhere) = %v, want success", err)
	}
	defer s2.Close()
	if r, err := s2.Get(t.Context(), "a"); err != nil || r.State != outbox.StatePending {
		t.Errorf("Get while locked = %+v, %v; want the pending row", r, err)
	}
	if _, err := s2.Enqueue(t.Context(), []outbox.Message{msg("b")}); err == nil {
		t.Errorf("Enqueue while another connection holds the write lock succeeded; want SQLITE_BUSY after 1ms")
	}
	release()
	if _, err := s2.Enqueue(t.Context(), []outbox.Message{msg("b")}); err != nil {
		t.Errorf("Enqueue after the lock was released: %v", err)
	}

	// A database that needs creating needs the lock: Open waits the busy
	// timeout and fails, changing nothing.
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	db, err := sql.Open("sqlite", "file:"+fresh+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE app (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	holdWriteLock(t, fresh)
	if s3, err := Open(t.Context(), fresh, Options{BusyTimeout: time.Millisecond}); err == nil {
		_ = s3.Close()
		t.Errorf("Open(new outbox, write lock held elsewhere) succeeded; want a busy error")
	}
}

// TestReadOnly: a read-only store counts, gets, lists and reports stats,
// and every write fails with ErrReadOnly, changing nothing.
func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	clock := storetest.NewClock()
	w := openT(t, path, Options{Now: clock.Now, MaxAttempts: 1})
	enqueueT(t, w, msg("a"), msg("b"))
	rows := claimAll(t, w)
	if _, err := w.Complete(t.Context(), []outbox.Completion{outbox.DeadLetterRow(rows[0], errors.New("boom"))}); err != nil {
		t.Fatal(err)
	}
	r := openT(t, path, Options{ReadOnly: true, Now: clock.Now})
	f := allShards(t, r)
	if c, err := claimerOf(r).CountClaimedOutboxRows(t.Context(), f); err != nil || c["n"] != 1 {
		t.Errorf("read-only CountClaimedOutboxRows = %v, %v; want n: 1", c, err)
	}
	if _, err := claimerOf(r).CountPendingOutboxRows(t.Context(), f, 10); err != nil {
		t.Errorf("read-only CountPendingOutboxRows: %v", err)
	}
	if st, err := r.Stats(t.Context()); err != nil || st != (outbox.Stats{Claimed: 1, Dead: 1, Total: 2}) {
		t.Errorf("read-only Stats = %+v, %v", st, err)
	}
	if dead, err := r.ListDead(t.Context(), outbox.ListDeadParams{}); err != nil || len(dead) != 1 || dead[0].LastError != "boom" {
		t.Errorf("read-only ListDead = %+v, %v; want the dead row", dead, err)
	}
	if got, err := r.Get(t.Context(), "b"); err != nil || got.State != outbox.StateClaimed {
		t.Errorf("read-only Get = %+v, %v", got, err)
	}
	errs := everyMethod(t.Context(), r)
	for _, m := range []string{"Enqueue", "EnqueueTx", "ClaimOutboxRowsScoped", "ClaimOutboxRowsUnscoped", "InSweepTx", "Complete",
		"ExtendLeases", "Settle", "Retry", "Requeue", "PurgeSettled", "PurgeDead"} {
		if !errors.Is(errs[m], ErrReadOnly) {
			t.Errorf("read-only %s = %v, want ErrReadOnly", m, errs[m])
		}
	}
	if st, err := w.Stats(t.Context()); err != nil || st != (outbox.Stats{Claimed: 1, Dead: 1, Total: 2}) {
		t.Errorf("Stats after read-only writes = %+v, %v; want nothing changed", st, err)
	}
	if _, err := Open(t.Context(), filepath.Join(t.TempDir(), "missing.db"), Options{ReadOnly: true}); err == nil {
		t.Errorf("read-only Open of a missing file succeeded")
	}
}
