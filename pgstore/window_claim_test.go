package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// A Membership's store resolves window claims with the fenced statement:
// it claims while the node holds its shards under a live lease, and
// nothing once its ownership leases lapsed, though its own view still
// lists the shards.
func TestWindowClaimFenced(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s, err := pgstore.New(ctx, newPool(t, nil, 4), pgstore.Options{Schema: schema, Lease: 30 * time.Second, WindowClaims: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	all, err := backpressure.AllShards(s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 30 {
		msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("k%02d", i), Namespace: fmt.Sprintf("ns%d", i%3), TaskQueue: "q"})
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	const lease = 300 * time.Millisecond
	a, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a", Lease: lease, Heartbeat: lease / 4})
	if err != nil {
		t.Fatalf("Join a: %v", err)
	}
	wc := a.Store().Claimer().(interface {
		ClaimOutboxWindow(context.Context, backpressure.OwnedShardFraction, backpressure.CountParams, []string, map[string]string) ([]outbox.Row, []backpressure.RouteCount, error)
	})
	w := backpressure.CountParams{After: "ns0", Namespaces: 2}
	rows, grants, err := wc.ClaimOutboxWindow(ctx, all, w, nil, nil)
	if err != nil || len(rows) != 2 || len(grants) != 2 || grants[0].Route.Namespace != "ns1" || grants[1].Route.Namespace != "ns2" {
		t.Fatalf("a's window claim after ns0 = %d rows, %v, %v; want one each of ns1 and ns2", len(rows), grants, err)
	}
	if rows[0].DispatchKey != "k01" || rows[1].DispatchKey != "k02" {
		t.Errorf("a's window claim took %s and %s, want the oldest of each, k01 and k02", rows[0].DispatchKey, rows[1].DispatchKey)
	}
	waitLeasesLapse(t, schema, "a")
	if rows, grants, err := wc.ClaimOutboxWindow(ctx, all, w, nil, nil); err != nil || len(rows) != 0 || len(grants) != 0 {
		t.Fatalf("a's window claim with its leases lapsed = %d rows, %v, %v; want none", len(rows), grants, err)
	}
}
