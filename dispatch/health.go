package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Errors of a [Service]'s health checks. The typed error is
// *[HealthError].
var (
	// ErrNotLive reports a service whose sweep loop looks wedged: restart
	// the process.
	ErrNotLive = errors.New("dispatch: not live")
	// ErrNotReady reports a service that is not dispatching now: not
	// started, stopping, without a live membership lease, whose last sweep
	// failed, or whose store does not answer a ping.
	ErrNotReady = errors.New("dispatch: not ready")
)

// HealthError says why [Service.Live] or [Service.Ready] failed. It
// matches [ErrNotLive] or [ErrNotReady] (by Probe) and unwraps to Err.
type HealthError struct {
	Probe  string // "live" or "ready"
	Reason string // e.g. "membership lease lapsed", "store ping failed"
	Err    error  // the cause, when there is one: the last sweep's error, the ping's
}

// Error reads "dispatch: not ready: reason: err".
func (e *HealthError) Error() string {
	s := "dispatch: not " + e.Probe + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is the sentinel of e's probe.
func (e *HealthError) Is(target error) bool {
	return e.Probe == "live" && target == ErrNotLive || e.Probe == "ready" && target == ErrNotReady
}

// Unwrap returns Err.
func (e *HealthError) Unwrap() error { return e.Err }

// Live reports whether the service's sweep loop is alive: nil unless the
// service is running, at least one worker is idle (so the loop has credit
// to sweep with), and no sweep has completed, failed or not, for
// LiveTimeout since the last one (or since Start); then a *[HealthError]
// matching [ErrNotLive]. A loop that waits for busy workers is alive, and
// so is one whose store fails (that is Ready's business: restarting the
// process does not mend a database). Before Start and after Stop there is
// no loop to be wedged, and Live is nil. It makes no I/O: O(1).
func (s *Service) Live() error {
	s.mu.Lock()
	running := s.state == serviceRunning
	s.mu.Unlock()
	if !running || s.busy.Load() >= int64(s.opts.Workers) {
		return nil
	}
	if since := time.Since(s.watch.lastAt()); since > s.opts.LiveTimeout {
		return &HealthError{Probe: "live", Reason: fmt.Sprintf("no sweep completed for %v (LiveTimeout %v) with idle workers", since.Round(time.Millisecond), s.opts.LiveTimeout)}
	}
	return nil
}

// Ready reports whether the service is dispatching: nil when it is
// running (not starting, joining or stopping), its membership lease (with
// a Cluster) is live, a sweep has succeeded since Start and the last sweep
// did not fail, and the store answers a ping ([outbox.Pinger], within
// PingTimeout and ctx); else a *[HealthError] matching [ErrNotReady]
// saying which. Its cost is the ping's, one round trip, independent of the
// outbox's size: a container platform may call it every second.
func (s *Service) Ready(ctx context.Context) error {
	notReady := func(reason string, err error) error {
		return &HealthError{Probe: "ready", Reason: reason, Err: err}
	}
	s.mu.Lock()
	state, r := s.state, s.run
	s.mu.Unlock()
	switch state {
	case serviceIdle:
		return notReady("not started", nil)
	case serviceStarting:
		return notReady("starting (pinging the store, joining)", nil)
	case serviceStopping:
		return notReady("stopping", nil)
	}
	if r.member != nil && !time.Now().Before(r.member.LeaseExpiresAt()) {
		return notReady("membership lease lapsed", nil)
	}
	switch ok, err := s.watch.outcome(); {
	case err != nil:
		return notReady("last sweep failed", err)
	case !ok:
		return notReady("no sweep has completed yet", nil)
	}
	if err := s.ping(ctx); err != nil {
		return notReady("store ping failed", err)
	}
	return nil
}

// ping pings the store if it can be pinged, within PingTimeout.
func (s *Service) ping(ctx context.Context) error {
	p, ok := s.store.(outbox.Pinger)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.PingTimeout)
	defer cancel()
	return p.Ping(ctx)
}

// LiveHandler returns an http.Handler for a liveness probe: it answers
// GET and HEAD with 200 "ok" while [Service.Live] is nil, else 503 with
// its error; other methods get 405.
func (s *Service) LiveHandler() http.Handler {
	return healthHandler(func(*http.Request) error { return s.Live() })
}

// ReadyHandler returns an http.Handler for a readiness probe: it answers
// GET and HEAD with 200 "ok" while [Service.Ready] (with the request's
// context) is nil, else 503 with its error; other methods get 405.
func (s *Service) ReadyHandler() http.Handler {
	return healthHandler(func(r *http.Request) error { return s.Ready(r.Context()) })
}

func healthHandler(check func(*http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if err := check(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// sweepWatch records each sweep's time and outcome on its way to the
// user's Metrics: the O(1) state Live and Ready read.
type sweepWatch struct {
	next Metrics
	at   atomic.Int64 // unix nanoseconds of the last sweep completed, or of Start
	ok   atomic.Bool  // a sweep has succeeded since Start
	err  atomic.Pointer[error]
}

func newSweepWatch(next Metrics) *sweepWatch {
	if next == nil {
		next = NopMetrics{}
	}
	w := &sweepWatch{next: next}
	w.reset(time.Now())
	return w
}

// reset starts a run's record at now: no sweep yet.
func (w *sweepWatch) reset(now time.Time) {
	w.at.Store(now.UnixNano())
	w.ok.Store(false)
	w.err.Store(nil)
}

func (w *sweepWatch) lastAt() time.Time { return time.Unix(0, w.at.Load()) }

// outcome returns whether a sweep has succeeded since Start, and the last
// sweep's error.
func (w *sweepWatch) outcome() (bool, error) {
	if p := w.err.Load(); p != nil {
		return w.ok.Load(), *p
	}
	return w.ok.Load(), nil
}

func (w *sweepWatch) swept(e SweepEvent) {
	w.at.Store(time.Now().UnixNano())
	if e.Err != nil {
		err := e.Err
		w.err.Store(&err)
	} else {
		w.err.Store(nil)
		w.ok.Store(true)
	}
	w.next.Swept(e)
}

// metrics returns the Metrics the Dispatcher reports to: the user's, with
// Swept recorded first, and SettingsMetrics kept when the user's has it.
func (w *sweepWatch) metrics() Metrics {
	if sm, ok := w.next.(SettingsMetrics); ok {
		return watchedSettings{watched{w.next, w}, sm}
	}
	return watched{w.next, w}
}

type watched struct {
	Metrics
	w *sweepWatch
}

// Swept records e and passes it on.
func (m watched) Swept(e SweepEvent) { m.w.swept(e) }

type watchedSettings struct {
	watched
	SettingsMetrics
}
