package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
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

func (f *fixture) enqueue(msgs ...outbox.Message) {
	f.t.Helper()
	if _, err := f.s.Enqueue(f.ctx, msgs); err != nil {
		f.t.Fatalf("Enqueue: %v", err)
	}
}

func (f *fixture) state(key string) outbox.State {
	f.t.Helper()
	r, err := f.s.Get(f.ctx, key)
	if err != nil {
		f.t.Fatalf("Get(%q): %v", key, err)
	}
	return r.State
}

func message(ns, tq, key string) outbox.Message {
	return outbox.Message{DispatchKey: key, Namespace: ns, TaskQueue: tq, Payload: []byte(key)}
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
		{pgstore.Options{Schema: "Upper"}, "Options.Schema"},
		{pgstore.Options{Schema: "a;drop table x"}, "Options.Schema"},
		{pgstore.Options{Schema: `a"b`}, "Options.Schema"},
		{pgstore.Options{Schema: "1abc"}, "Options.Schema"},
		{pgstore.Options{Schema: "pg_mine"}, "Options.Schema"},
		{pgstore.Options{Schema: "pg_catalog"}, "Options.Schema"},
		{pgstore.Options{Schema: "information_schema"}, "Options.Schema"},
		{pgstore.Options{Schema: strings.Repeat("a", 64)}, "Options.Schema"},
		{pgstore.Options{ShardCount: -1}, "Options.ShardCount"},
		{pgstore.Options{ShardCount: 1 << 31}, "Options.ShardCount"},
		{pgstore.Options{Schema: testSchema(t), ShardCount: backpressure.MaxShardCount + 1}, "Options.ShardCount"},
		{pgstore.Options{Lease: -time.Second}, "Options.Lease"},
		{pgstore.Options{Lease: time.Nanosecond}, "Options.Lease"},
		{pgstore.Options{Lease: time.Microsecond}, "Options.Lease"},
		{pgstore.Options{Lease: outbox.MinLease - time.Microsecond}, "Options.Lease"},
		{pgstore.Options{MaxAttempts: -1}, "Options.MaxAttempts"},
		{pgstore.Options{MaxAttempts: outbox.MaxAttemptsLimit + 1}, "Options.MaxAttempts"},
		{pgstore.Options{Lease: outbox.MaxLease + time.Microsecond}, "Options.Lease"},
		{pgstore.Options{Lease: math.MaxInt64}, "Options.Lease"},
	} {
		s, err := pgstore.New(t.Context(), pool, c.opts)
		var oe *outbox.ArgumentError
		if s != nil || !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &oe) || oe.Arg != c.field || oe.Op != "New" {
			t.Errorf("step %d: New(%+v) = %v, %v; want an *outbox.ArgumentError for %s", i, c.opts, s, err, c.field)
		}
	}
	if _, err := pgstore.New(t.Context(), nil, pgstore.Options{}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("New(nil pool) = %v, want ErrInvalidOptions", err)
	}
	if _, err := pgstore.Open(t.Context(), "::not a url::", pgstore.Options{}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("Open(bad URL) = %v, want ErrInvalidOptions", err)
	}
}

// A shard count above backpressure.MaxShardCount recorded in the schema
// (older versions let New record one) is refused by New: no owned-shard
// fraction, so no membership, could describe it.
func TestNewRefusesRecordedShardCountAboveMax(t *testing.T) {
	schema := testSchema(t)
	if _, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema, ShardCount: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPool.Exec(t.Context(), `UPDATE `+pgx.Identifier{schema}.Sanitize()+`.settings SET shard_count = $1`, backpressure.MaxShardCount+1); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema})
	var se *backpressure.ShardError
	if s != nil || !errors.Is(err, backpressure.ErrInvalidShards) || !errors.As(err, &se) || se.ShardCount != backpressure.MaxShardCount+1 {
		t.Errorf("New over a schema recording %d shards: store %t, err %v; want no store and a *backpressure.ShardError", backpressure.MaxShardCount+1, s != nil, err)
	}
}

func TestDefaults(t *testing.T) {
	schema := testSchema(t)
	s, err := pgstore.New(t.Context(), adminPool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if s.Schema() != schema || s.ShardCount() != pgstore.DefaultShardCount || s.Lease() != outbox.DefaultLease {
		t.Errorf("store = %s/%d/%v, want %s/%d/%v", s.Schema(), s.ShardCount(), s.Lease(), schema, pgstore.DefaultShardCount, outbox.DefaultLease)
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
	var ve *outbox.SchemaVersionError
	if !errors.Is(err, outbox.ErrSchemaTooNew) || !errors.As(err, &ve) || ve.Database != pgstore.SchemaVersion+1 || ve.Package != pgstore.SchemaVersion {
		t.Errorf("New on a newer schema = %v, want a *SchemaVersionError", err)
	}
}

// TestSchemasAreIsolated: two stores in two schemas of one database share
// nothing, not even dedup.
func TestSchemasAreIsolated(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	a.enqueue(message("acme", "q", "k"))
	if n, err := b.s.Enqueue(b.ctx, []outbox.Message{message("acme", "q", "k")}); err != nil || n != 1 {
		t.Errorf("Enqueue of the same key in another schema = %d, %v; want 1, nil", n, err)
	}
	rows, err := claimerOf(a.s).ClaimOutboxRowsScoped(a.ctx, a.all, []backpressure.ScopedClaim{claim("acme", "q", 10)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim in schema a = %v, %v; want one row", rows, err)
	}
	if c, err := claimerOf(b.s).CountClaimedOutboxRows(b.ctx, b.all); err != nil || len(c) != 0 {
		t.Errorf("claimed in schema b after a claim in schema a = %v, %v; want none", c, err)
	}
}

func TestInvalidInputTouchesNothing(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("acme", "q", "k"))
	before := f.tr.queries.Load()
	for i, call := range []func() error{
		func() error { _, err := f.s.Enqueue(f.ctx, []outbox.Message{message("acme", "q", "")}); return err },
		func() error { _, err := f.s.Enqueue(f.ctx, []outbox.Message{message("", "q", "k2")}); return err },
		func() error {
			_, err := f.s.Enqueue(f.ctx, []outbox.Message{message("acme", "q\x00", "k2")})
			return err
		},
		func() error {
			_, err := f.s.Enqueue(f.ctx, []outbox.Message{message("acme", "q", "k\xff")})
			return err
		},
		func() error {
			_, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", -1)})
			return err
		},
		func() error {
			_, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1), claim("acme", "q", 1)})
			return err
		},
		func() error { _, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, f.all, -1); return err },
		func() error { _, err := claimerOf(f.s).CountPendingOutboxRows(f.ctx, f.all, 0); return err },
		func() error { return f.s.Retry(f.ctx, outbox.Lease{DispatchKey: "k", Token: 1}, -time.Second, nil) },
		func() error { return f.s.Settle(f.ctx, outbox.Lease{}) },
		func() error {
			_, err := f.s.Complete(f.ctx, []outbox.Completion{{Lease: outbox.Lease{DispatchKey: "k", Token: 1}}})
			return err
		},
		func() error {
			_, err := f.s.Complete(f.ctx, []outbox.Completion{
				{Lease: outbox.Lease{DispatchKey: "k", Token: 1}, Outcome: outbox.Settle},
				{Lease: outbox.Lease{DispatchKey: "k", Token: 1}, Outcome: outbox.Retry},
			})
			return err
		},
		func() error {
			_, err := f.s.ExtendLeases(f.ctx, []outbox.Lease{{DispatchKey: "k", Token: 1}, {DispatchKey: "k", Token: 2}})
			return err
		},
		func() error { _, err := f.s.ListDead(f.ctx, outbox.ListDeadParams{Limit: -1}); return err },
		func() error { _, err := f.s.ListDead(f.ctx, outbox.ListDeadParams{Limit: 10_001}); return err },
		func() error { _, err := f.s.Requeue(f.ctx, []string{"k", ""}); return err },
		func() error { _, err := f.s.PurgeDead(f.ctx, f.now, -1); return err },
		func() error { _, err := f.s.PurgeSettled(f.ctx, f.now, -1); return err },
	} {
		err := call()
		var (
			ie *outbox.ArgumentError
			me *outbox.MessageError
		)
		if !errors.Is(err, outbox.ErrInvalidArgument) || !(errors.As(err, &ie) || errors.As(err, &me)) {
			t.Errorf("step %d: error %v, want a pgstore *ArgumentError", i, err)
		}
	}
	if n := f.tr.queries.Load() - before; n != 0 {
		t.Errorf("rejected calls made %d round trips, want 0", n)
	}
	if st := f.state("k"); st != outbox.StatePending {
		t.Errorf("row k is %s after rejected calls, want pending", st)
	}
}

func TestNotFoundAndLeaseLost(t *testing.T) {
	f := newFixture(t)
	// An unknown key has no live lease: the completion is reported lost,
	// as for a purged row.
	if err := f.s.Settle(f.ctx, outbox.Lease{DispatchKey: "nope", Token: 1}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle(unknown key) = %v, want ErrLeaseLost", err)
	}
	if err := f.s.Retry(f.ctx, outbox.Lease{DispatchKey: "nope", Token: 1}, 0, nil); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Retry(unknown key) = %v, want ErrLeaseLost", err)
	}
	if _, err := f.s.Get(f.ctx, "nope"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get(unknown key) = %v, want ErrNotFound", err)
	}
	f.enqueue(message("acme", "q", "k"))
	err := f.s.Settle(f.ctx, outbox.Lease{DispatchKey: "k"}) // pending: no claim to settle
	var le *outbox.LeaseLostError
	if !errors.Is(err, outbox.ErrLeaseLost) || !errors.As(err, &le) || le.DispatchKey != "k" || le.Op != "Settle" {
		t.Errorf("Settle(pending row) = %v, want a *LeaseLostError for k", err)
	}
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim = %v, %v", rows, err)
	}
	// The lease ends at ClaimedAt + Lease exactly: a settle then is too late,
	// even though no other claimer has taken the row yet.
	f.now = rows[0].LeaseExpiresAt
	if err := f.s.Settle(f.ctx, rows[0].Lease()); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("Settle at lease expiry = %v, want ErrLeaseLost", err)
	}
}

func TestGetAndAttempts(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("acme", "q", "k"))
	row, err := f.s.Get(f.ctx, "k")
	st := row.State
	if err != nil || st != outbox.StatePending || row.Attempts != 0 || row.Token != 0 || !row.ClaimedAt.IsZero() ||
		row.Shard != backpressure.ShardFor("k", f.s.ShardCount()) || !row.EnqueuedAt.Equal(f.now) || string(row.Payload) != "k" {
		t.Fatalf("Get(new row) = %+v, %s, %v", row, st, err)
	}
	var tokens []int64
	for attempt := 1; attempt <= 3; attempt++ {
		rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("acme", "q", 1)})
		if err != nil || len(rows) != 1 {
			t.Fatalf("attempt %d: claim = %v, %v", attempt, rows, err)
		}
		r := rows[0]
		if r.Attempts != attempt || !r.ClaimedAt.Equal(f.now) || !r.LeaseExpiresAt.Equal(f.now.Add(outbox.DefaultLease)) {
			t.Errorf("attempt %d: claimed row %+v", attempt, r)
		}
		tokens = append(tokens, r.Token)
		if err := f.s.Retry(f.ctx, r.Lease(), time.Second, nil); err != nil {
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
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, claims)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "P0001" || len(rows) != 0 {
		t.Fatalf("claim with a poisoned row = %d rows, %v; want the trigger's error", len(rows), err)
	}
	if c, err := claimerOf(f.s).CountClaimedOutboxRows(f.ctx, f.all); err != nil || len(c) != 0 {
		t.Errorf("claimed after the failed claim = %v, %v; want none", c, err)
	}
	var touched int
	if err := adminPool.QueryRow(f.ctx, `SELECT count(*) FROM `+q+`.outbox WHERE state <> 'pending' OR attempts <> 0 OR token <> 0`).Scan(&touched); err != nil || touched != 0 {
		t.Errorf("%d rows touched by the failed claim (%v), want 0", touched, err)
	}
	if _, err := adminPool.Exec(f.ctx, `DROP TRIGGER poison ON `+q+`.outbox`); err != nil {
		t.Fatal(err)
	}
	if rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, claims); err != nil || len(rows) != 16 {
		t.Errorf("claim without the trigger = %d rows, %v; want 16", len(rows), err)
	}
}

// A batch is claimed in the order it was given, not in key order, and
// rows come back grouped by claim in the claims' order; a Limit of 0 is
// refused (the contract of backpressure.OutboxStore), claiming nothing.
func TestClaimOrderAndZeroLimit(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k3"), message("a", "q", "k1"), message("a", "q", "k2"), message("b", "q", "b1"))
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("b", "q", 5), claim("c", "q", 1), claim("a", "q", 2)})
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
	rows, err = claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 1), claim("b", "q", 0)})
	var ae *outbox.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "claims[1].Limit" || rows != nil {
		t.Errorf("claim with a zero limit = %v, %v; want an *outbox.ArgumentError on claims[1].Limit", rows, err)
	}
	if st := f.state("k2"); st != outbox.StatePending {
		t.Errorf("k2 is %s after the refused claim, want pending", st)
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
	rows, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, even, 5)
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
	if _, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, other, 5); !errors.Is(err, outbox.ErrShardCountMismatch) {
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
	if _, err := s.Enqueue(t.Context(), []outbox.Message{message("a", "q", "k")}); err != nil {
		t.Fatal(err)
	}
	rows, err := claimerOf(s).ClaimOutboxRowsScoped(t.Context(), all, []backpressure.ScopedClaim{claim("a", "q", 1)})
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
	if err := s.Settle(t.Context(), r.Lease()); err != nil {
		t.Errorf("Settle: %v", err)
	}
}

func TestPurgeSettled(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 5; i++ {
		f.enqueue(message("a", "q", fmt.Sprintf("k%d", i)))
	}
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 3)})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		f.now = f.now.Add(time.Second)
		if err := f.s.Settle(f.ctx, r.Lease()); err != nil {
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
	if _, err := f.s.Get(f.ctx, rows[0].DispatchKey); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Get(purged) = %v, want ErrNotFound", err)
	}
	if st := f.state(rows[2].DispatchKey); st != outbox.StateSettled {
		t.Errorf("row settled at the cut is %s, want kept settled", st)
	}
	if st := f.state("k4"); st != outbox.StatePending {
		t.Errorf("pending row is %s after purges, want pending", st)
	}
}

func TestClosedAndContexts(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k"))
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	before := f.tr.queries.Load()
	calls := storeCalls(f.s, f.all, f.now)
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
		if err := call(f.ctx); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	// A nil and a zero store fail the same way, and never panic.
	for _, z := range []*pgstore.Store{nil, {}} {
		for name, call := range storeCalls(z, f.all, f.now) {
			if err := call(f.ctx); !errors.Is(err, outbox.ErrClosed) {
				t.Errorf("%s on a %s store = %v, want ErrClosed", name, zeroName(z), err)
			}
		}
		if err := z.Close(); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("Close on a %s store = %v, want ErrClosed", zeroName(z), err)
		}
		if z.ShardCount() != 0 || z.Lease() != 0 || z.Schema() != "" {
			t.Errorf("a %s store reports %d shards, lease %v, schema %q; want zeros", zeroName(z), z.ShardCount(), z.Lease(), z.Schema())
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
	if _, err := s.Enqueue(t.Context(), []outbox.Message{message("a", "q", "k")}); err != nil {
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
	w := backpressure.CountParams{CapPerRoute: 1, Namespaces: 1}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"CountPendingOutboxRows", func() error { _, err := claimerOf(f.s).CountPendingOutboxRows(f.ctx, all, 5); return err }},
		{"CountOutboxRows (window)", func() error { _, err := pendingOf(claimerOf(f.s).CountOutboxRows(f.ctx, all, w)); return err }},
		{"CountOutboxRows (window, claimed)", func() error { _, _, err := claimerOf(f.s).CountOutboxRows(f.ctx, all, withClaimed(w)); return err }},
		{"CountOutboxRows (claimed)", func() error {
			_, _, err := claimerOf(f.s).CountOutboxRows(f.ctx, all, withClaimed(backpressure.CountParams{CapPerRoute: 5}))
			return err
		}},
		{"ClaimOutboxRowsScoped", func() error {
			_, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, all, []backpressure.ScopedClaim{claim("a", "q", 1)})
			return err
		}},
		{"ClaimOutboxRowsUnscoped", func() error { _, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, all, 1); return err }},
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
	_, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 1)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with its batch failed: %v, want an error matching context.Canceled", err)
	}
	if got := f.state("k1"); got != outbox.StatePending {
		t.Fatalf("k1 is %s after the failed claim, want pending", got)
	}
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", 1)})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim after the failure: %d rows, %v; want 1 row", len(rows), err)
	}
}

func zeroName(s *pgstore.Store) string {
	if s == nil {
		return "nil"
	}
	return "zero"
}

// storeCalls calls every method of s that takes a context, each with valid
// arguments.
func storeCalls(s *pgstore.Store, all backpressure.OwnedShardFraction, now time.Time) map[string]func(context.Context) error {
	lease := outbox.Lease{DispatchKey: "k", Token: 1}
	return map[string]func(context.Context) error{
		"Enqueue": func(ctx context.Context) error {
			_, err := s.Enqueue(ctx, []outbox.Message{message("a", "q", "k2")})
			return err
		},
		"EnqueueTx": func(ctx context.Context) error {
			tx, err := adminPool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background())
			_, err = s.EnqueueTx(ctx, tx, []outbox.Message{message("a", "q", "k2")})
			return err
		},
		"Settle": func(ctx context.Context) error { return s.Settle(ctx, lease) },
		"Retry":  func(ctx context.Context) error { return s.Retry(ctx, lease, 0, nil) },
		"Complete": func(ctx context.Context) error {
			_, err := s.Complete(ctx, []outbox.Completion{{Lease: lease, Outcome: outbox.DeadLetter}})
			return err
		},
		"ExtendLeases": func(ctx context.Context) error { _, err := s.ExtendLeases(ctx, []outbox.Lease{lease}); return err },
		"Get":          func(ctx context.Context) error { _, err := s.Get(ctx, "k"); return err },
		"Stats":        func(ctx context.Context) error { _, err := s.Stats(ctx); return err },
		"ListDead":     func(ctx context.Context) error { _, err := s.ListDead(ctx, outbox.ListDeadParams{}); return err },
		"Requeue":      func(ctx context.Context) error { _, err := s.Requeue(ctx, []string{"k"}); return err },
		"Subscribe":    func(ctx context.Context) error { _, err := s.Subscribe(ctx); return err },
		"CountClaimed": func(ctx context.Context) error { _, err := claimerOf(s).CountClaimedOutboxRows(ctx, all); return err },
		"CountPending": func(ctx context.Context) error {
			_, err := claimerOf(s).CountPendingOutboxRows(ctx, all, 1)
			return err
		},
		"CountOutboxRows (claimed)": func(ctx context.Context) error {
			_, _, err := claimerOf(s).CountOutboxRows(ctx, all, withClaimed(backpressure.CountParams{CapPerRoute: 1}))
			return err
		},
		"Window": func(ctx context.Context) error {
			_, err := pendingOf(claimerOf(s).CountOutboxRows(ctx, all, backpressure.CountParams{CapPerRoute: 1, Namespaces: 1}))
			return err
		},
		"Scoped": func(ctx context.Context) error {
			_, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{claim("a", "q", 1)})
			return err
		},
		"Unscoped": func(ctx context.Context) error {
			_, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, all, 1)
			return err
		},
		"PurgeSettled": func(ctx context.Context) error { _, err := s.PurgeSettled(ctx, now, 1); return err },
		"PurgeDead":    func(ctx context.Context) error { _, err := s.PurgeDead(ctx, now, 1); return err },
		"Sweep": func(ctx context.Context) error {
			bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 10}, all)
			if err != nil {
				return err
			}
			_, _, err = backpressure.Sweep(ctx, bp, s.Claimer())
			return err
		},
	}
}
