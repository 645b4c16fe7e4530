package oteltrace_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/oteltrace"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"github.com/outboxkit/backpressure/sqlitestore"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// store is what the end-to-end test needs of a store.
type store interface {
	dispatch.Store
	Enqueue(ctx context.Context, msgs []outbox.Message) (int, error)
	ShardCount() int
}

// TestAcrossTheOutboxSQLite and TestAcrossTheOutboxPostgreSQL: a row
// enqueued inside a request's span is run by a dispatcher in a span linked
// to it, through a real store's headers column.
func TestAcrossTheOutboxSQLite(t *testing.T) {
	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acrossTheOutbox(t, s)
}

func TestAcrossTheOutboxPostgreSQL(t *testing.T) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "oteltrace_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	s, err := pgstore.Open(ctx, url, pgstore.Options{Schema: schema})
	cancel()
	if err != nil {
		if os.Getenv("PGSTORE_REQUIRE") == "1" {
			t.Fatalf("PostgreSQL is required (PGSTORE_REQUIRE=1): %v", err)
		}
		t.Skipf("PostgreSQL not reachable (%v): set TEST_DATABASE_URL to run this test", err)
	}
	defer func() {
		conn, err := pgx.Connect(context.Background(), url)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(context.Background())
		}
	}()
	defer s.Close()
	acrossTheOutbox(t, s)
}

func acrossTheOutbox(t *testing.T, s store) {
	tp, rec, ctx, pspan := producer(t)
	msg, err := outbox.NewMessage("acme", "order/1", fulfil{ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, []outbox.Message{oteltrace.Inject(ctx, msg)}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan trace.SpanContext, 1)
	h := oteltrace.Handler(func(ctx context.Context, row outbox.Row) error {
		ran <- trace.SpanContextFromContext(ctx)
		return nil
	}, oteltrace.WithTracerProvider(tp))
	svc, err := dispatch.NewService(s, h, dispatch.ServiceOptions{
		Planner: backpressure.Config{BatchSize: 10, DefaultQuota: backpressure.Unlimited},
		Options: dispatch.Options{Workers: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got trace.SpanContext
	select {
	case got = <-ran:
	case <-time.After(time.Minute): // a failsafe, not an assertion
		t.Fatal("the row did not run")
	}
	if err := svc.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	var process *tracetest.SpanStub
	for _, s := range tracetest.SpanStubsFromReadOnlySpans(rec.Ended()) {
		if s.SpanContext.SpanID() == got.SpanID() {
			process = &s
		}
	}
	switch {
	case process == nil:
		t.Fatal("the handler's span was not ended")
	case process.Name != "process fulfil" || process.Parent.IsValid():
		t.Errorf("span %q with parent %v, want a root \"process fulfil\"", process.Name, process.Parent)
	case len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != pspan.SpanContext().SpanID() ||
		process.Links[0].SpanContext.TraceID() != pspan.SpanContext().TraceID():
		t.Errorf("links %v, want one to the request's span %v", process.Links, pspan.SpanContext())
	}
}

type fulfil struct {
	ID string `json:"id"`
}

func (fulfil) TaskQueue() string { return "fulfil" }
