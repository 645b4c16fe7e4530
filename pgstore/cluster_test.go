package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

func clusterService(t *testing.T, s *pgstore.Store, h dispatch.Handler) *dispatch.Service {
	t.Helper()
	svc, err := dispatch.NewService(s, h, dispatch.ServiceOptions{
		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 10},
		Options: dispatch.Options{Workers: 4, PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Cluster: s.Cluster(pgstore.MembershipOptions{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// waitFor polls cond; the 60s failsafe is never what a test asserts.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: failsafe passed", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// members counts the membership rows of the nodes named.
func members(t *testing.T, schema string, nodes ...string) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM ` + pgx.Identifier{schema}.Sanitize() + `.members WHERE node = ANY ($1)`
	if err := adminPool.QueryRow(t.Context(), q, nodes).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Two dispatch.Services on one schema through pgstore's Cluster: each
// joins under its own default node name, together they drain the outbox,
// each is ready, and Stop leaves (the membership rows are gone).
func TestServiceCluster(t *testing.T) {
	schema := testSchema(t)
	s, err := pgstore.New(t.Context(), newPool(t, nil, 8), pgstore.Options{Schema: schema, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, 300)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: fmt.Sprintf("k-%d", i), Namespace: fmt.Sprintf("ns-%d", i%5), TaskQueue: "q"}
	}
	if _, err := s.Enqueue(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	h := func(context.Context, outbox.Row) error { handled.Add(1); return nil }
	a, b := clusterService(t, s, h), clusterService(t, s, h)
	for _, svc := range []*dispatch.Service{a, b} {
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := members(t, schema, a.Node(), b.Node()); got != 2 {
		t.Fatalf("%d membership rows for %s and %s, want 2", got, a.Node(), b.Node())
	}
	waitFor(t, "every row settled", func() bool {
		st, err := s.Stats(t.Context())
		return err == nil && st.Settled == len(msgs)
	})
	waitFor(t, "both ready", func() bool { return a.Ready(t.Context()) == nil && b.Ready(t.Context()) == nil })
	for _, svc := range []*dispatch.Service{a, b} {
		if err := svc.Stop(t.Context()); err != nil {
			t.Fatalf("Stop = %v, want nil: a clean stop", err)
		}
	}
	if got := members(t, schema, a.Node(), b.Node()); got != 0 {
		t.Errorf("%d membership rows after Stop, want 0: Stop leaves", got)
	}
	if handled.Load() != int64(len(msgs)) {
		t.Errorf("handled %d rows, want %d", handled.Load(), len(msgs))
	}
}

// Start fails fast on a store it cannot reach: a closed store, and a
// store whose pool was closed; nothing joins.
func TestServiceStartFailsFast(t *testing.T) {
	schema := testSchema(t)
	pool := newPool(t, nil, 2)
	s, err := pgstore.New(t.Context(), pool, pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	svc := clusterService(t, s, func(context.Context, outbox.Row) error { return nil })
	pool.Close()
	if err := svc.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "store unreachable") {
		t.Errorf("Start with the pool closed = %v, want a store-unreachable error", err)
	}
	_ = s.Close()
	if err := svc.Start(t.Context()); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Start on a closed store = %v, want an error matching outbox.ErrClosed", err)
	}
	if got := members(t, schema, svc.Node()); got != 0 {
		t.Errorf("%d membership rows after failed Starts, want 0", got)
	}
}

// Stop's deadline cancels a handler stuck past it, and Stop still leaves.
func TestServiceStopCancelsAndLeaves(t *testing.T) {
	schema := testSchema(t)
	s, err := pgstore.New(t.Context(), newPool(t, nil, 4), pgstore.Options{Schema: schema, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(t.Context(), []outbox.Message{{DispatchKey: "stuck", Namespace: "a", TaskQueue: "q"}}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	svc := clusterService(t, s, func(ctx context.Context, _ outbox.Row) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := svc.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop past its deadline = %v, want one matching context.Canceled", err)
	}
	if got := members(t, schema, svc.Node()); got != 0 {
		t.Errorf("%d membership rows after Stop, want 0", got)
	}
	row, err := s.Get(t.Context(), "stuck")
	if err != nil || row.State != outbox.StatePending {
		t.Errorf("the cancelled row = %+v, %v; want pending (retried)", row, err)
	}
}
