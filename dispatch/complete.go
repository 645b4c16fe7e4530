package dispatch

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// flushOutcome is what the completer reports when it stops.
type flushOutcome struct {
	unwritten int   // results it could not write before the deadline
	err       error // the last store error, if any
}

// completeWriters is the most Complete calls the completer keeps in
// flight at once. A Complete's time is mostly its commit's wait for the
// log to reach disk; with a second call in flight, the store can write one
// batch while the other's commit waits (and, on PostgreSQL, commits that
// wait together share one flush), so results are written about as fast as
// sweeps claim rows, rather than at one commit per batch. Batches in
// flight together hold distinct rows, so they never wait on each other.
const completeWriters = 2

// written is what one Complete call in flight came back with.
type written struct {
	batch []*job
	res   []outbox.Result
	err   error
}

// completer writes results in batches: as soon as CompleteBatch are
// waiting, or FlushInterval after the first of a batch arrived, with up to
// completeWriters calls in flight. A failed Complete is retried after
// ErrorBackoff, its results back at the head of the buffer, and nothing
// else is written meanwhile; while the buffer and the calls in flight hold
// CompletionBacklog results it takes no more, so workers block. When stop
// is closed, it has ShutdownTimeout to wait for the calls in flight, take
// what is left and write it, with a context that outlives Run's; at the
// deadline that context is cancelled, and every result not known written
// (including those of calls still in flight) is counted unwritten. The
// steps are the batcher's.
func (r *run) completer(stop <-chan struct{}) flushOutcome {
	b := newBatcher(r)
	for {
		select {
		case j := <-b.intake():
			b.collect(j)
		case w := <-b.done:
			b.apply(w)
		case <-b.timer.C:
			b.timedOut()
		case <-stop:
			return b.shutdown()
		}
		b.flush()
	}
}

// batcher is the completer's state, used by the completer alone: the
// results it holds, and the Complete calls it has in flight.
type batcher struct {
	r         *run
	buf       []*job
	collected int  // results taken from r.completions
	failures  int  // consecutive failed Complete calls
	inflight  int  // Complete calls in flight
	held      int  // results in those calls
	due       bool // the interval of the oldest buffered result has passed
	hold      bool // a failed write's backoff is running: write nothing
	done      chan written
	timer     *time.Timer // FlushInterval, or a failed write's backoff
	armed     bool        // timer is running
}

func newBatcher(r *run) *batcher {
	b := &batcher{r: r, done: make(chan written, completeWriters), timer: time.NewTimer(time.Hour)}
	b.timer.Stop()
	return b
}

// intake returns the channel results arrive on, or nil while the buffer
// and the calls in flight hold CompletionBacklog results: workers then
// block until the store catches up.
func (b *batcher) intake() <-chan *job {
	if len(b.buf)+b.held >= b.r.o.CompletionBacklog {
		return nil
	}
	return b.r.completions
}

// collect takes one result into the buffer.
func (b *batcher) collect(j *job) {
	b.buf = append(b.buf, j)
	b.collected++
}

// timedOut takes the timer's firing: the oldest buffered result's
// FlushInterval, or a failed write's backoff, has passed.
func (b *batcher) timedOut() {
	b.armed = false
	b.hold, b.due = false, true
}

// flush starts the writes the buffer, the writers and a backoff allow: a
// full batch at once, a short one once due, and arms the timer for the
// FlushInterval of a buffer left waiting.
func (b *batcher) flush() {
	r := b.r
	for !b.hold && b.inflight < completeWriters && len(b.buf) > 0 && (b.due || len(b.buf) >= r.o.CompleteBatch) {
		batch, rest := splitBatch(b.buf, r.o.CompleteBatch)
		b.buf = rest
		b.inflight++
		b.held += len(batch)
		go func() {
			res, err := r.completeBatch(r.writeCtx, batch)
			b.done <- written{batch: batch, res: res, err: err}
		}()
	}
	switch {
	case b.hold:
	case len(b.buf) == 0:
		b.due = false
		b.disarm()
	case !b.due && !b.armed:
		b.arm(r.o.FlushInterval)
	}
}

// apply takes back one call's outcome: the results the store applied, or
// on failure the batch back at the head of the buffer and a backoff during
// which nothing is written.
func (b *batcher) apply(w written) {
	r := b.r
	b.inflight--
	b.held -= len(w.batch)
	if w.err == nil {
		b.failures = 0
		r.applied(w.batch, w.res)
		return
	}
	b.buf = append(w.batch, b.buf...)
	b.failures++
	delay := r.o.ErrorBackoff.Delay(b.failures, rand.Float64())
	if r.writeCtx.Err() == nil {
		r.m.StoreFailed("Complete", w.err)
		r.log.Warn("dispatch: writing results failed", "err", w.err, "results", len(b.buf), "failures", b.failures, "retry_in", delay)
	}
	b.hold, b.due = true, true
	b.disarm()
	b.arm(delay)
}

func (b *batcher) arm(d time.Duration) {
	b.timer.Reset(d)
	b.armed = true
}

func (b *batcher) disarm() {
	if b.armed {
		b.timer.Stop()
		b.armed = false
	}
}

// shutdown waits for the calls in flight, then writes what is left (see
// finalFlush), within ShutdownTimeout: at the deadline, r.writeCtx is
// cancelled and the results of calls still in flight count as unwritten.
func (b *batcher) shutdown() flushOutcome {
	r := b.r
	b.disarm()
	deadline := time.AfterFunc(r.o.ShutdownTimeout, r.writeCancel)
	defer deadline.Stop()
	b.awaitWrites()
	out := b.finalFlush(r.writeCtx)
	out.unwritten += b.held
	if out.unwritten > 0 {
		if out.err == nil {
			out.err = r.writeCtx.Err()
		}
		r.log.Warn("dispatch: shutdown left results unwritten; their rows come back when their leases expire", "results", out.unwritten, "err", out.err)
	}
	return out
}

// awaitWrites waits for the Complete calls in flight, until r.writeCtx is
// done: a failed call's results go back to the buffer, for finalFlush.
func (b *batcher) awaitWrites() {
	for b.inflight > 0 {
		select {
		case w := <-b.done:
			b.inflight--
			b.held -= len(w.batch)
			if w.err == nil {
				b.r.applied(w.batch, w.res)
			} else {
				b.buf = append(w.batch, b.buf...)
			}
		case <-b.r.writeCtx.Done():
			// A call that ignores its ctx: stop waiting. Its goroutine's
			// send cannot block (done has room for every writer).
			return
		}
	}
}

// finalFlush takes the results still on their way, waiting until ctx is
// done for those of jobs done but not yet sent, and writes them with the
// buffer, retrying failures until ctx is done. A result never taken counts
// as unwritten.
func (b *batcher) finalFlush(ctx context.Context) flushOutcome {
	r := b.r
	// Final: no job is active any more (every worker has let go, or
	// abandonRunning marked the rest under r.mu).
	r.mu.Lock()
	want := r.done
	r.mu.Unlock()
	for b.collected < want {
		select {
		case j := <-r.completions:
			b.collect(j)
			continue
		case <-ctx.Done():
		}
		break
	}
	unsent := want - b.collected
	buf := b.buf
	var lastErr error
	for failures := 1; len(buf) > 0 && ctx.Err() == nil; failures++ {
		var err error
		if buf, err = r.write(ctx, buf); err == nil {
			break
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		r.m.StoreFailed("Complete", err)
		t := time.NewTimer(r.o.ErrorBackoff.Delay(failures, rand.Float64()))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	b.buf = buf
	return flushOutcome{unwritten: len(buf) + unsent, err: lastErr}
}

// write writes buf in Complete calls of at most CompleteBatch results, each
// dispatch key at most once per call, and returns what it could not write
// with the error that stopped it. Results the store applied or reported
// lost are done with either way.
func (r *run) write(ctx context.Context, buf []*job) ([]*job, error) {
	for len(buf) > 0 {
		batch, rest := splitBatch(buf, r.o.CompleteBatch)
		res, err := r.completeBatch(ctx, batch)
		if err != nil {
			return append(batch, rest...), err
		}
		r.applied(batch, res)
		buf = rest
	}
	return buf, nil
}

// completeBatch writes batch in one Complete call.
func (r *run) completeBatch(ctx context.Context, batch []*job) ([]outbox.Result, error) {
	cs := make([]outbox.Completion, len(batch))
	for i, j := range batch {
		cs[i] = j.completion
	}
	res, err := r.d.store.Complete(ctx, cs)
	if err == nil && len(res) != len(cs) {
		err = errors.New("dispatch: store's Complete returned " + itoa(len(res)) + " results for " + itoa(len(cs)) + " completions")
	}
	if err == nil {
		// The sweep loop learns when the retried and snoozed rows are due without
		// asking the store (before applied signals it).
		written := time.Now()
		for i, c := range cs {
			if (c.Outcome == outbox.Retry || c.Outcome == outbox.Snooze) && res[i].Err == nil && res[i].State == outbox.StatePending {
				r.due.retried(written, c.Delay)
			}
		}
	}
	return res, err
}

// splitBatch returns up to n jobs of buf whose dispatch keys are distinct
// (Complete takes each key at most once), and the others in their order.
func splitBatch(buf []*job, n int) (batch, rest []*job) {
	seen := make(map[string]struct{}, min(n, len(buf)))
	for _, j := range buf {
		k := j.row.DispatchKey
		if _, dup := seen[k]; dup || len(batch) >= n {
			rest = append(rest, j)
			continue
		}
		seen[k] = struct{}{}
		batch = append(batch, j)
	}
	return batch, rest
}

// applied reports the store's results and forgets their rows.
func (r *run) applied(batch []*job, res []outbox.Result) {
	r.mu.Lock()
	for _, j := range batch {
		r.forget(j)
	}
	r.mu.Unlock()
	for i, j := range batch {
		r.results.add(res[i])
		if err := res[i].Err; err != nil {
			r.m.LeaseLost(LeaseLostEvent{Row: j.row, Op: "Complete"})
			r.log.Debug("dispatch: result not written: lease lost", "dispatch_key", j.row.DispatchKey, "namespace", j.row.Namespace,
				"outcome", j.completion.Outcome.String(), "err", err)
			continue
		}
		r.m.Completed(CompletionEvent{Row: j.row, Outcome: j.completion.Outcome, State: res[i].State, Err: j.err})
		if r.op != nil {
			r.op.completed(j.row.Namespace, j.completion.Outcome, res[i].State)
		}
		if res[i].State == outbox.StateDead {
			r.log.Warn("dispatch: row dead-lettered", "dispatch_key", j.row.DispatchKey, "namespace", j.row.Namespace,
				"attempt", j.row.Attempts, "err", j.err)
		}
	}
	signal(r.flushed)
}
