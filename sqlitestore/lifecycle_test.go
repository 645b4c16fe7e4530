package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestMigrateFromVersion1: a database written by schema version 1 (the
// previous release) is migrated in place: its pending, claimed and settled
// rows keep every column, get the store's attempt limit (pending and
// claimed) and the new columns' defaults, and the claimed row's lease
// still settles it.
func TestMigrateFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	ctx := t.Context()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	now := clock.Now().UnixNano()
	lease := now + int64(time.Minute)
	for _, q := range []string{
		`CREATE TABLE outbox_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT, WITHOUT ROWID`,
		migrations[0],
		`INSERT INTO outbox_meta (key, value) VALUES ('schema_version', 1), ('shard_count', 8)`,
		`UPDATE outbox_meta SET value = 7 WHERE key = 'last_token'`,
		`INSERT INTO outbox (dispatch_key, namespace, task_queue, shard, payload, state, attempts, token, enqueued_at, visible_at, claimed_at, lease_expires_at, settled_at, ready_at) VALUES
			('p', 'n', 'q', 1, x'70', 0, 2, 5, 10, 20, 15, 16, 0, 20),
			('c', 'n', 'q', 2, x'63', 1, 1, 7, 11, 11, ` + itoa(now) + `, ` + itoa(lease) + `, 0, ` + itoa(lease) + `),
			('s', 'm', 'q', 3, x'73', 2, 1, 6, 12, 12, 13, 14, 99, 14)`,
		`INSERT INTO outbox_routes VALUES ('n', 'q')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	_ = db.Close()

	// Read-only cannot migrate: refused, the file left at version 1.
	if ro, err := Open(ctx, path, Options{ReadOnly: true}); !errors.Is(err, outbox.ErrInvalidArgument) {
		if err == nil {
			_ = ro.Close()
		}
		t.Errorf("read-only Open of a version 1 database = %v, want outbox.ErrInvalidArgument", err)
	}
	s := openT(t, path, Options{Now: clock.Now, MaxAttempts: 4})
	if s.ShardCount() != 8 {
		t.Errorf("ShardCount = %d, want the recorded 8", s.ShardCount())
	}
	want := map[string]outbox.Row{
		"p": {ID: 1, DispatchKey: "p", Namespace: "n", TaskQueue: "q", Shard: 1, Payload: []byte("p"), State: outbox.StatePending,
			Attempts: 2, MaxAttempts: 4, Token: 5, EnqueuedAt: fromNanos(10), RunAt: fromNanos(20), ClaimedAt: fromNanos(15), LeaseExpiresAt: fromNanos(16)},
		"c": {ID: 2, DispatchKey: "c", Namespace: "n", TaskQueue: "q", Shard: 2, Payload: []byte("c"), State: outbox.StateClaimed,
			Attempts: 1, MaxAttempts: 4, Token: 7, EnqueuedAt: fromNanos(11), RunAt: fromNanos(11), ClaimedAt: fromNanos(now), LeaseExpiresAt: fromNanos(lease)},
		"s": {ID: 3, DispatchKey: "s", Namespace: "m", TaskQueue: "q", Shard: 3, Payload: []byte("s"), State: outbox.StateSettled,
			Attempts: 1, Token: 6, EnqueuedAt: fromNanos(12), RunAt: fromNanos(12), ClaimedAt: fromNanos(13), LeaseExpiresAt: fromNanos(14), FinishedAt: fromNanos(99)},
	}
	for key, w := range want {
		if got := getT(t, s, key); !rowEqual(got, w) {
			t.Errorf("migrated row %q = %+v,\nwant %+v", key, got, w)
		}
	}
	if err := s.Settle(ctx, outbox.Lease{DispatchKey: "c", Token: 7}); err != nil {
		t.Errorf("Settle with the lease taken before the migration: %v", err)
	}
	rows := claimAll(t, s)
	if len(rows) != 1 || rows[0].DispatchKey != "p" || rows[0].Token != 8 || rows[0].Attempts != 3 {
		t.Errorf("claim after migration = %+v; want p with token 8, attempt 3", rows)
	}
	if n, err := s.PurgeSettled(ctx, fromNanos(100), 10); err != nil || n != 1 {
		t.Errorf("PurgeSettled(before 100ns) = %d, %v; want the row settled at 99ns (finished_at kept from settled_at)", n, err)
	}
	var version int
	if err := s.reader.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'schema_version'`).Scan(&version); err != nil || version != schemaVersion {
		t.Errorf("schema_version = %d, %v; want %d", version, err, schemaVersion)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// rowEqual compares rows, times with Equal.
func rowEqual(a, b outbox.Row) bool {
	return a.ID == b.ID && a.DispatchKey == b.DispatchKey && a.Namespace == b.Namespace && a.TaskQueue == b.TaskQueue &&
		a.Shard == b.Shard && string(a.Payload) == string(b.Payload) && a.State == b.State && a.Attempts == b.Attempts &&
		a.MaxAttempts == b.MaxAttempts && a.Token == b.Token && a.EnqueuedAt.Equal(b.EnqueuedAt) && a.RunAt.Equal(b.RunAt) &&
		a.ClaimedAt.Equal(b.ClaimedAt) && a.LeaseExpiresAt.Equal(b.LeaseExpiresAt) && a.FinishedAt.Equal(b.FinishedAt) &&
		a.LastError == b.LastError
}

// TestScheduledRows: a message's RunAt hides its row from counts, claims
// and sweeps until the clock reaches it, as a retry delay does; a RunAt in
// the past is at once.
func TestScheduledRows(t *testing.T) {
	s, clock := clocked(t, ":memory:", Options{})
	f := allShards(t, s)
	at := clock.Now().Add(time.Hour)
	enqueueT(t, s,
		outbox.Message{DispatchKey: "later", Namespace: "n", TaskQueue: "q", RunAt: at},
		outbox.Message{DispatchKey: "past", Namespace: "n", TaskQueue: "q", RunAt: clock.Now().Add(-time.Hour)})
	if r := getT(t, s, "later"); !r.RunAt.Equal(at) {
		t.Errorf("Get(later).RunAt = %v, want %v", r.RunAt, at)
	}
	if st, err := s.Stats(t.Context()); err != nil || st.Scheduled != 1 || st.Pending != 1 {
		t.Errorf("Stats = %+v, %v; want 1 scheduled, 1 pending", st, err)
	}
	rows, _, err := backpressure.Sweep(t.Context(), mustBP(t, s.ShardCount()), s.Claimer())
	if err != nil || len(rows) != 1 || rows[0].DispatchKey != "past" {
		t.Fatalf("Sweep = %v, %v; want only the row already due", rows, err)
	}
	if err := s.Settle(t.Context(), rows[0].Lease()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour - time.Millisecond)
	if c, err := claimerOf(s).CountPendingOutboxRows(t.Context(), f, 10); err != nil || len(c) != 0 {
		t.Errorf("a millisecond before RunAt: counts = %v, %v; want none", c, err)
	}
	clock.Advance(time.Millisecond)
	if c, err := claimerOf(s).CountPendingOutboxRows(t.Context(), f, 10); err != nil || len(c) != 1 || c[0].Count != 1 {
		t.Errorf("at RunAt: counts = %v, %v; want n: 1", c, err)
	}
	if rows := claimAll(t, s); len(rows) != 1 || rows[0].DispatchKey != "later" {
		t.Errorf("claim at RunAt = %v; want the scheduled row", rows)
	}
}

// TestCompleteBatch: one Complete settles, retries and dead-letters
// claimed rows, reports lost leases per row (leaving those rows as they
// were), dead-letters a retry past MaxAttempts, and drops routes with no
// pending or claimed row left.
func TestCompleteBatch(t *testing.T) {
	ctx := t.Context()
	s, clock := clocked(t, ":memory:", Options{Lease: time.Minute, MaxAttempts: 2})
	enqueueT(t, s, msg("settle"), msg("retry"), msg("dead"), msg("limit"), msg("stale"), msg("expired"),
		outbox.Message{DispatchKey: "own", Namespace: "o", MaxAttempts: 1})
	rows := claimAll(t, s)
	byKey := map[string]outbox.Row{}
	for _, r := range rows {
		byKey[r.DispatchKey] = r
	}
	// "limit" goes through a retry and a second claim first: its second
	// retry is past MaxAttempts 2.
	if err := s.Retry(ctx, byKey["limit"].Lease(), 0, errors.New("first")); err != nil {
		t.Fatal(err)
	}
	again := claimAll(t, s)
	if len(again) != 1 || again[0].DispatchKey != "limit" || again[0].Attempts != 2 || again[0].LastError != "first" {
		t.Fatalf("second claim = %+v; want limit at attempt 2 with its last error", again)
	}
	byKey["limit"] = again[0]
	stale := byKey["stale"].Lease()
	stale.Token--
	before := getT(t, s, "stale")
	long := strings.Repeat("é", outbox.MaxErrorBytes) // 2 bytes a rune: truncated
	res, err := s.Complete(ctx, []outbox.Completion{
		outbox.SettleRow(byKey["settle"]),
		outbox.RetryRow(byKey["retry"], time.Hour, errors.New("later")),
		outbox.DeadLetterRow(byKey["dead"], errors.New(long)),
		outbox.RetryRow(byKey["limit"], time.Hour, errors.New("second")),
		{Lease: stale, Outcome: outbox.Settle},
		outbox.RetryRow(byKey["own"], 0, errors.New("once")),
		{Lease: outbox.Lease{DispatchKey: "missing", Token: 1}, Outcome: outbox.DeadLetter},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantStates := []outbox.State{outbox.StateSettled, outbox.StatePending, outbox.StateDead, outbox.StateDead, "", outbox.StateDead, ""}
	for i, r := range res {
		if r.State != wantStates[i] || (r.Err == nil) != (wantStates[i] != "") {
			t.Errorf("result %d = %+v, want state %q", i, r, wantStates[i])
		}
	}
	for _, i := range []int{4, 6} {
		var lost *outbox.LeaseLostError
		if !errors.As(res[i].Err, &lost) || lost.Op != "Complete" || !errors.Is(res[i].Err, outbox.ErrLeaseLost) {
			t.Errorf("result %d error = %v, want a *outbox.LeaseLostError of Complete", i, res[i].Err)
		}
	}
	if got := getT(t, s, "stale"); !rowEqual(got, before) {
		t.Errorf("row with a lost lease changed: %+v, was %+v", got, before)
	}
	now := clock.Now()
	if r := getT(t, s, "retry"); r.State != outbox.StatePending || !r.RunAt.Equal(now.Add(time.Hour)) || r.LastError != "later" || r.Attempts != 1 {
		t.Errorf("retried row = %+v", r)
	}
	if r := getT(t, s, "dead"); r.State != outbox.StateDead || !r.FinishedAt.Equal(now) || r.LastError != outbox.TruncateError(long) || len(r.LastError) > outbox.MaxErrorBytes {
		t.Errorf("dead-lettered row = %+v (error %d bytes)", r, len(r.LastError))
	}
	if r := getT(t, s, "limit"); r.State != outbox.StateDead || r.LastError != "second" {
		t.Errorf("row retried past MaxAttempts = %+v, want dead", r)
	}
	if r := getT(t, s, "own"); r.State != outbox.StateDead || r.MaxAttempts != 1 {
		t.Errorf("row retried past its own MaxAttempts 1 = %+v, want dead", r)
	}
	if st, err := s.Stats(ctx); err != nil || st != (outbox.Stats{Scheduled: 1, Claimed: 2, Settled: 1, Dead: 3, Total: 7}) {
		t.Errorf("Stats = %+v, %v", st, err)
	}
	// Route o/"" had only "own": dead now, so the route is gone.
	var n int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM outbox_routes WHERE namespace = 'o'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("route o still listed (%d, %v) after its only row was dead-lettered", n, err)
	}
	// Twice: lost.
	if err := s.Settle(ctx, byKey["settle"].Lease()); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("second Settle = %v, want lease lost", err)
	}
	// An expired lease is lost, and the row stays claimable.
	clock.Advance(time.Minute)
	if err := s.Settle(ctx, byKey["expired"].Lease()); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle after the lease expired = %v, want lease lost", err)
	}
}

// TestCompleteRefusesBadBatches: a key named twice, an invalid Outcome or a
// negative delay fail the whole call with an *outbox.ArgumentError, and an
// injected fault at any statement applies nothing.
func TestCompleteRefusesBadBatches(t *testing.T) {
	ctx := t.Context()
	s, _ := clocked(t, ":memory:", Options{})
	enqueueT(t, s, msg("a"), msg("b"))
	rows := claimAll(t, s)
	snapshot := func() []outbox.Row { return []outbox.Row{getT(t, s, "a"), getT(t, s, "b")} }
	before := snapshot()
	for name, c := range map[string][]outbox.Completion{
		"duplicate key":    {outbox.SettleRow(rows[0]), outbox.SettleRow(rows[1]), outbox.RetryRow(rows[0], 0, nil)},
		"zero outcome":     {outbox.SettleRow(rows[0]), {Lease: rows[1].Lease()}},
		"unknown outcome":  {{Lease: rows[1].Lease(), Outcome: 9}},
		"negative delay":   {outbox.SettleRow(rows[0]), outbox.RetryRow(rows[1], -time.Second, nil)},
		"empty key":        {outbox.SettleRow(rows[0]), {Outcome: outbox.Settle}},
		"invalid key":      {outbox.SettleRow(rows[0]), {Lease: outbox.Lease{DispatchKey: "\xff", Token: rows[1].Token}, Outcome: outbox.Settle}},
		"duplicate extend": nil,
	} {
		var err error
		if c == nil {
			_, err = s.ExtendLeases(ctx, []outbox.Lease{rows[0].Lease(), rows[0].Lease()})
		} else {
			_, err = s.Complete(ctx, c)
		}
		var arg *outbox.ArgumentError
		if !errors.As(err, &arg) || !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want an *outbox.ArgumentError", name, err)
		}
	}
	if err := s.Retry(ctx, rows[0].Lease(), -1, nil); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("Retry(negative delay) = %v, want outbox.ErrInvalidArgument", err)
	}
	for n := 1; ; n++ {
		s.failNth.Store(int64(n))
		_, err := s.Complete(ctx, []outbox.Completion{outbox.SettleRow(rows[0]), outbox.DeadLetterRow(rows[1], nil)})
		s.failNth.Store(0)
		if err == nil {
			break
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("fault at statement %d: %v", n, err)
		}
		if got := snapshot(); !rowEqual(got[0], before[0]) || !rowEqual(got[1], before[1]) {
			t.Fatalf("fault at statement %d applied part of the batch: %+v", n, got)
		}
	}
	if got := snapshot(); got[0].State != outbox.StateSettled || got[1].State != outbox.StateDead {
		t.Errorf("batch without a fault: %+v", got)
	}
}

// TestExtendLeases: live leases move to now + Lease; lost ones (stale
// token, expired, settled, never claimed) are reported and never revived.
func TestExtendLeases(t *testing.T) {
	ctx := t.Context()
	s, clock := clocked(t, ":memory:", Options{Lease: time.Minute})
	enqueueT(t, s, msg("live"), msg("expired"), msg("settled"), msg("pending"))
	rows := claimAll(t, s)
	_ = s.Retry(ctx, rows[3].Lease(), 0, nil)
	_ = s.Settle(ctx, rows[2].Lease())
	clock.Advance(30 * time.Second)
	if res, err := s.ExtendLeases(ctx, []outbox.Lease{{DispatchKey: "live", Token: rows[0].Token + 1}}); err != nil || !errors.Is(res[0].Err, outbox.ErrLeaseLost) {
		t.Errorf("extension with a stale token = %+v, %v; want lost", res, err)
	}
	res, err := s.ExtendLeases(ctx, []outbox.Lease{rows[0].Lease(), rows[2].Lease(), rows[3].Lease(), {DispatchKey: "nothing", Token: 1}})
	if err == nil && (res[0].Err != nil || !res[0].LeaseExpiresAt.Equal(clock.Now().Add(time.Minute)) || res[0].State != outbox.StateClaimed) {
		t.Errorf("extension of a live lease = %+v", res[0])
	}
	if err != nil || res[1].Err == nil || res[2].Err == nil || !errors.Is(res[3].Err, outbox.ErrLeaseLost) {
		t.Fatalf("ExtendLeases = %+v, %v; want the settled, pending and stale leases lost", res, err)
	}
	clock.Advance(45 * time.Second) // the original lease would have ended; the extension holds
	if c, err := claimerOf(s).CountClaimedOutboxRows(ctx, allShards(t, s)); err != nil || c["n"] != 1 {
		t.Errorf("claimed after extension = %v, %v; want the extended row", c, err)
	}
	if res, err := s.ExtendLeases(ctx, []outbox.Lease{rows[1].Lease()}); err != nil || !errors.Is(res[0].Err, outbox.ErrLeaseLost) {
		t.Errorf("extension of an expired lease = %+v, %v; want lost", res, err)
	}
	if r := getT(t, s, "expired"); !r.LeaseExpiresAt.Equal(rows[1].LeaseExpiresAt) {
		t.Errorf("expired lease revived: %v", r.LeaseExpiresAt)
	}
	if err := s.Settle(ctx, rows[0].Lease()); err != nil {
		t.Errorf("Settle within the extended lease: %v", err)
	}
}

// TestDeadLettersRequeueAndPurge: ListDead pages by key with a namespace
// filter; Requeue brings dead rows back with attempts 0; PurgeSettled and
// PurgeDead delete in bounded batches, oldest first, each only its state;
// a purged key can be enqueued again and its old lease is lost.
func TestDeadLettersRequeueAndPurge(t *testing.T) {
	ctx := t.Context()
	s, clock := clocked(t, ":memory:", Options{})
	var ms []outbox.Message
	for _, k := range []string{"a1", "a2", "a3", "b1", "b2"} {
		ms = append(ms, outbox.Message{DispatchKey: k, Namespace: k[:1], TaskQueue: "q"})
	}
	enqueueT(t, s, append(ms, msg("s1"), msg("s2"))...)
	rows := claimAll(t, s)
	for _, r := range rows {
		c := outbox.DeadLetterRow(r, errors.New("bad "+r.DispatchKey))
		if strings.HasPrefix(r.DispatchKey, "s") {
			c = outbox.SettleRow(r)
		}
		if res, err := s.Complete(ctx, []outbox.Completion{c}); err != nil || res[0].Err != nil {
			t.Fatalf("Complete(%+v) = %+v, %v", c, res, err)
		}
		clock.Advance(time.Millisecond)
	}
	keys := func(rs []outbox.Row) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.DispatchKey)
		}
		return out
	}
	var pages [][]string
	after := ""
	for {
		page, err := s.ListDead(ctx, outbox.ListDeadParams{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, keys(page))
		after = page[len(page)-1].DispatchKey
	}
	if want := [][]string{{"a1", "a2"}, {"a3", "b1"}, {"b2"}}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Errorf("ListDead pages = %v, want %v", pages, want)
	}
	if b, err := s.ListDead(ctx, outbox.ListDeadParams{Namespace: "b"}); err != nil || !slices.Equal(keys(b), []string{"b1", "b2"}) || b[0].LastError != "bad b1" {
		t.Errorf("ListDead(b) = %+v, %v", b, err)
	}
	for _, bad := range []int{-1, 10_001} {
		if _, err := s.ListDead(ctx, outbox.ListDeadParams{Limit: bad}); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("ListDead(Limit %d) = %v, want outbox.ErrInvalidArgument", bad, err)
		}
	}
	if n, err := s.Requeue(ctx, []string{"b1", "s1", "missing", "b1"}); err != nil || n != 1 {
		t.Errorf("Requeue = %d, %v; want 1 (only b1 is dead)", n, err)
	}
	if r := getT(t, s, "b1"); r.State != outbox.StatePending || r.Attempts != 0 || !r.FinishedAt.IsZero() {
		t.Errorf("requeued row = %+v", r)
	}
	if c, err := claimerOf(s).CountPendingOutboxRows(ctx, allShards(t, s), 10); err != nil || len(c) != 1 || c[0].Route.Namespace != "b" {
		t.Errorf("counts after Requeue = %v, %v; want b/q", c, err)
	}
	if got := claimAll(t, s); len(got) != 1 || got[0].DispatchKey != "b1" || got[0].Attempts != 1 {
		t.Errorf("claim after Requeue = %+v", got)
	}
	// Purge: settled rows only, oldest first, in batches.
	if _, err := s.PurgeSettled(ctx, clock.Now(), -1); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("PurgeSettled(limit -1) = %v, want outbox.ErrInvalidArgument", err)
	}
	if n, err := s.PurgeSettled(ctx, clock.Now(), 0); err != nil || n != 0 {
		t.Errorf("PurgeSettled(limit 0) = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.Requeue(ctx, []string{"b2", ""}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("Requeue(an empty key) = %v, want outbox.ErrInvalidArgument", err)
	}
	if n, err := s.PurgeSettled(ctx, clock.Now(), 1); err != nil || n != 1 {
		t.Errorf("PurgeSettled(limit 1) = %d, %v", n, err)
	}
	if _, err := s.Get(ctx, "s1"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get(s1) after the first purge = %v, want not found (the older one goes first)", err)
	}
	if n, err := s.PurgeSettled(ctx, clock.Now().Add(time.Hour), 10); err != nil || n != 1 {
		t.Errorf("PurgeSettled(rest) = %d, %v; want 1", n, err)
	}
	if n, err := s.PurgeDead(ctx, clock.Now().Add(time.Hour), 10); err != nil || n != 4 {
		t.Errorf("PurgeDead = %d, %v; want the 4 still dead", n, err)
	}
	if err := s.Settle(ctx, rows[0].Lease()); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle of a purged row = %v, want lease lost", err)
	}
	if n, err := s.Enqueue(ctx, []outbox.Message{msg("s1")}); err != nil || n != 1 {
		t.Errorf("Enqueue of a purged key = %d, %v; want it inserted again", n, err)
	}
	if st, err := s.Stats(ctx); err != nil || st != (outbox.Stats{Pending: 1, Claimed: 1, Total: 2}) {
		t.Errorf("Stats = %+v, %v", st, err)
	}
}

// appDB opens an application's database as New documents it.
func appDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestEnqueueTx: rows written in the caller's transaction exist exactly
// when it commits. Rolled back: nothing. Uncommitted: invisible to the
// store's counts, Get and Stats, which do not wait for it. Committed:
// claimable. Dedup works inside the transaction, a finished or foreign
// transaction is refused, and a failure part-way leaves the transaction
// without any of the batch.
func TestEnqueueTx(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "app.db")
	db := appDB(t, path)
	clock := storetest.NewClock()
	s, err := New(ctx, db, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := allShards(t, s)
	pending := func() int {
		t.Helper()
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Total
	}

	// Rolled back: nothing.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("r1"), msg("r2")}); err != nil || n != 2 {
		t.Fatalf("EnqueueTx = %d, %v", n, err)
	}
	_ = tx.Rollback()
	if pending() != 0 {
		t.Errorf("rows exist after the transaction rolled back")
	}

	// Uncommitted, then committed, with the business row.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o1')`); err != nil {
		t.Fatal(err)
	}
	n, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("c1"), msg("c2"), msg("c1")})
	if err != nil || n != 2 {
		t.Fatalf("EnqueueTx with a key twice = %d, %v; want 2", n, err)
	}
	if n, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("c2")}); err != nil || n != 0 {
		t.Errorf("EnqueueTx of a key the transaction already holds = %d, %v; want 0", n, err)
	}
	if pending() != 0 {
		t.Errorf("uncommitted rows visible to Stats")
	}
	if c, err := claimerOf(s).CountPendingOutboxRows(ctx, f, 10); err != nil || len(c) != 0 {
		t.Errorf("uncommitted rows counted: %v, %v", c, err)
	}
	if _, err := s.Get(ctx, "c1"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get of an uncommitted row = %v, want not found", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, _, err := backpressure.Sweep(ctx, mustBP(t, s.ShardCount()), s.Claimer())
	if err != nil || len(rows) != 2 {
		t.Fatalf("Sweep after commit = %v, %v; want c1 and c2", rows, err)
	}

	// Finished and foreign transactions; a nil one.
	var arg *outbox.ArgumentError
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("x")}); !errors.As(err, &arg) || !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("EnqueueTx(committed tx) = %v, want an *outbox.ArgumentError matching sql.ErrTxDone", err)
	}
	if _, err := s.EnqueueTx(ctx, nil, []outbox.Message{msg("x")}); !errors.As(err, &arg) {
		t.Errorf("EnqueueTx(nil) = %v, want an *outbox.ArgumentError", err)
	}
	for name, other := range map[string]string{"no outbox": "plain.db", "another outbox": "other.db"} {
		odb := appDB(t, filepath.Join(t.TempDir(), other))
		if name == "another outbox" {
			o, err := New(ctx, odb, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_ = o.Close()
		}
		otx, err := odb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueTx(ctx, otx, []outbox.Message{msg("x")}); !errors.As(err, &arg) || arg.Arg != "tx" {
			t.Errorf("EnqueueTx(tx on %s) = %v, want an *outbox.ArgumentError on tx", name, err)
		}
		_ = otx.Rollback()
	}
	// A fault part-way: the transaction keeps its own write, none of the batch.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o2')`); err != nil {
		t.Fatal(err)
	}
	s.failNth.Store(4)
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("f1"), msg("f2"), msg("f3")}); !errors.Is(err, errInjected) {
		t.Errorf("EnqueueTx with a fault = %v", err)
	}
	s.failNth.Store(0)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "f1"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("a failed EnqueueTx left rows in the transaction: Get(f1) = %v", err)
	}
	var orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil || orders != 2 {
		t.Errorf("orders = %d, %v; want both business rows", orders, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Errorf("Close closed the application's database: %v", err)
	}
}

// TestUncommittedTxAndTheDispatcher: what a long-open application write
// transaction does to a dispatcher: its counts proceed without the
// uncommitted rows, its claim waits for the write lock and, after the busy
// timeout, fails claiming nothing; once the transaction commits the rows
// are claimed.
func TestUncommittedTxAndTheDispatcher(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := openT(t, path, Options{BusyTimeout: time.Millisecond})
	enqueueT(t, s, msg("old"))
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.EnqueueTx(ctx, tx, []outbox.Message{msg("new")}); err != nil {
		t.Fatal(err)
	}
	f := allShards(t, s)
	if c, err := claimerOf(s).CountPendingOutboxRows(ctx, f, 10); err != nil || len(c) != 1 || c[0].Count != 1 {
		t.Errorf("counts during the transaction = %v, %v; want only the committed row", c, err)
	}
	if rows, _, err := backpressure.Sweep(ctx, mustBP(t, s.ShardCount()), s.Claimer()); err == nil || len(rows) != 0 {
		t.Errorf("Sweep during another's write transaction = %d rows, %v; want a busy error", len(rows), err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if rows, _, err := backpressure.Sweep(ctx, mustBP(t, s.ShardCount()), s.Claimer()); err != nil || len(rows) != 2 {
		t.Errorf("Sweep after commit = %d rows, %v; want both", len(rows), err)
	}
}

// TestNewChecksTheDatabase: New refuses a database it cannot serve safely.
func TestNewChecksTheDatabase(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	for name, dsn := range map[string]string{
		"rollback journal": "file:" + filepath.Join(dir, "a.db") + "?_pragma=busy_timeout(5000)",
		"no busy timeout":  "file:" + filepath.Join(dir, "b.db") + "?_pragma=journal_mode(WAL)",
	} {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(ctx, db, Options{})
		var arg *outbox.ArgumentError
		if !errors.As(err, &arg) || arg.Arg != "db" {
			t.Errorf("New(%s) = %v, want an *outbox.ArgumentError on db", name, err)
		}
		_ = db.Close()
	}
	if _, err := New(ctx, nil, Options{}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v", err)
	}
	db := appDB(t, filepath.Join(dir, "c.db"))
	if _, err := New(ctx, db, Options{Readers: 2}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("New(Readers: 2) = %v, want outbox.ErrInvalidArgument", err)
	}
}

// TestNewStoreTakesTheLockFirst: a store built with New on a database
// without _txlock=immediate still takes the write lock with the first
// statement of each of its transactions, so a sweep transaction that
// counts and then claims never fails to upgrade a stale snapshot, even with
// another writer committing in between.
func TestNewStoreTakesTheLockFirst(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "deferred.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := openT(t, path, Options{})
	enqueueT(t, s, msg("a"))
	f := allShards(t, s)
	err = claimerOf(s).InSweepTx(ctx, func(tx backpressure.OutboxStore[outbox.Row]) error {
		if _, err := tx.CountPendingOutboxRows(ctx, f, 10); err != nil {
			return err
		}
		// Another writer tries to commit between the count and the claim:
		// it must wait (the sweep holds the lock), so it runs after.
		done := make(chan error, 1)
		go func() {
			_, err := other.Enqueue(context.Background(), []outbox.Message{msg("b")})
			done <- err
		}()
		rows, err := tx.ClaimOutboxRowsScoped(ctx, f, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "n", TaskQueue: "q"}, Limit: 10}})
		if err != nil || len(rows) != 1 {
			return errors.Join(err, errors.New("claim in the sweep transaction failed"))
		}
		select {
		case err := <-done:
			return errors.Join(err, errors.New("another writer committed inside the sweep transaction"))
		default:
		}
		go func() { <-done }()
		return nil
	})
	if err != nil {
		t.Errorf("InSweepTx: %v", err)
	}
}

// A database that records a shard count above backpressure.MaxShardCount
// (as a version before the bound could write) is refused on Open, read-only
// or not, with an error matching backpressure.ErrInvalidShards, rather than
// opened into a store no sweep can use.
func TestOpenRefusesRecordedShardCountAboveMax(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.db")
	s := openT(t, path, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `UPDATE outbox_meta SET value = ? WHERE key = 'shard_count'`, backpressure.MaxShardCount+1); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	for _, ro := range []bool{false, true} {
		s, err := Open(t.Context(), path, Options{ReadOnly: ro})
		if err == nil {
			_ = s.Close()
		}
		if !errors.Is(err, backpressure.ErrInvalidShards) {
			t.Errorf("Open(ReadOnly: %v) of a database recording %d shards = %v, want an error matching ErrInvalidShards", ro, backpressure.MaxShardCount+1, err)
		}
	}
}
