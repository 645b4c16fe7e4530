package dispatch

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// extendChunk bounds one ExtendLeases call.
const extendChunk = 5000

func itoa(n int) string { return strconv.Itoa(n) }

// extender extends, in one batched call, the leases of every held row
// whose renewal time has come (LeaseRenewal of its lease after its claim or
// its last extension). It sleeps until the earliest renewal time, and wakes
// early when rows are claimed. A lease reported lost cancels its handler.
func (r *run) extender(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-stop:
			return
		case <-r.kick:
		case <-timer.C:
		}
		now := time.Now()
		due := r.dueJobs(now)
		if len(due) > 0 {
			if err := r.extend(due); err != nil {
				if r.extendCtx.Err() != nil {
					return
				}
				failures++
				r.m.StoreFailed("ExtendLeases", err)
				retry := r.o.ErrorBackoff.Delay(failures, rand.Float64())
				r.log.Warn("dispatch: extending leases failed", "err", err, "leases", len(due), "failures", failures, "retry_in", retry)
				r.mu.Lock()
				for _, j := range due {
					// Sooner than the usual renewal: the lease is running out.
					j.extendAt = now.Add(min(retry, r.renewEvery(j)/2))
				}
				r.mu.Unlock()
			} else {
				failures = 0
			}
		}
		timer.Reset(r.nextRenewal(time.Now()))
	}
}

// dueJobs returns the held jobs whose renewal time is at or before now and
// whose lease no extension has reported lost.
func (r *run) dueJobs(now time.Time) []*job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []*job
	for _, j := range r.jobs {
		if !j.extendAt.After(now) && !j.leaseLost.Load() {
			due = append(due, j)
		}
	}
	return due
}

// nextRenewal returns how long until the earliest renewal time (an hour if
// nothing is held: a claim kicks the extender anyway).
func (r *run) nextRenewal(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := time.Hour
	for _, j := range r.jobs {
		if !j.leaseLost.Load() {
			next = min(next, j.extendAt.Sub(now))
		}
	}
	return max(next, 0)
}

// extend extends the leases of due in calls of at most extendChunk.
func (r *run) extend(due []*job) error {
	for len(due) > 0 {
		chunk := due[:min(len(due), extendChunk)]
		due = due[len(chunk):]
		leases := make([]outbox.Lease, len(chunk))
		for i, j := range chunk {
			leases[i] = j.row.Lease()
		}
		sent := time.Now()
		res, err := r.d.store.ExtendLeases(r.extendCtx, leases)
		if err == nil && len(res) != len(leases) {
			err = errors.New("dispatch: store's ExtendLeases returned " + itoa(len(res)) + " results for " + itoa(len(leases)) + " leases")
		}
		if err != nil {
			return err
		}
		extended := 0
		r.mu.Lock()
		for _, j := range chunk {
			j.extendAt = sent.Add(r.renewEvery(j))
		}
		r.mu.Unlock()
		for i, j := range chunk {
			if res[i].Err == nil {
				extended++
				continue
			}
			r.lost(j, res[i].Err)
		}
		r.m.LeasesExtended(extended)
	}
	return nil
}

// lost handles a lease an extension reported lost: it is never extended
// again. If the row's handler has already finished, its completion will
// report the loss; otherwise the handler is cancelled and its result will
// not be written.
func (r *run) lost(j *job, err error) {
	j.leaseLost.Store(true)
	if !j.state.CompareAndSwap(jobActive, jobLost) {
		return
	}
	r.mu.Lock()
	r.forget(j)
	cancel := j.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	r.m.LeaseLost(LeaseLostEvent{Row: j.row, Op: "ExtendLeases"})
	r.log.Debug("dispatch: lease lost; handler cancelled", "dispatch_key", j.row.DispatchKey, "namespace", j.row.Namespace, "err", err)
}

// leaseOf returns the length of row's lease as the store set it, or the
// store's Lease(), or outbox.DefaultLease.
func (r *run) leaseOf(row outbox.Row) time.Duration {
	if l := row.LeaseExpiresAt.Sub(row.ClaimedAt); l > 0 && !row.ClaimedAt.IsZero() {
		return l
	}
	if s, ok := r.d.store.(interface{ Lease() time.Duration }); ok && s.Lease() > 0 {
		return s.Lease()
	}
	return outbox.DefaultLease
}

// renewEvery returns how long after its claim or its last extension j's
// lease is extended: LeaseRenewal of its length.
func (r *run) renewEvery(j *job) time.Duration {
	return time.Duration(float64(j.lease) * r.o.LeaseRenewal)
}
