package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/backpressure/outbox"
)

// testBatcher returns the completer's state for a dispatcher over an
// empty memstore writing batches of 3, with a backlog of 5 and a flush
// interval of an hour (its timer never fires in a test: timedOut stands
// for it). Its steps are driven by the test.
func testBatcher(t *testing.T) *batcher {
	t.Helper()
	d := testDispatcher(t, Options{Workers: 1, CompleteBatch: 3, CompletionBacklog: 5, FlushInterval: time.Hour})
	r := newRun(d, context.Background())
	t.Cleanup(r.writeCancel)
	b := newBatcher(r)
	t.Cleanup(b.disarm)
	return b
}

func settledJob(i int) *job {
	row := outbox.Row{DispatchKey: fmt.Sprint("k", i), Token: 1}
	return &job{row: row, completion: outbox.SettleRow(row)}
}

// The batcher writes a full batch at once and a short one only once due;
// a failed write's results go back to the head of the buffer, and nothing
// is written during its backoff; at CompletionBacklog results held it
// takes no more.
func TestBatcherSteps(t *testing.T) {
	b := testBatcher(t)
	require.NotNil(t, b.intake())

	b.collect(settledJob(0))
	b.collect(settledJob(1))
	b.flush()
	require.Equal(t, 0, b.inflight, "a short batch written before it is due")
	require.True(t, b.armed, "a short batch waits for its FlushInterval")

	b.collect(settledJob(2))
	b.flush()
	require.Equal(t, 1, b.inflight, "a full batch not written at once")
	require.Equal(t, 3, b.held)
	require.Empty(t, b.buf)
	require.False(t, b.armed, "nothing left waits")
	w := <-b.done // memstore knows no such rows: written, each lease lost
	require.NoError(t, w.err)
	b.apply(w)
	require.Equal(t, 0, b.inflight)
	require.Equal(t, 0, b.held)

	// A failure: its batch back at the head, held for the backoff.
	b.collect(settledJob(3))
	b.inflight, b.held = 1, 2 // a call in flight with k4 and k5, as flush starts one
	b.apply(written{batch: []*job{settledJob(4), settledJob(5)}, err: errors.New("store down")})
	require.Equal(t, []string{"k4", "k5", "k3"}, keys(b.buf))
	require.True(t, b.hold)
	require.True(t, b.armed, "the backoff is not running")
	b.flush()
	require.Equal(t, 0, b.inflight, "written during the backoff")

	// At the backlog: no more results taken.
	b.collect(settledJob(6))
	require.NotNil(t, b.intake())
	b.collect(settledJob(7))
	require.Nil(t, b.intake(), "took results past CompletionBacklog")

	// The backoff passes: every result is due, written in batches of 3.
	b.timedOut()
	b.flush()
	require.Equal(t, 2, b.inflight)
	require.Equal(t, 5, b.held)
	require.Empty(t, b.buf)
	require.Nil(t, b.intake(), "the calls in flight count toward the backlog")
	for range 2 {
		b.apply(<-b.done)
	}
	require.Equal(t, 0, b.held)
	require.NotNil(t, b.intake())
}

func keys(jobs []*job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.row.DispatchKey
	}
	return out
}
