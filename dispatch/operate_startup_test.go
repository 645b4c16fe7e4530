package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// flakySettings is an outbox.Operator whose settings cannot be read until
// failures reads have failed: the store is down at a node's start-up. Its
// one setting pauses namespace "p".
type flakySettings struct {
	outbox.Operator
	mu       sync.Mutex
	failures int
	reads    int
}

var errSettingsDown = errors.New("settings store down")

func (f *flakySettings) SettingsVersion(ctx context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads < f.failures {
		f.reads++
		return 0, errSettingsDown
	}
	return 1, nil
}

func (f *flakySettings) ListSettings(ctx context.Context) ([]outbox.NamespaceSettings, error) {
	return []outbox.NamespaceSettings{{Namespace: "p", Paused: true, Version: 1}}, nil
}

// TestSettingsUnreadableAtStartHoldEverything checks the start-up half of
// "a setting that cannot be read never loosens a limit": a node whose
// shared settings cannot be read when Run starts claims nothing until it
// has read them, so the pause of p applies to p's very first rows. Before,
// the node swept on the code's configuration and ran p's rows while the
// store was down.
func TestSettingsUnreadableAtStartHoldEverything(t *testing.T) {
	s := newStore(t, memstore.Options{})
	msgs := []outbox.Message{{Namespace: "q", DispatchKey: "q-1", Payload: []byte("x")}}
	for _, k := range []string{"p-1", "p-2", "p-3", "p-4", "p-5"} {
		msgs = append(msgs, outbox.Message{Namespace: "p", DispatchKey: k, Payload: []byte("x")})
	}
	if _, err := s.Enqueue(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	bp := newBP(t, 10, 10, nil)
	var mu sync.Mutex
	ran := map[string]int{}
	handler := func(_ context.Context, row outbox.Row) error {
		mu.Lock()
		defer mu.Unlock()
		ran[row.Namespace]++
		return nil
	}
	op := &flakySettings{failures: 3}
	rec := newRecorder()
	d, err := dispatch.New(bp, s, handler, dispatch.Options{
		Workers:      4,
		PollInterval: 20 * time.Millisecond,
		ErrorBackoff: dispatch.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		Logger:       quietLogger(),
		Metrics:      rec,
		Operate:      &dispatch.Operate{Node: "n", Store: op, SharedSettings: true, SettingsInterval: 10 * time.Millisecond, ReportInterval: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, d)
	waitFor(t, "q's row runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["q"] == 1
	}, rec)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["p"] != 0 {
		t.Fatalf("paused namespace p ran %d rows while the settings could not be read at start-up", ran["p"])
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.reads < op.failures {
		t.Fatalf("settings read %d times, want at least %d", op.reads, op.failures)
	}
}
