package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// eventually polls cond until it holds; failsafe bounds the wait and is
// never what a test asserts.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failsafe)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: failsafe passed", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func serviceOptions(workers int) dispatch.ServiceOptions {
	return dispatch.ServiceOptions{
		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 10},
		Options: dispatch.Options{Workers: workers, PollInterval: 10 * time.Millisecond, Logger: quietLogger()},
	}
}

func TestNewServiceRefusesBadOptions(t *testing.T) {
	store := newStore(t, memstore.Options{})
	ok := func(context.Context, outbox.Row) error { return nil }
	for _, c := range []struct {
		name  string
		build func() error
		field string
	}{
		{"nil store", func() error { _, err := dispatch.NewService(nil, ok, serviceOptions(1)); return err }, "store"},
		{"nil handler", func() error { _, err := dispatch.NewService(store, nil, serviceOptions(1)); return err }, "handler"},
		{"no workers", func() error { _, err := dispatch.NewService(store, ok, serviceOptions(0)); return err }, "Workers"},
		{"negative LiveTimeout", func() error {
			o := serviceOptions(1)
			o.LiveTimeout = -1
			_, err := dispatch.NewService(store, ok, o)
			return err
		}, "LiveTimeout"},
	} {
		var oe *dispatch.OptionError
		if err := c.build(); !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, dispatch.ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want an *OptionError on %s", c.name, err, c.field)
		}
	}
	o := serviceOptions(1)
	o.Planner.BatchSize = 0
	if _, err := dispatch.NewService(store, ok, o); !errors.Is(err, backpressure.ErrInvalidConfig) {
		t.Errorf("BatchSize 0: err = %v, want one matching backpressure.ErrInvalidConfig", err)
	}
}

// Start pings the store first: a closed store fails it at once, with the
// store's error, and nothing runs.
func TestServiceStartFailsFastOnAClosedStore(t *testing.T) {
	store := newStore(t, memstore.Options{})
	svc, err := dispatch.NewService(store, func(context.Context, outbox.Row) error { return nil }, serviceOptions(1))
	require.NoError(t, err)
	require.NoError(t, store.Close())
	if err := svc.Start(t.Context()); !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Start on a closed store = %v, want an error matching outbox.ErrClosed", err)
	}
	if err := svc.Stop(t.Context()); !errors.Is(err, dispatch.ErrServiceNotStarted) {
		t.Errorf("Stop after a failed Start = %v, want ErrServiceNotStarted", err)
	}
	if err := svc.Ready(t.Context()); !errors.Is(err, dispatch.ErrNotReady) {
		t.Errorf("Ready after a failed Start = %v, want ErrNotReady", err)
	}
}

// A service drains the outbox, is ready while it runs, and stops cleanly.
func TestServiceDrainsAndStops(t *testing.T) {
	store := newStore(t, memstore.Options{})
	enqueue(t, store, "k", 50, 3)
	var handled atomic.Int64
	svc, err := dispatch.NewService(store, func(context.Context, outbox.Row) error { handled.Add(1); return nil }, serviceOptions(4))
	require.NoError(t, err)
	if err := svc.Ready(t.Context()); !errors.Is(err, dispatch.ErrNotReady) {
		t.Errorf("Ready before Start = %v, want ErrNotReady", err)
	}
	require.NoError(t, svc.Start(t.Context()))
	if err := svc.Start(t.Context()); !errors.Is(err, dispatch.ErrServiceStarted) {
		t.Errorf("a second Start = %v, want ErrServiceStarted", err)
	}
	eventually(t, "every row settled", func() bool {
		st, err := store.Stats(t.Context())
		return err == nil && st.Settled == 50
	})
	eventually(t, "ready", func() bool { return svc.Ready(t.Context()) == nil })
	require.NoError(t, svc.Live())
	require.NotNil(t, svc.Backpressure())
	require.NoError(t, svc.Stop(t.Context()))
	require.EqualValues(t, 50, handled.Load())
	if err := svc.Ready(t.Context()); !errors.Is(err, dispatch.ErrNotReady) {
		t.Errorf("Ready after Stop = %v, want ErrNotReady", err)
	}
	// It may start again.
	require.NoError(t, svc.Start(t.Context()))
	require.NoError(t, svc.Stop(t.Context()))
}

// Stop's deadline cancels a handler stuck past it: Stop returns once the
// handler has returned on its cancelled ctx, with an error saying so.
func TestServiceStopCancelsHandlersPastItsDeadline(t *testing.T) {
	store := newStore(t, memstore.Options{})
	enqueue(t, store, "stuck", 1, 1)
	started := make(chan struct{})
	var sawCancel atomic.Bool
	svc, err := dispatch.NewService(store, func(ctx context.Context, row outbox.Row) error {
		close(started)
		<-ctx.Done()
		sawCancel.Store(true)
		return ctx.Err()
	}, serviceOptions(2))
	require.NoError(t, err)
	require.NoError(t, svc.Start(t.Context()))
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the deadline has passed
	err = svc.Stop(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled 1 running handlers") {
		t.Errorf("Stop past its deadline = %v, want an error matching context.Canceled naming 1 cancelled handler", err)
	}
	require.True(t, sawCancel.Load(), "the stuck handler's ctx was cancelled")
	row, err := store.Get(t.Context(), "stuck-0")
	require.NoError(t, err)
	require.Equal(t, outbox.StatePending, row.State, "the cancelled row is retried, not settled")
}

// fakeCluster records joins and leaves; its member's lease is set by the
// test.
type fakeCluster struct {
	store   *memstore.Store
	mu      sync.Mutex
	nodes   []string
	members []*fakeMember
	left    []string
	lease   time.Time
}

func (c *fakeCluster) Join(ctx context.Context, node string) (dispatch.Member, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, node)
	m := &fakeMember{c: c, node: node, changes: make(chan backpressure.OwnedShardFraction, 1)}
	c.members = append(c.members, m)
	return m, nil
}

type fakeMember struct {
	c       *fakeCluster
	node    string
	changes chan backpressure.OwnedShardFraction
}

func (m *fakeMember) Node() string          { return m.node }
func (m *fakeMember) Store() dispatch.Store { return m.c.store }
func (m *fakeMember) Owned() backpressure.OwnedShardFraction {
	f, _ := backpressure.AllShards(m.c.store.ShardCount())
	return f
}
func (m *fakeMember) Changes() <-chan backpressure.OwnedShardFraction { return m.changes }
func (m *fakeMember) LeaseExpiresAt() time.Time {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.c.lease
}
func (m *fakeMember) Leave(context.Context) error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.c.left = append(m.c.left, m.node)
	return nil
}

// With a Cluster, Start joins under a unique default node name, the
// service follows the member's shards, is not ready once its lease
// lapsed, and Stop leaves.
func TestServiceJoinsFollowsAndLeaves(t *testing.T) {
	store := newStore(t, memstore.Options{})
	c := &fakeCluster{store: store, lease: time.Now().Add(time.Hour)}
	o := serviceOptions(2)
	o.Cluster = c
	svc, err := dispatch.NewService(store, func(context.Context, outbox.Row) error { return nil }, o)
	require.NoError(t, err)
	other, err := dispatch.NewService(store, func(context.Context, outbox.Row) error { return nil }, o)
	require.NoError(t, err)
	require.NotEqual(t, svc.Node(), other.Node(), "default node names are unique")
	require.NoError(t, svc.Start(t.Context()))
	require.Equal(t, []string{svc.Node()}, c.nodes)
	eventually(t, "ready", func() bool { return svc.Ready(t.Context()) == nil })

	half, err := backpressure.NewOwnedShardFraction([]int{0, 1}, store.ShardCount())
	require.NoError(t, err)
	c.mu.Lock()
	member := c.members[0]
	c.mu.Unlock()
	member.changes <- half
	eventually(t, "the new shards applied", func() bool { return svc.Backpressure().OwnedShards().OwnedCount() == 2 })

	c.mu.Lock()
	c.lease = time.Now().Add(-time.Second)
	c.mu.Unlock()
	if err := svc.Ready(t.Context()); !errors.Is(err, dispatch.ErrNotReady) || !strings.Contains(err.Error(), "lease") {
		t.Errorf("Ready with a lapsed lease = %v, want ErrNotReady naming the lease", err)
	}
	require.NoError(t, svc.Stop(t.Context()))
	require.Equal(t, []string{svc.Node()}, c.left)
}

// The probes' handlers answer 503 with the reason before Start and 200 once
// the service is ready; other methods get 405.
func TestServiceHealthHandlers(t *testing.T) {
	store := newStore(t, memstore.Options{})
	svc, err := dispatch.NewService(store, func(context.Context, outbox.Row) error { return nil }, serviceOptions(1))
	require.NoError(t, err)
	get := func(h http.Handler, method string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(svc.ReadyHandler(), http.MethodGet); code != http.StatusServiceUnavailable || !strings.Contains(body, "not started") {
		t.Errorf("readyz before Start = %d %q, want 503 saying not started", code, body)
	}
	if code, _ := get(svc.LiveHandler(), http.MethodGet); code != http.StatusOK {
		t.Errorf("livez before Start = %d, want 200: no loop to be wedged", code)
	}
	require.NoError(t, svc.Start(t.Context()))
	defer func() { require.NoError(t, svc.Stop(t.Context())) }()
	eventually(t, "readyz 200", func() bool { code, _ := get(svc.ReadyHandler(), http.MethodGet); return code == http.StatusOK })
	if code, body := get(svc.LiveHandler(), http.MethodHead); code != http.StatusOK {
		t.Errorf("livez HEAD = %d %q, want 200", code, body)
	}
	if code, _ := get(svc.ReadyHandler(), http.MethodPost); code != http.StatusMethodNotAllowed {
		t.Errorf("readyz POST = %d, want 405", code)
	}
}

// blockingClaimer is a store whose counts hang until their ctx is done: a
// wedged sweep loop.
type blockingClaimer struct {
	*memstore.Store
}

func (b blockingClaimer) Claimer() backpressure.OutboxStore[outbox.Row] { return b }

func (b blockingClaimer) CountClaimedOutboxRows(ctx context.Context, _ backpressure.OwnedShardFraction) (map[string]int, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (b blockingClaimer) CountPendingOutboxRows(ctx context.Context, _ backpressure.OwnedShardFraction, _ int) ([]backpressure.RouteCount, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (b blockingClaimer) ClaimOutboxRowsScoped(ctx context.Context, _ backpressure.OwnedShardFraction, _ []backpressure.ScopedClaim) ([]outbox.Row, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A sweep loop that completes no sweep for LiveTimeout, with idle
// workers, is not live; nor is it ready, having never swept.
func TestServiceNotLiveWhenTheSweepLoopIsWedged(t *testing.T) {
	store := blockingClaimer{newStore(t, memstore.Options{})}
	o := serviceOptions(1)
	o.LiveTimeout = time.Millisecond
	svc, err := dispatch.NewService(store, func(context.Context, outbox.Row) error { return nil }, o)
	require.NoError(t, err)
	require.NoError(t, svc.Start(t.Context()))
	eventually(t, "not live", func() bool { return errors.Is(svc.Live(), dispatch.ErrNotLive) })
	var he *dispatch.HealthError
	if err := svc.Ready(t.Context()); !errors.As(err, &he) || he.Probe != "ready" || !strings.Contains(he.Reason, "no sweep") {
		t.Errorf("Ready with no sweep completed = %v, want a ready HealthError saying no sweep has completed", err)
	}
	require.NoError(t, svc.Stop(t.Context()))
	require.NoError(t, svc.Live(), "after Stop: no loop to be wedged")
}
