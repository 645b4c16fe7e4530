package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestCrash runs a dispatcher in a child process on PostgreSQL and
// SIGKILLs it repeatedly while rows arrive: every row is settled exactly
// once, none lost. The schema's name comes from the test's directory,
// which the parent and every child share.
func TestCrash(t *testing.T) {
	var schema string
	dispatchtest.Crash{
		Open: func(ctx context.Context, dir string) (outbox.Store, error) {
			sum := sha256.Sum256([]byte(dir))
			schema = "pgstore_crash_" + hex.EncodeToString(sum[:6])
			return pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: schema, Lease: time.Second})
		},
	}.Run(t)
	if !dispatchtest.IsChild() && schema != "" {
		if _, err := adminPool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	}
}
