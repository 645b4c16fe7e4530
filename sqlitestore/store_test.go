package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

func openT(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open(%q, %+v): %v", path, opts, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func allShards(t *testing.T, s *Store) backpressure.OwnedShardFraction {
	t.Helper()
	f, err := backpressure.AllShards(s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDefaults(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	if s.ShardCount() != 64 || s.Lease() != 30*time.Second {
		t.Errorf("defaults: ShardCount %d Lease %v, want 64 30s", s.ShardCount(), s.Lease())
	}
}

// TestConnectionSettings: a file store's writer runs in WAL mode with
// temporary storage in memory, so a claim's statement journal never spills
// to a file; its readers in WAL mode too, read only.
func TestConnectionSettings(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
	for _, c := range []struct {
		name string
		db   interface {
			QueryRowContext(context.Context, string, ...any) *sql.Row
		}
		pragma string
		want   string
	}{
		{"writer", s.writer, "journal_mode", "wal"},
		{"writer", s.writer, "temp_store", "2"},
		{"reader", s.reader, "journal_mode", "wal"},
		{"reader", s.reader, "temp_store", "2"},
		{"reader", s.reader, "query_only", "1"},
	} {
		var got string
		if err := c.db.QueryRowContext(t.Context(), "PRAGMA "+c.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: PRAGMA %s = %s, want %s", c.name, c.pragma, got, c.want)
		}
	}
}

func TestMigrateIsIdempotentAndVersioned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	ctx := t.Context()
	for i := 0; i < 3; i++ {
		s, err := Open(ctx, path, Options{ShardCount: 16})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		var version int
		if err := s.reader.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'schema_version'`).Scan(&version); err != nil {
			t.Fatal(err)
		}
		if version != schemaVersion {
			t.Errorf("open %d: schema_version %d, want %d", i, version, schemaVersion)
		}
		if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k" + string(rune('a'+i)), Namespace: "a", TaskQueue: "q"}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// A database from a newer version of the package is refused.
	s := openT(t, path, Options{})
	if _, err := s.writer.ExecContext(ctx, `UPDATE outbox_meta SET value = ? WHERE key = 'schema_version'`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_, err := Open(ctx, path, Options{})
	var sv *outbox.SchemaVersionError
	if !errors.Is(err, outbox.ErrSchemaTooNew) || !errors.As(err, &sv) || sv.Database != schemaVersion+1 || sv.Package != schemaVersion {
		t.Errorf("Open(newer schema) = %v, want a *outbox.SchemaVersionError{%d, %d}", err, schemaVersion+1, schemaVersion)
	}
}

func TestReopenKeepsRowsAndTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	ctx := t.Context()
	s := openT(t, path, Options{ShardCount: 8})
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "a", Namespace: "n", TaskQueue: "q", Payload: []byte("x")}, {DispatchKey: "b", Namespace: "n", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	f, _ := backpressure.AllShards(8)
	rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, f, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "n", TaskQueue: "q"}, Limit: 1}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim = %v, %v", rows, err)
	}
	_ = s.Close()

	s = openT(t, path, Options{}) // adopts the recorded shard count
	if s.ShardCount() != 8 {
		t.Errorf("reopened ShardCount %d, want the recorded 8", s.ShardCount())
	}
	got, err := s.Get(ctx, rows[0].DispatchKey)
	if err != nil || got.State != outbox.StateClaimed || got.Token != rows[0].Token || got.Attempts != 1 {
		t.Errorf("reopened Get = %+v %v, want the claimed row with token %d", got, err, rows[0].Token)
	}
	if err := s.Settle(ctx, rows[0].Lease()); err != nil {
		t.Errorf("Settle after reopen: %v", err)
	}
	more, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, f, 10)
	if err != nil || len(more) != 1 || more[0].Token <= rows[0].Token {
		t.Errorf("claim after reopen = %+v, %v; want the other row with a larger token than %d", more, err, rows[0].Token)
	}
	if _, err := Open(ctx, path, Options{ShardCount: 16}); !errors.Is(err, outbox.ErrShardCountMismatch) {
		t.Errorf("Open(recorded 8 shards, asked 16) = %v, want outbox.ErrShardCountMismatch", err)
	}
}

func TestTypedErrors(t *testing.T) {
	ctx := t.Context()
	s := openT(t, ":memory:", Options{})
	f := allShards(t, s)
	var me *outbox.MessageError
	for name, err := range map[string]error{
		"empty key":       second(s.Enqueue(ctx, []outbox.Message{{Namespace: "n"}})),
		"empty namespace": second(s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k"}})),
	} {
		if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &me) {
			t.Errorf("%s: err = %v, want an *outbox.MessageError", name, err)
		}
	}
	var arg *outbox.ArgumentError
	for name, err := range map[string]error{
		"cap 0":           second(claimerOf(s).CountPendingOutboxRows(ctx, f, 0)),
		"limit 0":         second(claimerOf(s).ClaimOutboxRowsScoped(ctx, f, []backpressure.ScopedClaim{{Limit: 0}})),
		"unscoped 0":      second(claimerOf(s).ClaimOutboxRowsUnscoped(ctx, f, 0)),
		"open no path":    second(Open(ctx, "", Options{})),
		"negative lease":  second(Open(ctx, ":memory:", Options{Lease: -time.Second})),
		"negative shards": second(Open(ctx, ":memory:", Options{ShardCount: -1})),
	} {
		if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &arg) {
			t.Errorf("%s: err = %v, want an *outbox.ArgumentError", name, err)
		}
	}
	if err := s.Settle(ctx, outbox.Lease{DispatchKey: "missing", Token: 1}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle(missing) = %v, want outbox.ErrLeaseLost", err)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want outbox.ErrNotFound", err)
	}
	other, _ := backpressure.AllShards(s.ShardCount() * 2)
	var sc *outbox.ShardCountError
	if _, err := claimerOf(s).CountClaimedOutboxRows(ctx, other); !errors.As(err, &sc) || sc.Store != 64 || sc.Given != 128 || !errors.Is(err, outbox.ErrShardCountMismatch) {
		t.Errorf("CountClaimedOutboxRows(128 shards) = %v, want *outbox.ShardCountError{64, 128}", err)
	}

	// A lease that expired, not re-claimed: Settle is refused, saying why.
	clock := storetest.NewClock()
	s = openT(t, ":memory:", Options{Now: clock.Now, Lease: time.Second})
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "n"}}); err != nil {
		t.Fatal(err)
	}
	rows, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, allShards(t, s), 1)
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim = %v, %v", rows, err)
	}
	clock.Advance(time.Second)
	var lost *outbox.LeaseLostError
	if err := s.Settle(ctx, outbox.Lease{DispatchKey: "k", Token: rows[0].Token}); !errors.As(err, &lost) || lost.Token != rows[0].Token || lost.Op != "Settle" || !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle after the lease ended = %v, want a *outbox.LeaseLostError", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestCancelledContextChangesNothing(t *testing.T) {
	s := openT(t, ":memory:", Options{})
	f := allShards(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "n"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Enqueue(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, f, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("ClaimOutboxRowsUnscoped(cancelled) = %v, want context.Canceled", err)
	}
	if err := s.Settle(ctx, outbox.Lease{DispatchKey: "k", Token: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Settle(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := s.Stats(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Stats(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := Open(ctx, ":memory:", Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Open(cancelled) = %v, want context.Canceled", err)
	}
	st, err := s.Stats(t.Context())
	if err != nil || st.Total != 0 {
		t.Errorf("Stats after cancelled calls = %+v, %v; want an empty store", st, err)
	}
}

func TestUnscopedClaimAndStats(t *testing.T) {
	ctx := t.Context()
	clock := storetest.NewClock()
	s := openT(t, ":memory:", Options{Now: clock.Now, Lease: time.Minute})
	var msgs []outbox.Message
	for i, ns := range []string{"b", "a", "b", "c", "a", "c"} {
		msgs = append(msgs, outbox.Message{DispatchKey: "k" + string(rune('0'+i)), Namespace: ns, TaskQueue: "q"})
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	rows, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, allShards(t, s), 4)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.DispatchKey)
	}
	if want := []string{"k0", "k1", "k2", "k3"}; !equal(keys, want) {
		t.Errorf("unscoped claim = %v, want the oldest %v", keys, want)
	}
	if err := s.Settle(ctx, outbox.Lease{DispatchKey: "k0", Token: rows[0].Token}); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, outbox.Lease{DispatchKey: "k1", Token: rows[1].Token}, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	rows2, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, allShards(t, s), 1)
	if err != nil || len(rows2) != 1 || rows2[0].DispatchKey != "k4" {
		t.Fatalf("second claim = %+v, %v; want k4", rows2, err)
	}
	clock.Advance(31 * time.Second) // k2, k3 expire; k4 is live
	st, err := s.Stats(ctx)
	want := outbox.Stats{Pending: 1, Scheduled: 1, Claimed: 1, Expired: 2, Settled: 1, Total: 6}
	if err != nil || st != want {
		t.Errorf("Stats = %+v, %v; want %+v", st, err, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFileSharedByTwoStores: two stores on one file (two processes, say),
// each with several goroutines, claim and settle concurrently; with the
// clock standing still no lease expires, so every row must be claimed by
// exactly one claim and settled exactly once.
func TestFileSharedByTwoStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	ctx := t.Context()
	clock := storetest.NewClock()
	a, b := openT(t, path, Options{Now: clock.Now}), openT(t, path, Options{Now: clock.Now})
	const rows, perStore = 400, 3
	var msgs []outbox.Message
	for i := 0; i < rows; i++ {
		msgs = append(msgs, outbox.Message{DispatchKey: "k" + strconv.Itoa(i), Namespace: "n" + strconv.Itoa(i%4), TaskQueue: "q"})
	}
	if _, err := a.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		claimed = map[string]int64{} // dispatch key → token of the claim that returned it
		errs    []error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for g := 0; g < 2*perStore; g++ {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, _ := backpressure.AllShards(s.ShardCount())
			for n := 0; ; n++ {
				var got []outbox.Row
				var err error
				if n%2 == 0 {
					got, err = claimerOf(s).ClaimOutboxRowsUnscoped(ctx, f, 7)
				} else {
					got, err = claimerOf(s).ClaimOutboxRowsScoped(ctx, f, []backpressure.ScopedClaim{
						{Route: backpressure.Route{Namespace: "n" + strconv.Itoa(g%4), TaskQueue: "q"}, Limit: 3},
						{Route: backpressure.Route{Namespace: "n" + strconv.Itoa((g+1)%4), TaskQueue: "q"}, Limit: 2}})
				}
				if err != nil {
					fail(fmt.Errorf("goroutine %d: claim: %w", g, err))
					return
				}
				if len(got) == 0 {
					if n%2 == 0 {
						return // nothing claimable on any route, and no lease expires
					}
					continue
				}
				mu.Lock()
				for _, r := range got {
					if tok, dup := claimed[r.DispatchKey]; dup {
						errs = append(errs, fmt.Errorf("goroutine %d: row %q claimed with token %d while token %d's lease is live", g, r.DispatchKey, r.Token, tok))
					}
					claimed[r.DispatchKey] = r.Token
				}
				mu.Unlock()
				for _, r := range got {
					if err := s.Settle(ctx, r.Lease()); err != nil {
						fail(fmt.Errorf("goroutine %d: Settle(%q): %w", g, r.DispatchKey, err))
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(claimed) != rows {
		t.Errorf("claimed %d distinct rows, want %d", len(claimed), rows)
	}
	for _, s := range []*Store{a, b} {
		if st, err := s.Stats(ctx); err != nil || st != (outbox.Stats{Settled: rows, Total: rows}) {
			t.Errorf("Stats = %+v, %v; want all %d rows settled after exactly one claim each", st, err, rows)
		}
	}
}
