package sqlitestore

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/outbox"
)

type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncBuilder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuilder) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// dispatch.Mux and dispatch.JSON on a real SQLite file: rows are routed by
// task queue and decoded into the handler's type; a row on a task queue
// nobody handles and a payload that does not decode are dead-lettered on
// their first attempt with their error recorded in the file; Run's start
// and stop lines name this store and count what it did.
func TestDispatchMuxAndJSON(t *testing.T) {
	ctx := t.Context()
	s := openT(t, filepath.Join(t.TempDir(), "outbox.db"), Options{})
	type email struct {
		To string `json:"to"`
	}
	msgs := []outbox.Message{
		{DispatchKey: "e-1", Namespace: "acme", TaskQueue: "emails", Payload: []byte(`{"to":"ann@acme.test"}`)},
		{DispatchKey: "e-2", Namespace: "globex", TaskQueue: "emails", Payload: []byte(`{"to":"bob@globex.test"}`)},
		{DispatchKey: "e-3", Namespace: "globex", TaskQueue: "emails", Payload: []byte(`{"to":42}`)},
		{DispatchKey: "i-1", Namespace: "acme", TaskQueue: "invoices", Payload: []byte(`whatever`)},
		{DispatchKey: "s-1", Namespace: "acme", TaskQueue: "sms"},
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var ran []string
	var mux dispatch.Mux
	mux.Handle("emails", dispatch.JSON(func(_ context.Context, row outbox.Row, e email) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, row.DispatchKey+" to "+e.To)
		return nil
	}))
	mux.Handle("invoices", func(_ context.Context, row outbox.Row) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, row.DispatchKey+" billed")
		return nil
	})

	var log syncBuilder
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var handled int
	handle := func(ctx context.Context, row outbox.Row) error {
		err := mux.HandleRow(ctx, row)
		mu.Lock()
		defer mu.Unlock()
		if handled++; handled == len(msgs) {
			stop()
		}
		return err
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 10}, allShards(t, s))
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(bp, s, handle, dispatch.Options{Workers: 4, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a failsafe, never what the test asserts
		t.Fatal("Run did not return")
	}
	if err != nil {
		t.Fatal(err)
	}

	slices.Sort(ran)
	if got, want := fmt.Sprint(ran), "[e-1 to ann@acme.test e-2 to bob@globex.test i-1 billed]"; got != want {
		t.Errorf("handlers ran %s, want %s", got, want)
	}
	for key, want := range map[string]string{
		"e-3": "permanent: dispatch: payload does not decode as JSON into sqlitestore.email: json: cannot unmarshal number into Go struct field email.to of type string",
		"s-1": `permanent: dispatch: no handler for task queue "sms" (namespace "acme")`,
	} {
		row, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if row.State != outbox.StateDead || row.Attempts != 1 || row.LastError != want {
			t.Errorf("%s: %s after %d attempts, last error %q; want dead after 1, %q", key, row.State, row.Attempts, row.LastError, want)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settled != 3 || st.Dead != 2 {
		t.Errorf("stats %+v, want 3 settled and 2 dead", st)
	}
	out := log.String()
	for _, want := range []string{
		`msg="dispatch: run started" workers=4 store=*sqlitestore.Store shards_owned=64 shard_count=64`,
		`msg="dispatch: run stopped" settled=3 retried=0 dead_lettered=2 lease_lost=0 reason="context canceled" clean=true`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}
