package otelmetrics_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/otelmetrics"
	"github.com/outboxkit/backpressure/outbox"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelmetrics.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// point returns the value of the data point with exactly attrs.
func point[N int64 | float64](t *testing.T, data metricdata.Aggregation, attrs ...attribute.KeyValue) N {
	t.Helper()
	want := attribute.NewSet(attrs...)
	var pts []metricdata.DataPoint[N]
	switch d := data.(type) {
	case metricdata.Sum[N]:
		pts = d.DataPoints
	case metricdata.Gauge[N]:
		pts = d.DataPoints
	default:
		t.Fatalf("unexpected aggregation %T", data)
	}
	for _, p := range pts {
		if p.Attributes.Equals(&want) {
			return p.Value
		}
	}
	t.Fatalf("no data point with %v among %v", want.Encoded(attribute.DefaultEncoder()), pts)
	return 0
}

func TestEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)

	m.Swept(dispatch.SweepEvent{Asked: 10, Claimed: 4, Duration: 3 * time.Millisecond, Plan: backpressure.Plan{
		Namespaces: []backpressure.NamespaceReport{
			{Namespace: "acme", Ceiling: 5, Claimed: 5, Held: 7, Reason: backpressure.HeldAtCeiling},
			{Namespace: "globex", Ceiling: backpressure.Unlimited, Claimed: 1, Granted: 4},
			{Namespace: "initech", Ceiling: 9, Granted: 2, Held: 30, Reason: backpressure.HeldRate, Rate: backpressure.Rate{PerSecond: 5, Burst: 10}, Tokens: 2},
		},
	}})
	m.Swept(dispatch.SweepEvent{Asked: 10, Err: errors.New("down")})
	row := outbox.Row{Namespace: "acme"}
	m.Completed(dispatch.CompletionEvent{Row: row, Outcome: outbox.Settle, State: outbox.StateSettled})
	m.Completed(dispatch.CompletionEvent{Row: row, Outcome: outbox.Retry, State: outbox.StateDead})
	m.LeaseLost(dispatch.LeaseLostEvent{Row: row, Op: "ExtendLeases"})
	m.LeasesExtended(3)
	m.Panicked(row)
	m.StoreFailed("Complete", errors.New("down"))

	got := collect(t, reader)
	acme, globex := attribute.String("namespace", "acme"), attribute.String("namespace", "globex")
	require.Equal(t, int64(4), point[int64](t, got["backpressure.sweep.rows"]))
	require.Equal(t, int64(4), point[int64](t, got["backpressure.namespace.granted"], globex))
	require.Equal(t, int64(7), point[int64](t, got["backpressure.namespace.held"], acme, attribute.String("reason", "at-ceiling")))
	require.Equal(t, int64(0), point[int64](t, got["backpressure.namespace.held"], globex, attribute.String("reason", "none")))
	initech := attribute.String("namespace", "initech")
	require.Equal(t, int64(30), point[int64](t, got["backpressure.namespace.held"], initech, attribute.String("reason", "rate")))
	require.Equal(t, int64(2), point[int64](t, got["backpressure.namespace.tokens"], initech))
	require.Len(t, got["backpressure.namespace.tokens"].(metricdata.Gauge[int64]).DataPoints, 1) // only rate-limited namespaces
	require.Equal(t, int64(5), point[int64](t, got["backpressure.namespace.claimed"], acme))
	require.Equal(t, 5.0, point[float64](t, got["backpressure.namespace.ceiling"], acme))
	require.True(t, math.IsInf(point[float64](t, got["backpressure.namespace.ceiling"], globex), 1))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.completions"], acme, attribute.String("outcome", "settle"), attribute.String("state", "settled")))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.completions"], acme, attribute.String("outcome", "retry"), attribute.String("state", "dead")))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.dead_letters"], acme))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.lease_lost"], acme, attribute.String("op", "ExtendLeases")))
	require.Equal(t, int64(3), point[int64](t, got["backpressure.leases_extended"]))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.panics"], acme))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.store_errors"], attribute.String("op", "Sweep")))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.store_errors"], attribute.String("op", "Complete")))
	h := got["backpressure.sweep.duration"].(metricdata.Histogram[float64])
	require.Len(t, h.DataPoints, 2)
}

// settleCounter wraps Metrics to learn when a run has settled every row.
type settleCounter struct {
	*otelmetrics.Metrics
	n, want int64
	done    chan struct{}
}

func (s *settleCounter) Completed(e dispatch.CompletionEvent) {
	s.Metrics.Completed(e)
	if atomic.AddInt64(&s.n, 1) == s.want {
		close(s.done)
	}
}

// A dispatcher's run over memstore, recorded end to end.
func TestDispatcher(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	s, err := memstore.New(memstore.Options{})
	require.NoError(t, err)
	defer s.Close()
	msgs := make([]outbox.Message, 6)
	for i := range msgs {
		msgs[i] = outbox.Message{DispatchKey: string(rune('a' + i)), Namespace: []string{"acme", "globex"}[i%2], TaskQueue: "q"}
	}
	_, err = s.Enqueue(context.Background(), msgs)
	require.NoError(t, err)
	owned := make([]int, s.ShardCount())
	for i := range owned {
		owned[i] = i
	}
	f, err := backpressure.NewOwnedShardFraction(owned, s.ShardCount())
	require.NoError(t, err)
	bp, err := backpressure.New(backpressure.Config{BatchSize: 10, DefaultQuota: 2}, f)
	require.NoError(t, err)
	sc := &settleCounter{Metrics: m, want: 6, done: make(chan struct{})}
	d, err := dispatch.New(bp, s, func(context.Context, outbox.Row) error { return nil }, dispatch.Options{Workers: 4, Metrics: sc})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	<-sc.done
	cancel()
	require.NoError(t, <-ran)

	got := collect(t, reader)
	settled := []attribute.KeyValue{attribute.String("outcome", "settle"), attribute.String("state", "settled")}
	require.Equal(t, int64(3), point[int64](t, got["backpressure.completions"], append(settled, attribute.String("namespace", "acme"))...))
	require.Equal(t, int64(3), point[int64](t, got["backpressure.completions"], append(settled, attribute.String("namespace", "globex"))...))
	require.Equal(t, int64(6), point[int64](t, got["backpressure.sweep.rows"]))
	require.Equal(t, 2.0, point[float64](t, got["backpressure.namespace.ceiling"], attribute.String("namespace", "acme")))
}

// TestAdapted: the adaptive controller's events become the namespace's
// adaptive-ceiling gauge, its signals counter (by cut) and its breaches.
func TestAdapted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := otelmetrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	m.Adapted(dispatch.AdaptEvent{Namespace: "acme", Signal: true, Cut: true, Ceiling: 10, Learned: 10, Static: 20})
	m.Adapted(dispatch.AdaptEvent{Namespace: "acme", Signal: true, Ceiling: 10, Learned: 10, Static: 20})
	m.Adapted(dispatch.AdaptEvent{Namespace: "acme", Ceiling: 11, Learned: 11, Static: 20})
	m.Adapted(dispatch.AdaptEvent{Namespace: "acme", Breach: true, Ceiling: 16, Pinned: 16, Learned: 11})
	got := collect(t, reader)
	acme := attribute.String("namespace", "acme")
	require.Equal(t, int64(11), point[int64](t, got["backpressure.namespace.adaptive_ceiling"], acme))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.namespace.signals"], acme, attribute.Bool("cut", true)))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.namespace.signals"], acme, attribute.Bool("cut", false)))
	require.Equal(t, int64(1), point[int64](t, got["backpressure.namespace.adaptive_breaches"], acme))
}
