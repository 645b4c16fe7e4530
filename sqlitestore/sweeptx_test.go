package sqlitestore

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// A panic inside InSweepTx's fn, after the view claimed rows, rolls the
// transaction back: the rows are claimable again and the store's one
// writer connection is free for the next write.
func TestSweepTxPanicRollsBack(t *testing.T) {
	for _, path := range []string{":memory:", t.TempDir() + "/outbox.db"} {
		s := openT(t, path, Options{})
		var ms []outbox.Message
		for i := 0; i < 5; i++ {
			ms = append(ms, outbox.Message{DispatchKey: fmt.Sprint("k", i), Namespace: "n", TaskQueue: "q", Payload: []byte("p")})
		}
		if _, err := s.Enqueue(t.Context(), ms); err != nil {
			t.Fatal(err)
		}
		all, _ := backpressure.AllShards(s.ShardCount())
		claims := []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "n", TaskQueue: "q"}, Limit: 5}}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s: the panic in fn did not reach the caller", path)
				}
			}()
			_ = claimerOf(s).InSweepTx(t.Context(), func(tx backpressure.OutboxStore[outbox.Row]) error {
				if rows, err := tx.ClaimOutboxRowsScoped(t.Context(), all, claims); err != nil || len(rows) != 5 {
					t.Errorf("%s: view claim = %d rows, %v", path, len(rows), err)
				}
				panic("fn fails")
			})
		}()
		ctx, cancel := context.WithTimeout(t.Context(), defaultBusyTimeout)
		defer cancel()
		rows, err := claimerOf(s).ClaimOutboxRowsScoped(ctx, all, claims)
		if err != nil || len(rows) != 5 {
			t.Fatalf("%s: after the panic, claim = %d rows, %v; want the 5 rows back and the writer free", path, len(rows), err)
		}
	}
}
