package dispatch

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// A job's life: active (queued or running) → done (its result is on its
// way to the store) or lost (an extension reported its lease lost, so its
// result must not be written) or abandoned (still running at the shutdown
// deadline). The transitions out of active race (a handler returning while
// an extension reports the lease lost), so they are compare-and-swaps.
const (
	jobActive int32 = iota
	jobDone
	jobLost
	jobAbandoned
)

// job is one claimed row the dispatcher holds.
type job struct {
	row   outbox.Row
	lease time.Duration // the lease's length, as the store set it
	state atomic.Int32
	// leaseLost is set when an extension reports the lease lost, whatever
	// the state: the extender never offers the lease again.
	leaseLost atomic.Bool

	// Guarded by run.mu.
	extendAt time.Time          // when the extender next extends the lease
	cancel   context.CancelFunc // the handler's; nil until it starts

	// Set by the worker before it hands the job to the completer.
	completion outbox.Completion
	err        error
}

// worker runs jobs until the hand-off is closed and drained; past the
// shutdown deadline it starts none, nor, with a queue, once Run's ctx is
// done. A row it does not start is released, its lease left to expire, and
// counted as abandoned: by abandonRunning past the deadline, else here (a
// job is counted by whichever marks it abandoned first).
func (r *run) worker() {
	for j := range r.rows {
		r.signalFreed()
		if r.workCtx.Err() != nil || (r.o.Queue > 0 && r.stopCtx.Err() != nil) {
			if j.state.CompareAndSwap(jobActive, jobAbandoned) {
				r.unstarted.Add(1)
			}
			r.release(j)
			continue
		}
		r.runJob(j)
	}
}

func (r *run) signalFreed() { signal(r.freed) }

// release lets go of j's worker slot and forgets it: its result will not be
// written, and its lease comes back when it expires.
func (r *run) release(j *job) {
	r.mu.Lock()
	r.forget(j)
	r.outstanding--
	r.mu.Unlock()
	r.signalFreed()
}

// forget deletes j from r.jobs, once, and from the rows held per
// namespace the adaptive controller counts. The caller holds r.mu.
func (r *run) forget(j *job) {
	k := j.row.Lease()
	if _, ok := r.jobs[k]; !ok {
		return
	}
	delete(r.jobs, k)
	if r.nsHeld != nil {
		if r.nsHeld[j.row.Namespace]--; r.nsHeld[j.row.Namespace] <= 0 {
			delete(r.nsHeld, j.row.Namespace)
		}
	}
}

func (r *run) runJob(j *job) {
	ctx, cancel := context.WithCancel(r.workCtx)
	defer cancel()
	r.mu.Lock()
	j.cancel = cancel
	r.mu.Unlock()
	if j.state.Load() != jobActive {
		r.release(j) // lost while queued
		return
	}
	err := r.call(ctx, j.row)
	if a := r.d.adapt; a != nil && r.workCtx.Err() == nil {
		r.mu.Lock()
		held := r.nsHeld[j.row.Namespace]
		r.mu.Unlock()
		a.observe(j.row.Namespace, err, held)
	}
	if err != nil && ctx.Err() != nil && r.workCtx.Err() != nil {
		// Cancelled by the shutdown deadline: the row comes back when its
		// lease expires, rather than spend an attempt on a retry.
		j.state.CompareAndSwap(jobActive, jobAbandoned)
	}
	// Under r.mu, so that r.done is final once abandonRunning has run: the
	// final flush waits for that many results.
	r.mu.Lock()
	ok := j.state.CompareAndSwap(jobActive, jobDone)
	if ok {
		r.done++
	}
	r.mu.Unlock()
	if !ok {
		r.release(j) // lost or abandoned meanwhile
		return
	}
	j.err = err
	j.completion = r.completionFor(j.row, err)
	select {
	case r.completions <- j: // blocks while the completer is behind
	case <-r.closed:
	}
	r.mu.Lock()
	r.outstanding--
	r.mu.Unlock()
	r.signalFreed()
}

// call runs the handler, turning a panic into a *PanicError.
func (r *run) call(ctx context.Context, row outbox.Row) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			r.m.Panicked(row)
			r.log.Error("dispatch: handler panicked", "dispatch_key", row.DispatchKey, "namespace", row.Namespace,
				"attempt", row.Attempts, "panic", pe.Value, "stack", string(pe.Stack))
			err = pe
		}
	}()
	return r.d.handler(ctx, row)
}

// abandonRunning marks every job still active as abandoned, past the
// shutdown deadline, and returns how many there were. Their workers let go
// of them when (if) their handlers return.
func (r *run) abandonRunning() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, j := range r.jobs {
		if j.state.CompareAndSwap(jobActive, jobAbandoned) {
			n++
		}
	}
	return n
}
