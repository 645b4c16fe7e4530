package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// Against a plain map: HandleRow calls the handler registered for the
// row's task queue, once, and returns its error unchanged; a task queue
// with none is a permanent *NoHandlerError naming the row's route.
func TestMuxRoutesLikeAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		queues := rapid.SliceOfDistinct(rapid.StringMatching(`[a-c]{0,2}`), rapid.ID[string]).Draw(t, "queues")
		var mux dispatch.Mux
		calls := map[string]int{}
		errs := map[string]error{}
		for _, q := range queues {
			errs[q] = errors.New("from " + q)
			mux.Handle(q, func(_ context.Context, row outbox.Row) error {
				calls[q]++
				if row.TaskQueue != q {
					t.Fatalf("handler of %q got a row of %q", q, row.TaskQueue)
				}
				return errs[q]
			})
		}
		for i, q := range rapid.SliceOf(rapid.StringMatching(`[a-c]{0,2}`)).Draw(t, "rows") {
			before := calls[q]
			err := mux.HandleRow(context.Background(), outbox.Row{DispatchKey: fmt.Sprint(i), Namespace: "ns", TaskQueue: q})
			want, registered := errs[q]
			if registered {
				if err != want || calls[q] != before+1 {
					t.Fatalf("row %d on %q: err %v and %d calls, want %v and %d", i, q, err, calls[q], want, before+1)
				}
				continue
			}
			var nh *dispatch.NoHandlerError
			if !dispatch.IsPermanent(err) || !errors.Is(err, dispatch.ErrNoHandler) || !errors.As(err, &nh) ||
				nh.TaskQueue != q || nh.Namespace != "ns" {
				t.Fatalf("row %d on unregistered %q: err %#v, want a permanent *NoHandlerError", i, q, err)
			}
		}
	})
}

func TestMuxHandleMisusePanicsAndChangesNothing(t *testing.T) {
	ok := func(context.Context, outbox.Row) error { return nil }
	var mux dispatch.Mux
	mux.Handle("emails", ok)
	for _, c := range []struct {
		name, queue string
		h           dispatch.Handler
		panic       string
	}{
		{"nil handler", "other", nil, `dispatch: Mux.Handle: nil handler for task queue "other"`},
		{"twice", "emails", func(context.Context, outbox.Row) error { return errors.New("second") }, `dispatch: Mux.Handle: task queue "emails" registered twice`},
		{"too long", strings.Repeat("q", outbox.MaxTaskQueueBytes+1), ok, "dispatch: Mux.Handle: task queue"},
		{"NUL", "a\x00b", ok, `dispatch: Mux.Handle: task queue "a\x00b"`},
		{"not UTF-8", "a\xffb", ok, `dispatch: Mux.Handle: task queue "a\xffb"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got any
			func() {
				defer func() { got = recover() }()
				mux.Handle(c.queue, c.h)
			}()
			msg, _ := got.(string)
			require.Truef(t, strings.HasPrefix(msg, c.panic), "Handle(%q) panicked with %v, want %q…", c.queue, got, c.panic)
			_, registered := mux.Handler(c.queue)
			require.Equal(t, c.queue == "emails", registered, "Handle(%q) left a registration behind", c.queue)
		})
	}
	// "emails" still runs its first handler.
	require.NoError(t, mux.HandleRow(context.Background(), outbox.Row{TaskQueue: "emails"}))
	// The longest task queue a row can have is accepted, and so is "".
	mux.Handle(strings.Repeat("q", outbox.MaxTaskQueueBytes), ok)
	mux.Handle("", ok)
}

// Handle and HandleRow may run at once (checked by -race).
func TestMuxConcurrentUse(t *testing.T) {
	var mux dispatch.Mux
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			q := fmt.Sprint("q", i)
			mux.Handle(q, func(context.Context, outbox.Row) error { return nil })
			for range 100 {
				require.NoError(t, mux.HandleRow(context.Background(), outbox.Row{TaskQueue: q}))
			}
		})
	}
	wg.Wait()
}

type order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

func TestJSON(t *testing.T) {
	var got []order
	boom := errors.New("boom")
	h := dispatch.JSON(func(_ context.Context, row outbox.Row, o order) error {
		got = append(got, o)
		if o.ID == "fail" {
			return boom
		}
		return nil
	})
	call := func(payload string) error {
		return h(context.Background(), outbox.Row{DispatchKey: "k", Namespace: "ns", Payload: []byte(payload)})
	}

	require.NoError(t, call(`{"id":"o-1","cents":250,"coupon":"new field"}`), "unknown fields are ignored")
	require.NoError(t, call(`null`), "null leaves the zero value")
	require.Equal(t, []order{{"o-1", 250}, {}}, got)
	require.ErrorIs(t, call(`{"id":"fail"}`), boom, "the handler's error is returned unchanged")
	require.False(t, dispatch.IsPermanent(call(`{"id":"fail"}`)))
	got = nil

	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	for _, c := range []struct {
		payload string
		as      any
	}{
		{`{"id":`, nil},
		{``, nil},
		{`not json`, &syntax},
		{`{"id":"o-2"} trailing`, &syntax},
		{`{"cents":"12"}`, &typ},
		{`[1,2]`, &typ},
	} {
		err := call(c.payload)
		var pe *dispatch.PayloadError
		require.Truef(t, dispatch.IsPermanent(err) && errors.As(err, &pe), "payload %q: err %v, want a permanent *PayloadError", c.payload, err)
		require.Equal(t, "dispatch_test.order", pe.Type)
		require.Contains(t, err.Error(), "dispatch: payload does not decode as JSON into dispatch_test.order: ")
		if c.as != nil {
			require.Truef(t, errors.As(err, c.as), "payload %q: %v does not unwrap to %T", c.payload, err, c.as)
		}
	}
	require.Empty(t, got, "the handler ran for a payload that does not decode")

	require.PanicsWithValue(t, "dispatch: JSON: nil handler", func() { dispatch.JSON[order](nil) })
}

// A dispatcher over a Mux of JSON handlers settles what routes and decodes,
// and dead-letters at once, with the error recorded on the row, a row on a
// task queue nobody handles and a payload that does not decode.
func TestMuxAndJSONDispatch(t *testing.T) {
	store := newStore(t, memstore.Options{})
	ctx := context.Background()
	_, err := store.Enqueue(ctx, []outbox.Message{
		{DispatchKey: "o-1", Namespace: "acme", TaskQueue: "orders", Payload: []byte(`{"id":"o-1","cents":100}`)},
		{DispatchKey: "o-2", Namespace: "globex", TaskQueue: "orders", Payload: []byte(`{"id":`)},
		{DispatchKey: "r-1", Namespace: "acme", TaskQueue: "refunds", Payload: []byte(`{}`)},
		{DispatchKey: "x-1", Namespace: "globex", TaskQueue: "unknown", Payload: []byte(`{}`)},
	})
	require.NoError(t, err)

	var mu sync.Mutex
	var ran []string
	var mux dispatch.Mux
	mux.Handle("orders", dispatch.JSON(func(_ context.Context, row outbox.Row, o order) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, fmt.Sprintf("order %s %d", o.ID, o.Cents))
		return nil
	}))
	mux.Handle("refunds", func(_ context.Context, row outbox.Row) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, "refund "+row.DispatchKey)
		return nil
	})
	rec := newRecorder()
	d, err := dispatch.New(newBP(t, 10, 10, nil), store, mux.HandleRow, dispatch.Options{Workers: 4, Logger: quietLogger(), Metrics: rec})
	require.NoError(t, err)
	stop := start(t, d)
	rec.waitUntil(t, "4 completions", func(r *recorder) bool { return len(r.completed) == 4 })
	require.NoError(t, stop())

	require.ElementsMatch(t, []string{"order o-1 100", "refund r-1"}, ran)
	for key, want := range map[string]string{
		"o-2": "permanent: dispatch: payload does not decode as JSON into dispatch_test.order: unexpected end of JSON input",
		"x-1": `permanent: dispatch: no handler for task queue "unknown" (namespace "globex")`,
	} {
		row, err := store.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, outbox.StateDead, row.State, key)
		require.Equal(t, 1, row.Attempts, "%s: dead-lettered on its first attempt", key)
		require.Equal(t, want, row.LastError, key)
	}
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Settled)
	require.Equal(t, 2, st.Dead)
}
