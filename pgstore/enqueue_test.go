package pgstore_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// TestEnqueueFirstDuplicateWins: within one batch, the first copy of a
// dispatch key is the one inserted, whatever the keys' order, and inserted
// counts each key once.
func TestEnqueueFirstDuplicateWins(t *testing.T) {
	f := newFixture(t)
	const keys = 500
	var msgs []outbox.Message
	for c := 0; c < 3; c++ { // three copies of every key, the first at the front
		for i := 0; i < keys; i++ {
			k := fmt.Sprintf("k%04d", (i*7+c)%keys)
			msgs = append(msgs, outbox.Message{DispatchKey: k, Namespace: fmt.Sprintf("copy%d", c), TaskQueue: "q", Payload: []byte(fmt.Sprint(c))})
		}
	}
	// A key already in the outbox still wins over every copy in the batch.
	f.enqueue(outbox.Message{DispatchKey: "old", Namespace: "before", TaskQueue: "q"})
	msgs = append(msgs, message("copy9", "q", "old"))
	n, err := f.s.Enqueue(f.ctx, msgs)
	if err != nil || n != keys {
		t.Fatalf("Enqueue of %d keys, three copies each = %d, %v; want %d", keys, n, err, keys)
	}
	var total, firsts, payloads int
	if err := adminPool.QueryRow(f.ctx, `SELECT count(*), count(*) FILTER (WHERE namespace = 'copy0'), count(*) FILTER (WHERE payload = '\x30')
FROM `+pgx.Identifier{f.schema}.Sanitize()+`.outbox WHERE dispatch_key <> 'old'`).Scan(&total, &firsts, &payloads); err != nil {
		t.Fatal(err)
	}
	if total != keys || firsts != keys || payloads != keys {
		t.Errorf("%d rows, %d of them the first copy by namespace and %d by payload; want %d of each", total, firsts, payloads, keys)
	}
	if r, err := f.s.Get(f.ctx, "old"); err != nil || r.Namespace != "before" {
		t.Errorf("Get(old) = %+v, %v; want the row enqueued before the batch", r, err)
	}
	// The batch is claimed in the order its first copies were given.
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("copy0", "q", 3)})
	if err != nil || len(rows) != 3 || rows[0].DispatchKey != "k0000" || rows[1].DispatchKey != "k0007" || rows[2].DispatchKey != "k0014" {
		t.Errorf("claim of the oldest three = %v, %v; want k0000 k0007 k0014", rows, err)
	}
}

// TestLargeLimitsAndBadKeys: limits beyond a PostgreSQL integer work (they
// just claim everything there is), and keys no row can have are rejected
// as typed argument errors before touching the database, as Enqueue does.
func TestLargeLimitsAndBadKeys(t *testing.T) {
	f := newFixture(t)
	f.enqueue(message("a", "q", "k1"), message("a", "q", "k2"), message("b", "q", "k3"))
	rows, err := claimerOf(f.s).ClaimOutboxRowsScoped(f.ctx, f.all, []backpressure.ScopedClaim{claim("a", "q", math.MaxInt32+1), claim("b", "q", math.MaxInt)})
	if err != nil || len(rows) != 3 {
		t.Errorf("claim with limits ≥ 2^31 = %d rows, %v; want all 3", len(rows), err)
	}
	f.now = f.now.Add(outbox.DefaultLease)
	if rows, err := claimerOf(f.s).ClaimOutboxRowsUnscoped(f.ctx, f.all, math.MaxInt); err != nil || len(rows) != 3 {
		t.Errorf("unscoped claim with limit MaxInt = %d rows, %v; want all 3", len(rows), err)
	}
	if n, err := f.s.PurgeSettled(f.ctx, f.now, math.MaxInt); err != nil || n != 0 {
		t.Errorf("PurgeSettled with limit MaxInt = %d, %v; want 0", n, err)
	}

	before := f.tr.queries.Load()
	for _, key := range []string{"", "k\xff", "k\x00"} {
		for name, call := range map[string]func() error{
			"Settle": func() error { return f.s.Settle(f.ctx, outbox.Lease{DispatchKey: key, Token: 1}) },
			"Retry":  func() error { return f.s.Retry(f.ctx, outbox.Lease{DispatchKey: key, Token: 1}, time.Second, nil) },
			"Get":    func() error { _, err := f.s.Get(f.ctx, key); return err },
		} {
			err := call()
			var ae *outbox.ArgumentError
			if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ae) || ae.Op != name || !strings.HasSuffix(ae.Arg, "ispatchKey") {
				t.Errorf("%s(%q) = %v, want an *ArgumentError for dispatchKey", name, key, err)
			}
		}
	}
	if n := f.tr.queries.Load() - before; n != 0 {
		t.Errorf("rejected calls made %d round trips, want 0", n)
	}
}
