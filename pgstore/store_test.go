package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/pgstore"
)

// fixture is one fresh store in its own schema with a manual clock.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	s      *pgstore.Store
	schema string
	now    time.Time
	tr     *tracer
	pool   *pgxpool.Pool
	all    backpressure.OwnedShardFraction
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: t.Context(), schema: testSchema(t), tr: &tracer{},
		now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.pool = newPool(t, f.tr, 4)
	s, err := pgstore.New(f.ctx, f.pool, pgstore.Options{Schema: f.schema, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.s = s
	if f.all, err = backpressure.AllShards(s.ShardCount()); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) enqueue(msgs ...pgstore.Message) {
	f.t.Helper()
	if _, err := f.s.Enqueue(f.ctx, msgs); err != nil {
		f.t.Fatalf("Enqueue: %v", err)
	}
}

func (f *fixture) state(key string) pgstore.State {
	f.t.Helper()
	_, st, err := f.s.Get(f.ctx, key)
	if err != nil {
		f.t.Fatalf("Get(%q): %v", key, err)
	}
	return st
}

func message(ns, tq, key string) pgstore.Message {
	return pgstore.Message{DispatchKey: key, Namespace: ns, TaskQueue: tq, Payload: []byte(key)}
}

func claim(ns, tq string, limit int) backpressure.ScopedClaim {
	return backpressure.ScopedClaim{Route: backpressure.Route{Namespace: ns, TaskQueue: tq}, Limit: limit}
}

func TestNewRejectsBadOptions(t *testing.T) {
	pool := adminPool
	for i, c := range []struct {
		opts  pgstore.Options
		field string
	}{
		{pgstore.Options{Schema: "Upper"}, "Schema"},
		{pgstore.Options{Schema: "a;drop table x"}, "Schema"},
		{pgstore.Options{Schema: `a"b`}, "Schema"},
		{pgstore.Options{Schema: "1abc"}, "Schema"},
		{pgstore.Options{Schema: "pg_mine"}, "Schema"},
		{pgstore.Options{Schema: strings.Repeat("a", 64)}, "Schema"},
		{pgstore.Options{ShardCount: -1}, "ShardCount"},
		{pgstore.Options{ShardCount: 1 << 31}, "ShardCount"},
		{pgstore.Options{Lease: -time.Second}, "Lease"},
		{pgstore.Options{Lease: time.Nanosecond}, "Lease"},
	} {
		s, err := pgstore.New(t.Context(), pool, c.opts)
		var oe *pgstore.OptionsError
		if s != nil || !errors.Is(err, pgstore.ErrInvalidOptions) || !errors.As(err, &oe) || oe.Field != c.field {
			t.Errorf("step %d: New(%+v) = %v, %v; want an *OptionsError for %s", i, c.opts, s, err, c.field)
		}
	}
	if _, err := pgstore.New(t.Context(), nil, pgstore.Options{}); !errors.Is(err, pgstore.ErrInvalidOptions) {
		t.Errorf("New(nil pool) = %v, want ErrInvalidOptions", err)
	}
	if _, err := pgstore.Open(t.Context(), "::not a url::", pgstore.Options{}); !errors.Is(err, pgstore.ErrInvalidOptions) {
		t.Errorf("Open(bad URL) = %v, want ErrInvalidOptions", err)
	}
}

func TestDefaults(t *testing.T) {
	schema := testSchema(t)
	s, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if s.Schema() != schema || s.ShardCount() != pgstore.DefaultShardCount || s.Lease() != pgstore.DefaultLease {
		t.Errorf("store = %s/%d/%v, want %s/%d/%v", s.Schema(), s.ShardCount(), s.Lease(), schema, pgstore.DefaultShardCount, pgstore.DefaultLease)
	}
}

// TestMigrateConcurrently starts many stores on one new schema at once, as
// a cluster's nodes do: the advisory lock lets exactly one migrate.
func TestMigrateConcurrently(t *testing.T) {
	schema := testSchema(t)
	pool := newPool(t, nil, 8)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = pgstore.New(t.Context(), pool, pgstore.Options{Schema: schema})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("node %d: New: %v", i, err)
		}
	}
	var n, max int
	if err := adminPool.QueryRow(t.Context(), "SELECT count(*), max(version) FROM "+pgx.Identifier{schema}.Sanitize()+".schema_version").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != pgstore.SchemaVersion || max != pgstore.SchemaVersion {
		t.Errorf("schema_version has %d rows up to %d, want %d up to %d", n, max, pgstore.SchemaVersion, pgstore.SchemaVersion)
	}
}

func TestSchemaVersionIsMigrationCount(t *testing.T) {
	if pgstore.SchemaVersion != pgstore.MigrationCount() {
		t.Errorf("SchemaVersion = %d, but there are %d migrations", pgstore.SchemaVersion, pgstore.MigrationCount())
	}
}

func TestSchemaTooNew(t *testing.T) {
	schema := testSchema(t)
	if _, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(t.Context(), "INSERT INTO "+pgx.Identifier{schema}.Sanitize()+".schema_version (version) VALUES ($1)", pgstore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema})
	var ve *pgstore.SchemaVersionError
	if !errors.Is(err, pgstore.ErrSchemaTooNew) || !errors.As(err, &ve) || ve.Found != pgstore.SchemaVersion+1 {
		t.Errorf("New on a newer schema = %v, want a *SchemaVersionError", err)
	}
}

// TestSchemasAreIsolated: two stores in two schemas of one database share
// nothing, not even dedup.
func TestSchemasAreIsolated(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	a.enqueue(message("acme", "q", "k"))
	if n, err := b.s.Enqueue(b.ctx, []pgstore.Message{message("acme", "q", "k")}); err != nil || n != 1 {
		t.Errorf("Enqueue of the same key in another schema = %d, %v; want 1, nil", n, err)
	}
	rows, err := a.s.ClaimOutboxRowsScoped(a.ctx, a.all, []backpressure.ScopedClaim{claim("acme", "q", 10)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim in schema a = %v, %v; want one row", rows, err)
	}
	if c, err := b.s.CountClaimedOutboxRows(b.ctx, b.all); err != nil || len(c) != 0 {
		t.Errorf("claimed in schema b after a claim in schema a = %v, %v; want none", c, err)
	}
}

func TestInvalidInputTouchesNothing(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("acme", "q", "k"))
	before := f.tr.queries.Load()
	for i, call := range []func() error{
		func() error { _, err := f.s.Enqueue(f.ctx, []pgstore.Message{message("acme", "q", "")}); return err },
		func() error { _, err := f.s.Enqueue(f.ctx, []pgstore.Message{message("", "q", "k2")}); return err },
		func() error {
			_, err := f.s.Enqueue(f.ctx, []pgstore.Message{message("acme", "q\x00", "k2")})
			return err
		},
		func() error {
			_, err := f.s.Enqueue(f.ctx, []pgstore.Message{message("acme", "q", "k\xff")})
			return err
		},
		func() error {
			_, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", -1)})
			return err
		},
		func() error {
			_, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1), claim("acme", "q", 1)})
			return err
		},
		func() error { _, err := f.s.ClaimOutboxRowsUnscoped(f.ctx, f.all, -1); return err },
		func() error { _, err := f.s.CountPendingOutboxRows(f.ctx, f.all, 0); return err },
		func() error { return f.s.Retry(f.ctx, "k", 1, -time.Second) },
		func() error { _, err := f.s.PurgeSettled(f.ctx, f.now, -1); return err },
	} {
		err := call()
		var ie *pgstore.ArgumentError
		if !errors.Is(err, pgstore.ErrInvalidArgument) || !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "pgstore: ") {
			t.Errorf("step %d: error %v, want a pgstore *ArgumentError", i, err)
		}
	}
	if n := f.tr.queries.Load() - before; n != 0 {
		t.Errorf("rejected calls made %d round trips, want 0", n)
	}
	if st := f.state("k"); st != pgstore.StatePending {
		t.Errorf("row k is %s after rejected calls, want pending", st)
	}
}

func TestNotFoundAndLeaseLost(t *testing.T) {
	f := newFixture(t)
	if err := f.s.Settle(f.ctx, "nope", 1); !errors.Is(err, pgstore.ErrNotFound) {
		t.Errorf("Settle(unknown key) = %v, want ErrNotFound", err)
	}
	if err := f.s.Retry(f.ctx, "nope", 1, 0); !errors.Is(err, pgstore.ErrNotFound) {
		t.Errorf("Retry(unknown key) = %v, want ErrNotFound", err)
	}
	if _, _, err := f.s.Get(f.ctx, "nope"); !errors.Is(err, pgstore.ErrNotFound) {
		t.Errorf("Get(unknown key) = %v, want ErrNotFound", err)
	}
	f.enqueue(message("acme", "q", "k"))
	err := f.s.Settle(f.ctx, "k", 0) // pending: no claim to settle
	var le *pgstore.LeaseLostError
	if !errors.Is(err, pgstore.ErrLeaseLost) || !errors.As(err, &le) || le.DispatchKey != "k" || le.Op != "Settle" {
		t.Errorf("Settle(pending row) = %v, want a *LeaseLostError for k", err)
	}
	rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim = %v, %v", rows, err)
	}
	// The lease ends at ClaimedAt + Lease exactly: a settle then is too late,
	// even though no other claimer has taken the row yet.
	f.now = rows[0].LeaseExpiresAt
	if err := f.s.Settle(f.ctx, "k", rows[0].Token); !errors.Is(err, pgstore.ErrLeaseLost) {
		t.Errorf("Settle at lease expiry = %v, want ErrLeaseLost", err)
	}
}

func TestGetAndAttempts(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("acme", "q", "k"))
	row, st, err := f.s.Get(f.ctx, "k")
	if err != nil || st != pgstore.StatePending || row.Attempts != 0 || row.Token != 0 || !row.ClaimedAt.IsZero() ||
		row.Shard != backpressure.ShardFor("k", f.s.ShardCount()) || !row.EnqueuedAt.Equal(f.now) || string(row.Payload) != "k" {
		t.Fatalf("Get(new row) = %+v, %s, %v", row, st, err)
	}
	var tokens []int64
	for attempt := 1; attempt <= 3; attempt++ {
		rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1)})
		if err != nil || len(rows) != 1 {
			t.Fatalf("attempt %d: claim = %v, %v", attempt, rows, err)
		}
		r := rows[0]
		if r.Attempts != attempt || !r.ClaimedAt.Equal(f.now) || !r.LeaseExpiresAt.Equal(f.now.Add(pgstore.DefaultLease)) {
			t.Errorf("attempt %d: claimed row %+v", attempt, r)
		}
		tokens = append(tokens, r.Token)
		if err := f.s.Retry(f.ctx, "k", r.Token, time.Second); err != nil {
			t.Fatalf("attempt %d: Retry: %v", attempt, err)
		}
		f.now = f.now.Add(time.Second)
	}
	if tokens[0] >= tokens[1] || tokens[1] >= tokens[2] {
		t.Errorf("tokens %v are not fresh per claim", tokens)
	}
}

// TestClaimIsAtomicInTheDatabase makes the claim statement itself fail
// part-way — a trigger raises when the poisoned row is being claimed, after
// other scopes' rows were already updated by the same statement — and
// checks that nothing at all was claimed.
func TestClaimIsAtomicInTheDatabase(t *testing.T) {
	f := newFixture(t)
	var claims []backpressure.ScopedClaim
	for i := 0; i < 5; i++ {
		ns := fmt.Sprintf("ns%d", i)
		for j := 0; j < 4; j++ {
			f.enqueue(message(ns, "q", fmt.Sprintf("%s-%d", ns, j)))
		}
		claims = append(claims, claim(ns, "q", 3))
	}
	f.enqueue(message("zz", "q", "poison"))
	claims = append(claims, claim("zz", "q", 1))
	q := pgx.Identifier{f.schema}.Sanitize()
	if _, err := adminPool.Exec(f.ctx, `
CREATE FUNCTION `+q+`.poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.dispatch_key = 'poison' AND NEW.state = 'claimed' THEN
		RAISE EXCEPTION 'poisoned row' USING ERRCODE = 'P0001';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE UPDATE ON `+q+`.outbox FOR EACH ROW EXECUTE FUNCTION `+q+`.poison();`); err != nil {
		t.Fatal(err)
	}
	rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, claims)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "P0001" || len(rows) != 0 {
		t.Fatalf("claim with a poisoned row = %d rows, %v; want the trigger's error", len(rows), err)
	}
	if c, err := f.s.CountClaimedOutboxRows(f.ctx, f.all); err != nil || len(c) != 0 {
		t.Errorf("claimed after the failed claim = %v, %v; want none", c, err)
	}
	var touched int
	if err := adminPool.QueryRow(f.ctx, `SELECT count(*) FROM `+q+`.outbox WHERE state <> 'pending' OR attempts <> 0 OR token <> 0`).Scan(&touched); err != nil || touched != 0 {
		t.Errorf("%d rows touched by the failed claim (%v), want 0", touched, err)
	}
	if _, err := adminPool.Exec(f.ctx, `DROP TRIGGER poison ON `+q+`.outbox`); err != nil {
		t.Fatal(err)
	}
	if rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, claims); err != nil || len(rows) != 16 {
		t.Errorf("claim without the trigger = %d rows, %v; want 16", len(rows), err)
	}
}

func TestClaimOrderAndZeroLimit(t *testing.T) {
	f := newFixture(t)
	// A batch is claimed in the order it was given, not in key order.
	f.enqueue(message("a", "q", "k3"), message("a", "q", "k1"), message("a", "q", "k2"), message("b", "q", "b1"))
	rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("b", "q", 5), claim("c", "q", 0), claim("a", "q", 2)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.DispatchKey)
	}
	if want := "b1 k3 k1"; strings.Join(got, " ") != want {
		t.Errorf("claim returned %v, want %s (grouped by claim, oldest first)", got, want)
	}
	if rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 0)}); err != nil || rows != nil {
		t.Errorf("claim with only a zero limit = %v, %v; want nothing", rows, err)
	}
}

func TestClaimUnscoped(t *testing.T) {
	f := newFixture(t)
	var keys []string
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("k%02d", i)
		keys = append(keys, k)
		f.enqueue(message(fmt.Sprintf("ns%d", i%3), "q", k))
		f.now = f.now.Add(time.Millisecond)
	}
	even, err := backpressure.NewOwnedShardFraction(func() []int {
		var ids []int
		for i := 0; i < f.s.ShardCount(); i += 2 {
			ids = append(ids, i)
		}
		return ids
	}(), f.s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, k := range keys {
		if even.Owns(backpressure.ShardFor(k, f.s.ShardCount())) && len(want) < 5 {
			want = append(want, k)
		}
	}
	rows, err := f.s.ClaimOutboxRowsUnscoped(f.ctx, even, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.DispatchKey)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("unscoped claim on even shards = %v, want the oldest %v", got, want)
	}
	other, _ := backpressure.AllShards(f.s.ShardCount() * 2)
	if _, err := f.s.ClaimOutboxRowsUnscoped(f.ctx, other, 5); !errors.Is(err, pgstore.ErrShardCountMismatch) || !errors.Is(err, backpressure.ErrInvalidShards) {
		t.Errorf("unscoped claim with a mismatched shard count = %v, want ErrShardCountMismatch", err)
	}
}

func TestDatabaseClock(t *testing.T) {
	schema := testSchema(t)
	s, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	if _, err := s.Enqueue(t.Context(), []pgstore.Message{message("a", "q", "k")}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.ClaimOutboxRowsScoped(t.Context(), all, []backpressure.ScopedClaim{claim("a", "q", 1)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim = %v, %v", rows, err)
	}
	var dbNow time.Time
	if err := adminPool.QueryRow(t.Context(), "SELECT now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.LeaseExpiresAt.Sub(r.ClaimedAt) != time.Minute || r.ClaimedAt.After(dbNow) || r.ClaimedAt.Before(r.EnqueuedAt) {
		t.Errorf("claimed row %+v against database now %v: want the database clock and a one-minute lease", r, dbNow)
	}
	if err := s.Settle(t.Context(), "k", r.Token); err != nil {
		t.Errorf("Settle: %v", err)
	}
}

func TestPurgeSettled(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		f.enqueue(message("a", "q", fmt.Sprintf("k%d", i)))
	}
	rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 3)})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		f.now = f.now.Add(time.Second)
		if err := f.s.Settle(f.ctx, r.DispatchKey, r.Token); err != nil {
			t.Fatalf("Settle row %d: %v", i, err)
		}
	}
	// Settled at +1s, +2s, +3s; purge those before +3s, one at a time.
	cut := f.now
	for step, want := range []int{1, 1, 0} {
		if n, err := f.s.PurgeSettled(f.ctx, cut, 1); err != nil || n != want {
			t.Errorf("step %d: PurgeSettled = %d, %v; want %d", step, n, err, want)
		}
	}
	if _, _, err := f.s.Get(f.ctx, rows[0].DispatchKey); !errors.Is(err, pgstore.ErrNotFound) {
		t.Errorf("Get(purged) = %v, want ErrNotFound", err)
	}
	if st := f.state(rows[2].DispatchKey); st != pgstore.StateSettled {
		t.Errorf("row settled at the cut is %s, want kept settled", st)
	}
	if st := f.state("k4"); st != pgstore.StatePending {
		t.Errorf("pending row is %s after purges, want pending", st)
	}
}

func TestClosedAndContexts(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k"))
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	before := f.tr.queries.Load()
	calls := map[string]func(context.Context) error{
		"Enqueue": func(ctx context.Context) error {
			_, err := f.s.Enqueue(ctx, []pgstore.Message{message("a", "q", "k2")})
			return err
		},
		"Settle": func(ctx context.Context) error { return f.s.Settle(ctx, "k", 1) },
		"Retry":  func(ctx context.Context) error { return f.s.Retry(ctx, "k", 1, 0) },
		"Get":    func(ctx context.Context) error { _, _, err := f.s.Get(ctx, "k"); return err },
		"Unscoped": func(ctx context.Context) error {
			_, err := f.s.ClaimOutboxRowsUnscoped(ctx, f.all, 1)
			return err
		},
		"PurgeSettled": func(ctx context.Context) error { _, err := f.s.PurgeSettled(ctx, f.now, 1); return err },
	}
	for name, call := range calls {
		if err := call(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
		}
	}
	if n := f.tr.queries.Load() - before; n != 0 {
		t.Errorf("calls with a cancelled context made %d round trips, want 0", n)
	}
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, call := range calls {
		if err := call(f.ctx); !errors.Is(err, pgstore.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	// Close leaves a pool it did not open usable.
	if err := f.s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := f.pool.Ping(f.ctx); err != nil {
		t.Errorf("the store's pool after Close: %v; Close must leave a pool it did not open", err)
	}
}

func TestOpenOwnsItsPool(t *testing.T) {
	s, err := pgstore.Open(t.Context(), databaseURL(), pgstore.Options{Schema: testSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(t.Context(), []pgstore.Message{message("a", "q", "k")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenTurnsJITOff checks that the pool Open makes runs its sessions
// with jit = off, unless the URL sets jit itself.
func TestOpenTurnsJITOff(t *testing.T) {
	sep := "?"
	if strings.Contains(databaseURL(), "?") {
		sep = "&"
	}
	for _, c := range []struct{ url, want string }{
		{databaseURL(), "off"},
		{databaseURL() + sep + "jit=on", "on"},
	} {
		s, err := pgstore.Open(t.Context(), c.url, pgstore.Options{Schema: testSchema(t)})
		if err != nil {
			t.Fatal(err)
		}
		var jit string
		if err := pgstore.PoolOf(s).QueryRow(t.Context(), "SHOW jit").Scan(&jit); err != nil {
			t.Fatal(err)
		}
		if jit != c.want {
			t.Errorf("Open(%s): jit = %s, want %s", redact(c.url), jit, c.want)
		}
		_ = s.Close()
	}
}

// TestNoJITIsLocal checks the batch the claims and the pending counts run
// in: JIT is off inside it, and the session keeps its own setting after.
func TestNoJITIsLocal(t *testing.T) {
	pool := newPool(t, nil, 1, "jit", "on") // one session, JIT on
	s, err := pgstore.New(t.Context(), pool, pgstore.Options{Schema: testSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	inside, err := pgstore.QueryNoJIT(t.Context(), s, "SELECT current_setting('jit')")
	if err != nil {
		t.Fatal(err)
	}
	var after string
	if err := pool.QueryRow(t.Context(), "SHOW jit").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if len(inside) != 1 || inside[0] != "off" || after != "on" {
		t.Errorf("jit inside the batch %v, after it %q; want [off] and on", inside, after)
	}
}

// TestClaimsAndCountsRunWithoutJIT checks that each claim, each pending
// count and PurgeSettled is one such batch (and one round trip).
func TestClaimsAndCountsRunWithoutJIT(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k1"), message("a", "q", "k2"), message("b", "q", "k3"))
	all := f.all
	w := backpressure.PendingWindow{CapPerRoute: 1, Namespaces: 1}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"CountPendingOutboxRows", func() error { _, err := f.s.CountPendingOutboxRows(f.ctx, all, 5); return err }},
		{"CountPendingOutboxRowsWindow", func() error { _, err := f.s.CountPendingOutboxRowsWindow(f.ctx, all, w); return err }},
		{"CountSweep", func() error { _, _, err := f.s.CountSweep(f.ctx, all, w); return err }},
		{"CountSweep (full)", func() error {
			_, _, err := f.s.CountSweep(f.ctx, all, backpressure.PendingWindow{CapPerRoute: 5})
			return err
		}},
		{"ClaimOutboxRowsScoped", func() error {
			_, err := f.s.ClaimOutboxRowsScoped(f.ctx, all, []backpressure.ScopedClaim{claim("a", "q", 1)})
			return err
		}},
		{"ClaimOutboxRowsUnscoped", func() error { _, err := f.s.ClaimOutboxRowsUnscoped(f.ctx, all, 1); return err }},
		{"PurgeSettled", func() error { _, err := f.s.PurgeSettled(f.ctx, f.now, 10); return err }},
	} {
		trips, batches := f.tr.queries.Load(), f.tr.batches.Load()
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if trips, batches = f.tr.queries.Load()-trips, f.tr.batches.Load()-batches; trips != 1 || batches != 1 {
			t.Errorf("%s: %d round trips, %d batches; want one batch, with JIT off", c.name, trips, batches)
		}
	}
}

// TestFailedBatchClaimsNothing fails the claim's batch before it is sent:
// the claim returns the error, nothing is claimed, and the store works on.
func TestFailedBatchClaimsNothing(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k1"))
	f.tr.arm(1)
	_, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 1)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with its batch failed: %v, want an error matching context.Canceled", err)
	}
	if got := f.state("k1"); got != pgstore.StatePending {
		t.Fatalf("k1 is %s after the failed claim, want pending", got)
	}
	rows, err := f.s.ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 1)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim after the failure: %d rows, %v; want 1 row", len(rows), err)
	}
}
