package handoff

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// ErrInvalidMonitor reports a [ComplianceMonitorConfig] or a requested rate
// that a [ComplianceMonitor] rejects.
var ErrInvalidMonitor = errors.New("handoff: invalid compliance monitor")

// MonitorError describes a compliance-monitor setting that cannot hold. It
// matches [ErrInvalidMonitor].
type MonitorError struct {
	Field  string // e.g. "Window", "Tolerance", "RequestedRate"
	Value  any
	Reason string
}

// Error names the setting and why it cannot hold.
func (e *MonitorError) Error() string {
	return fmt.Sprintf("handoff: invalid compliance monitor: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidMonitor].
func (e *MonitorError) Is(target error) bool { return target == ErrInvalidMonitor }

// DefaultMonitorBuckets is the number of buckets a [ComplianceMonitorConfig]
// with Buckets = 0 divides its window into.
const DefaultMonitorBuckets = 10

// MaxMonitorBuckets bounds Buckets, and so a monitor's memory.
const MaxMonitorBuckets = 1 << 16

// ComplianceVerdict is what a [ComplianceMonitor] concludes about the
// producer at one instant.
type ComplianceVerdict uint8

const (
	// ComplianceUnmeasured is the zero verdict: nothing was measured.
	ComplianceUnmeasured ComplianceVerdict = iota
	// ComplianceInGrace: the producer is still within its grace period
	// after a request, so no verdict is reached.
	ComplianceInGrace
	// ComplianceMet: the producer sends within the requested rate and
	// tolerance (or has come back down to it after a breach).
	ComplianceMet
	// ComplianceBreached: the producer sends above the requested rate
	// beyond tolerance and has not yet come back down.
	ComplianceBreached
)

var complianceVerdictNames = [...]string{
	ComplianceUnmeasured: "unmeasured",
	ComplianceInGrace:    "in-grace",
	ComplianceMet:        "compliant",
	ComplianceBreached:   "non-compliant",
}

// String returns "unmeasured", "in-grace", "compliant" or "non-compliant",
// and "ComplianceVerdict(n)" for any other value.
func (v ComplianceVerdict) String() string {
	if int(v) >= len(complianceVerdictNames) {
		return "ComplianceVerdict(" + strconv.Itoa(int(v)) + ")"
	}
	return complianceVerdictNames[v]
}

// ComplianceSignature records a producer's observed rate against the rate
// the consumer requested, over a window, with the tolerances applied and the
// verdict reached. Rates are messages per second. The zero value records no
// measurement.
type ComplianceSignature struct {
	At                time.Time     // the end of the measured window
	Window            time.Duration // the window's length
	Observed          float64       // sends in the window ÷ Window
	Requested         float64       // the rate the consumer asked for
	Tolerance         float64       // breach when Observed > Requested × (1 + Tolerance)
	RecoveryTolerance float64       // recover when Observed ≤ Requested × (1 + RecoveryTolerance)
	Verdict           ComplianceVerdict
}

// Verified reports whether the signature shows a compliant producer, the
// evidence behind [backpressure.BackpressureGate].ProducerComplianceVerified.
func (s ComplianceSignature) Verified() bool { return s.Verdict == ComplianceMet }

// String returns the signature in one line, e.g.
// "non-compliant: observed 120/s, requested 100/s, tolerance 10% over 1s".
func (s ComplianceSignature) String() string {
	return fmt.Sprintf("%s: observed %s/s, requested %s/s, tolerance %s%% over %v",
		s.Verdict,
		strconv.FormatFloat(s.Observed, 'g', -1, 64),
		strconv.FormatFloat(s.Requested, 'g', -1, 64),
		strconv.FormatFloat(s.Tolerance*100, 'g', -1, 64),
		s.Window)
}

// ComplianceAlert is what a [ComplianceMonitor] hands its callbacks: which
// episode of non-compliance, and the signature that opened or closed it.
type ComplianceAlert struct {
	// Episode counts episodes of non-compliance from 1; a recovery carries
	// the number of the episode it closes.
	Episode   int
	Signature ComplianceSignature
}

// ComplianceMonitorConfig configures a [ComplianceMonitor]. Only Window is
// required; every other zero value is usable.
type ComplianceMonitorConfig struct {
	// RequestedRate is the rate, in messages per second, the consumer asks
	// the producer to keep to. Zero asks the producer to stop: any send is
	// then a breach. Must be finite and ≥ 0.
	RequestedRate float64
	// Window is the sliding window over which the observed rate is
	// measured. Must be > 0 and a whole multiple of Buckets nanoseconds.
	Window time.Duration
	// Buckets is the number of buckets the window is divided into: the
	// monitor's memory, and the granularity with which the window slides.
	// Zero means [DefaultMonitorBuckets]; at most [MaxMonitorBuckets].
	Buckets int
	// Tolerance is how far above the requested rate the producer may send
	// before it is in breach, as a fraction: 0.1 allows 10% over, so 110/s
	// against 100/s is not a breach and anything above it is (both sides
	// compared with a relative slack of 10⁻¹², so that float64 rounding of
	// the threshold does not move it). Zero allows nothing over. Must be
	// finite and ≥ 0.
	Tolerance float64
	// RecoveryTolerance is how far above the requested rate a breaching
	// producer must come back down to before it counts as recovered. It is
	// the hysteresis that keeps a producer hovering at the threshold from
	// raising an alert on every send. Zero means back to the requested rate
	// itself. Must satisfy 0 ≤ RecoveryTolerance ≤ Tolerance.
	RecoveryTolerance float64
	// Grace is the time the producer is given to respond to a request
	// before it is judged: no verdict is reached, and no alert raised, until
	// Grace has passed since the monitor's first observation or the last
	// change of the requested rate. Zero judges at once. A Grace shorter
	// than Window judges the producer partly on sends made before the
	// request. Must be ≥ 0.
	Grace time.Duration
	// OnAlert, if not nil, is called once when an episode of non-compliance
	// opens: the producer went from compliant (or unjudged) to breach. It
	// is not called again until the producer has recovered and breached
	// anew.
	OnAlert func(ComplianceAlert)
	// OnRecover, if not nil, is called once when an episode closes: the
	// producer came back within RecoveryTolerance.
	OnRecover func(ComplianceAlert)
}

// validate fills in defaults and checks the config.
func (c *ComplianceMonitorConfig) validate() error {
	if c.Buckets == 0 {
		c.Buckets = DefaultMonitorBuckets
	}
	switch {
	case !validRate(c.RequestedRate):
		return &MonitorError{Field: "RequestedRate", Value: c.RequestedRate, Reason: "must be finite and not negative"}
	case c.Buckets < 0 || c.Buckets > MaxMonitorBuckets:
		return &MonitorError{Field: "Buckets", Value: c.Buckets, Reason: "must be in [0, " + strconv.Itoa(MaxMonitorBuckets) + "]"}
	case c.Window <= 0:
		return &MonitorError{Field: "Window", Value: c.Window, Reason: "must be positive"}
	case c.Window%time.Duration(c.Buckets) != 0:
		return &MonitorError{Field: "Window", Value: c.Window, Reason: "must be a whole multiple of " + strconv.Itoa(c.Buckets) + " buckets"}
	case !validRate(c.Tolerance):
		return &MonitorError{Field: "Tolerance", Value: c.Tolerance, Reason: "must be finite and not negative"}
	case !validRate(c.RecoveryTolerance) || c.RecoveryTolerance > c.Tolerance:
		return &MonitorError{Field: "RecoveryTolerance", Value: c.RecoveryTolerance, Reason: "must be in [0, Tolerance]"}
	case c.Grace < 0:
		return &MonitorError{Field: "Grace", Value: c.Grace, Reason: "must not be negative"}
	}
	return nil
}

func validRate(r float64) bool { return r >= 0 && !math.IsInf(r, 1) } // NaN fails r >= 0

// ComplianceMonitor measures a producer's send rate against the rate its
// consumer requested and raises an alert when the producer ignores the
// request: the check that makes an advisory signal's protection more than an
// assumption. The observed rate is the sends of the last Window, divided by
// Window; until one Window has passed since the first observation it is an
// underestimate, which errs toward no alert.
//
// After the grace period, with τ = Tolerance and ρ = RecoveryTolerance ≤ τ:
//
//	compliant → breach   when Observed > Requested × (1 + τ): OnAlert, Episode+1
//	breach → compliant   when Observed ≤ Requested × (1 + ρ): OnRecover
//
// so each episode alerts once. Times are arguments; the monitor's clock is
// the latest time seen, and an earlier time counts its sends if they are
// still in the window. A clock that jumped ahead is detected after one
// Window and the monitor restarts itself; [ComplianceMonitor.Reset]
// restarts it at once. Memory is O(Buckets), and each call costs
// O(Buckets), whatever the rates and times.
//
// A ComplianceMonitor is safe for concurrent use. Callbacks run one at a
// time, in the order of the transitions, never with the monitor's lock
// held, so a callback may call the monitor; a callback's panic reaches the
// caller that delivered it. The zero value is not usable: build one with
// [NewComplianceMonitor].
type ComplianceMonitor struct {
	// Sends are counted in a fixed ring of Buckets time buckets spanning
	// the window, which slides a bucket at a time. A time later than the
	// latest moves the clock forward however far (a producer idle for an
	// hour is judged on the hour's empty window); a jump beyond what a
	// time.Duration holds starts the window afresh. Sends older than the
	// window are dropped, so one late report from a stalled recorder cannot
	// disturb it. A timestamp from the future would otherwise drop every
	// later send as too old and report a compliant 0/s until real time
	// caught up: so when observations that all fall before the window,
	// with none within it in between, span one Window of their own, the
	// monitor restarts its clock and window at the newest of them (cutting
	// a grace period to end at most Grace after it). A transition raised
	// while another goroutine delivers callbacks is delivered by that
	// goroutine, and transitions after a callback's panic are still
	// delivered.
	mu  sync.Mutex
	cfg ComplianceMonitorConfig

	width     time.Duration // Window / Buckets
	ring      []monitorBucket
	origin    time.Time // where the clock (re)started; bucket indexes count from it
	started   bool
	latest    int64     // bucket index of the latest time seen; ≥ 0
	latestAt  time.Time // the latest time seen
	graceEnds time.Time

	// staleFrom is the earliest of the observations before the window seen
	// since the last one within it or later; stale says whether it is set.
	staleFrom time.Time
	stale     bool

	requested float64
	breached  bool
	episode   int

	pending    []monitorEvent // transitions not yet handed to callbacks
	delivering bool
}

type monitorBucket struct {
	index int64 // which bucket since origin this slot holds
	sends int
}

type monitorEvent struct {
	alert   ComplianceAlert
	recover bool
}

// NewComplianceMonitor returns a monitor for cfg, or an error matching
// [ErrInvalidMonitor] naming the first setting that cannot hold.
func NewComplianceMonitor(cfg ComplianceMonitorConfig) (*ComplianceMonitor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &ComplianceMonitor{
		cfg:       cfg,
		width:     cfg.Window / time.Duration(cfg.Buckets),
		ring:      make([]monitorBucket, cfg.Buckets),
		requested: cfg.RequestedRate,
	}
	m.clearRing()
	return m, nil
}

// clearRing empties every bucket.
func (m *ComplianceMonitor) clearRing() {
	for i := range m.ring {
		m.ring[i] = monitorBucket{index: math.MinInt64} // no slot holds a bucket
	}
}

// Reset forgets every observation: the window's sends and the clock. The
// next observation starts the clock afresh, as the first one did, and with
// it a new grace period, so the monitor can be moved back after a time from
// the future, or on to a new producer. The requested rate, the episode count
// and an open episode are kept: an episode under way closes, with OnRecover,
// only when the producer is judged recovered.
func (m *ComplianceMonitor) Reset() {
	m.mu.Lock()
	m.started = false
	m.stale = false
	m.clearRing()
	m.mu.Unlock()
}

// Record is shorthand for RecordAt(time.Now(), n).
func (m *ComplianceMonitor) Record(n int) { m.RecordAt(time.Now(), n) }

// RecordAt records that the producer sent n messages at t, then judges the
// producer as [ComplianceMonitor.CheckAt] does. n ≤ 0 records nothing but
// still judges. Sends older than the window are not counted.
func (m *ComplianceMonitor) RecordAt(t time.Time, n int) {
	m.mu.Lock()
	m.observe(t)
	if n > 0 {
		m.add(m.index(t), n)
	}
	m.judge()
	m.mu.Unlock()
	m.deliver()
}

// add counts n sends in bucket idx, unless it has slid out of the window.
// m.mu must be held.
func (m *ComplianceMonitor) add(idx int64, n int) {
	if idx <= m.latest-int64(len(m.ring)) {
		return
	}
	// idx is in (latest − Buckets, latest], so a slot holding another
	// bucket holds an older one: buckets in one slot differ by a multiple
	// of Buckets.
	b := &m.ring[m.slot(idx)]
	if b.index != idx {
		*b = monitorBucket{index: idx}
	}
	if b.sends > math.MaxInt-n {
		b.sends = math.MaxInt
	} else {
		b.sends += n
	}
}

// Check is shorthand for CheckAt(time.Now()).
func (m *ComplianceMonitor) Check() ComplianceSignature { return m.CheckAt(time.Now()) }

// CheckAt judges the producer at t (or at the latest time seen, if later),
// raising OnAlert or OnRecover on a transition, and returns the signature.
// Call it periodically: a producer that stops sending records nothing, and
// only a check notices that it recovered.
func (m *ComplianceMonitor) CheckAt(t time.Time) ComplianceSignature {
	m.mu.Lock()
	m.observe(t)
	sig := m.judge()
	m.mu.Unlock()
	m.deliver()
	return sig
}

// SetRequestedRate is shorthand for SetRequestedRateAt(time.Now(), rate).
func (m *ComplianceMonitor) SetRequestedRate(rate float64) error {
	return m.SetRequestedRateAt(time.Now(), rate)
}

// SetRequestedRateAt records that at t the consumer asked the producer for
// rate messages per second, and restarts the grace period from t: the
// producer is judged against the new rate only after it has had Grace to
// respond. An episode under way stays open until the producer is judged
// recovered. A rate that is negative, NaN or infinite returns an error
// matching [ErrInvalidMonitor] and changes nothing.
func (m *ComplianceMonitor) SetRequestedRateAt(t time.Time, rate float64) error {
	if !validRate(rate) {
		return &MonitorError{Field: "RequestedRate", Value: rate, Reason: "must be finite and not negative"}
	}
	m.mu.Lock()
	m.observe(t)
	m.requested = rate
	if t.Before(m.latestAt) {
		t = m.latestAt
	}
	m.graceEnds = t.Add(m.cfg.Grace)
	m.mu.Unlock()
	return nil
}

// observe advances the monitor's clock to t if t is later; the first call
// starts the clock and the grace period. It restarts the clock on a jump
// forward too far to measure, and on a clock that ran ahead (see
// [ComplianceMonitor]). m.mu must be held.
func (m *ComplianceMonitor) observe(t time.Time) {
	switch {
	case !m.started:
		m.started = true
		m.restart(t)
		m.graceEnds = t.Add(m.cfg.Grace)
	case t.After(m.latestAt):
		m.stale = false
		if t.Sub(m.origin) == maxDuration {
			// Saturated: t is past every bucket an int64 Duration can
			// number from the origin, and so past every bucket held.
			m.restart(t)
			return
		}
		m.latestAt = t
		m.latest = m.index(t)
	case m.index(t) > m.latest-int64(len(m.ring)):
		m.stale = false // within the window
	case !m.stale || t.Before(m.staleFrom):
		m.stale = true
		m.staleFrom = t
	case t.Sub(m.staleFrom) >= m.cfg.Window:
		// A Window's worth of observations before the window, and none
		// within it: the latest time was wrong, not these.
		m.restart(t)
		if g := t.Add(m.cfg.Grace); m.graceEnds.After(g) {
			m.graceEnds = g
		}
	}
}

const maxDuration = time.Duration(math.MaxInt64)

// restart empties the window and restarts the clock at t, leaving the grace
// period alone. m.mu must be held.
func (m *ComplianceMonitor) restart(t time.Time) {
	m.clearRing()
	m.origin = t
	m.latestAt = t
	m.latest = 0
	m.stale = false
}

// index returns the bucket that t falls in, counting from the origin;
// floor division, so times before the origin land in negative buckets. A
// time more than a Duration away saturates to the farthest bucket, which
// for a time before the origin is far out of the window, and observe
// restarts the clock before it would number a time after it.
func (m *ComplianceMonitor) index(t time.Time) int64 {
	d := t.Sub(m.origin) // saturates rather than wraps
	q := int64(d / m.width)
	if d%m.width < 0 {
		q--
	}
	return q
}

func (m *ComplianceMonitor) slot(idx int64) int {
	s := idx % int64(len(m.ring))
	if s < 0 {
		s += int64(len(m.ring))
	}
	return int(s)
}

// judge measures the window ending at the latest time, applies the state
// machine and queues any transition. m.mu must be held.
func (m *ComplianceMonitor) judge() ComplianceSignature {
	var sends float64
	for _, b := range m.ring {
		if b.index <= m.latest && b.index > m.latest-int64(len(m.ring)) {
			sends += float64(b.sends)
		}
	}
	sig := ComplianceSignature{
		At:                m.latestAt,
		Window:            m.cfg.Window,
		Observed:          sends / m.cfg.Window.Seconds(),
		Requested:         m.requested,
		Tolerance:         m.cfg.Tolerance,
		RecoveryTolerance: m.cfg.RecoveryTolerance,
	}
	switch {
	case m.latestAt.Before(m.graceEnds):
		sig.Verdict = ComplianceInGrace
		return sig
	case !m.breached && above(sig.Observed, m.requested*(1+m.cfg.Tolerance)):
		m.breached = true
		m.episode++
		sig.Verdict = ComplianceBreached
		m.pending = append(m.pending, monitorEvent{alert: ComplianceAlert{Episode: m.episode, Signature: sig}})
	case m.breached && !above(sig.Observed, m.requested*(1+m.cfg.RecoveryTolerance)):
		m.breached = false
		sig.Verdict = ComplianceMet
		m.pending = append(m.pending, monitorEvent{alert: ComplianceAlert{Episode: m.episode, Signature: sig}, recover: true})
	case m.breached:
		sig.Verdict = ComplianceBreached
	default:
		sig.Verdict = ComplianceMet
	}
	return sig
}

// above reports whether rate exceeds limit by more than float64 rounding:
// 100 × (1 + 0.1) is 110.00000000000001, and a tolerance written as 0.3
// could as easily round the other way and make exactly 130/s a breach.
func above(rate, limit float64) bool { return rate > limit*(1+1e-12) }

// deliver hands queued transitions to the callbacks, in order, unless
// another goroutine is already doing so. m.mu must not be held.
func (m *ComplianceMonitor) deliver() {
	m.mu.Lock()
	if m.delivering || len(m.pending) == 0 {
		m.mu.Unlock()
		return
	}
	m.delivering = true
	for len(m.pending) > 0 {
		ev := m.pending[0]
		m.pending = m.pending[1:]
		m.mu.Unlock()
		m.call(ev)
		m.mu.Lock()
	}
	m.pending = nil
	m.delivering = false
	m.mu.Unlock()
}

// call runs one callback; a panicking callback must not leave the monitor
// believing it is still delivering, or no alert would ever be delivered again.
func (m *ComplianceMonitor) call(ev monitorEvent) {
	defer func() {
		if r := recover(); r != nil {
			m.mu.Lock()
			m.delivering = false
			m.mu.Unlock()
			panic(r)
		}
	}()
	if ev.recover {
		if m.cfg.OnRecover != nil {
			m.cfg.OnRecover(ev.alert)
		}
	} else if m.cfg.OnAlert != nil {
		m.cfg.OnAlert(ev.alert)
	}
}
