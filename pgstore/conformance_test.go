package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/storetest"
)

// TestConformance runs the shared outbox.Store suite, each subtest on a
// fresh store in a schema of its own, with a manual clock and a pool whose
// tracer counts round trips and injects faults. The store implements
// outbox.Store, so the suite defaults everything else from it, reading rows
// back through Get. The WindowClaim area's stores have Options.WindowClaims,
// so that it checks the window claim; every other area runs the default.
// Every area keeps its counts (Options.RecountInterval, off by default), so
// that the suite checks the kept counts' answers too; the store's other
// tests run the default, counts read on every call.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness[outbox.Row] {
		clock := storetest.NewClock()
		tr := &tracer{}
		pool := newPool(t, tr, 12)
		schema := testSchema(t)
		const lease = 30 * time.Second
		s, err := pgstore.New(t.Context(), pool, pgstore.Options{Schema: schema, Lease: lease, Now: clock.Now,
			WindowClaims:    strings.HasPrefix(t.Name(), "TestConformance/WindowClaim/"),
			RecountInterval: pgstore.RecommendedRecountInterval})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return &storetest.Harness[outbox.Row]{
			Outbox:     s,
			Now:        clock.Now,
			Advance:    clock.Advance,
			RoundTrips: tr.queries.Load,
			FailNth:    tr.arm,
			RawSettings: func(ctx context.Context, bodies map[string]string) error {
				return rawSettings(ctx, pool, schema, bodies)
			},
			RawNodeReport: func(ctx context.Context, node, body string, ttl time.Duration) error {
				return rawNodeReport(ctx, pool, schema, clock.Now(), node, body, ttl)
			},
			ErrorPrefix: "pgstore",
		}
	})
}

// rawSettings writes settings rows with bodies verbatim (each must be
// JSON: the column is jsonb), past PutSettings' checks, as an operator's
// SQL would: one statement, one new version for them all.
func rawSettings(ctx context.Context, pool *pgxpool.Pool, schema string, bodies map[string]string) error {
	arg, err := json.Marshal(bodies)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, strings.ReplaceAll(`
WITH c AS (UPDATE {schema}.settings_clock SET version = version + 1 RETURNING version)
INSERT INTO {schema}.namespace_settings (namespace, body, version, updated_at)
SELECT e.key, e.value::jsonb, c.version, now() FROM jsonb_each_text($1::jsonb) e, c
ON CONFLICT (namespace) DO UPDATE SET body = excluded.body, version = excluded.version, updated_at = excluded.updated_at`, "{schema}", schema), string(arg))
	return err
}

// rawNodeReport writes node's report row with body verbatim (JSON), live
// for ttl from now.
func rawNodeReport(ctx context.Context, pool *pgxpool.Pool, schema string, now time.Time, node, body string, ttl time.Duration) error {
	_, err := pool.Exec(ctx, strings.ReplaceAll(`
INSERT INTO {schema}.node_reports (node, body, reported_at, expires_at) VALUES ($1, $2::jsonb, $3, $4)
ON CONFLICT (node) DO UPDATE SET body = excluded.body, reported_at = excluded.reported_at, expires_at = excluded.expires_at`, "{schema}", schema),
		node, body, now, now.Add(ttl))
	return err
}
