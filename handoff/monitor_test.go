package handoff

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// monT0 is an arbitrary origin for injected times.
var monT0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

const monTick = 100 * time.Millisecond // the bucket width of testMonitorConfig

// monitorRecorder collects a monitor's callbacks.
type monitorRecorder struct {
	mu       sync.Mutex
	alerts   []ComplianceAlert
	recovers []ComplianceAlert
}

func (r *monitorRecorder) counts() (alerts, recovers int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.alerts), len(r.recovers)
}

// testMonitorConfig asks for 100/s over a 1s window of ten 100ms buckets:
// breach above 150/s, recovery at or below 110/s.
func testMonitorConfig(r *monitorRecorder) ComplianceMonitorConfig {
	return ComplianceMonitorConfig{
		RequestedRate:     100,
		Window:            time.Second,
		Buckets:           10,
		Tolerance:         0.5,
		RecoveryTolerance: 0.1,
		Grace:             time.Second,
		OnAlert: func(a ComplianceAlert) {
			r.mu.Lock()
			r.alerts = append(r.alerts, a)
			r.mu.Unlock()
		},
		OnRecover: func(a ComplianceAlert) {
			r.mu.Lock()
			r.recovers = append(r.recovers, a)
			r.mu.Unlock()
		},
	}
}

// monProduce records rate/10 sends at the start of each of ticks buckets from
// tick *at, advancing *at, and returns the signature checked at the last
// tick.
func monProduce(m *ComplianceMonitor, at *int, rate, ticks int) ComplianceSignature {
	var sig ComplianceSignature
	for range ticks {
		now := monT0.Add(time.Duration(*at) * monTick)
		m.RecordAt(now, rate/10)
		sig = m.CheckAt(now)
		*at++
	}
	return sig
}

func TestMonitorEpisodes(t *testing.T) {
	var rec monitorRecorder
	m, err := NewComplianceMonitor(testMonitorConfig(&rec))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		rate     int // sends per second
		ticks    int
		verdict  ComplianceVerdict
		observed float64
		alerts   int
		recovers int
	}{
		{"grace, window filling", 100, 10, ComplianceInGrace, 100, 0, 0},
		{"compliant", 100, 20, ComplianceMet, 100, 0, 0},
		{"at the tolerance: not a breach", 150, 20, ComplianceMet, 150, 0, 0},
		{"non-compliant: one alert", 200, 10, ComplianceBreached, 200, 1, 0},
		{"still non-compliant: no second alert", 200, 30, ComplianceBreached, 200, 1, 0},
		{"below tolerance, above recovery: still the same episode", 130, 30, ComplianceBreached, 130, 1, 0},
		{"recovered", 100, 10, ComplianceMet, 100, 1, 1},
		{"above recovery, within tolerance: no alert", 130, 30, ComplianceMet, 130, 1, 1},
		{"relapse: a second alert", 200, 10, ComplianceBreached, 200, 2, 1},
		{"producer stops: recovered by a check alone", 0, 10, ComplianceMet, 0, 2, 2},
	}
	at := 0
	for i, st := range steps {
		sig := monProduce(m, &at, st.rate, st.ticks)
		alerts, recovers := rec.counts()
		if sig.Verdict != st.verdict || sig.Observed != st.observed || alerts != st.alerts || recovers != st.recovers {
			t.Fatalf("step %d (%s): %d/s for %d ticks: %v, %d alerts, %d recoveries; want %v at %v/s, %d, %d",
				i, st.name, st.rate, st.ticks, sig, alerts, recovers, st.verdict, st.observed, st.alerts, st.recovers)
		}
	}

	// Each transition fires at the first bucket whose window crosses the
	// threshold, with the signature that crossed it.
	want := []struct {
		list     []ComplianceAlert
		i        int
		episode  int
		at       int // tick
		observed float64
	}{
		// Tick 50 is the first at 200/s, after 150/s: 9×15 + 20 = 155 > 150.
		{rec.alerts, 0, 1, 50, 155},
		// From tick 120 at 100/s after 130/s: 13(10−k) + 10k ≤ 110 first at
		// k = 7 buckets, tick 126, with 109.
		{rec.recovers, 0, 1, 126, 109},
		// From tick 160 at 200/s after 130/s: 13(10−k) + 20k > 150 first at
		// k = 3, tick 162, with 151.
		{rec.alerts, 1, 2, 162, 151},
		// From tick 170 nothing is sent: the 200/s buckets slide out one by
		// one, and five of them (100/s) first satisfy ≤ 110 at tick 174.
		{rec.recovers, 1, 2, 174, 100},
	}
	for _, w := range want {
		a := w.list[w.i]
		if a.Episode != w.episode || !a.Signature.At.Equal(monT0.Add(time.Duration(w.at)*monTick)) || a.Signature.Observed != w.observed {
			t.Errorf("transition %d of episode %d: %+v; want episode %d at monTick %d, observed %v",
				w.i, w.episode, a, w.episode, w.at, w.observed)
		}
	}
}

func TestMonitorGrace(t *testing.T) {
	var rec monitorRecorder
	cfg := testMonitorConfig(&rec)
	cfg.Grace = 2 * time.Second
	m, err := NewComplianceMonitor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := 0
	// Far over the rate from the start, but within the grace period.
	if sig := monProduce(m, &at, 1000, 20); sig.Verdict != ComplianceInGrace {
		t.Fatalf("1000/s for the 2s grace: %v, want in-grace", sig)
	}
	if alerts, _ := rec.counts(); alerts != 0 {
		t.Fatalf("alerts during grace: %d, want 0", alerts)
	}
	// Grace ends at tick 20 exactly.
	if sig := monProduce(m, &at, 1000, 1); sig.Verdict != ComplianceBreached {
		t.Fatalf("at the end of grace: %v, want non-compliant", sig)
	}
	if alerts, _ := rec.counts(); alerts != 1 {
		t.Fatalf("alerts at the end of grace: %d, want 1", alerts)
	}
	monProduce(m, &at, 100, 19) // recover: at tick 39 the window is all 100/s
	if _, recovers := rec.counts(); recovers != 1 {
		t.Fatalf("recoveries: %d, want 1", recovers)
	}

	// A new request restarts the grace: the producer has 2s to slow to 50/s.
	now := monT0.Add(time.Duration(at) * monTick)
	if err := m.SetRequestedRateAt(now, 50); err != nil {
		t.Fatal(err)
	}
	if sig := monProduce(m, &at, 100, 20); sig.Verdict != ComplianceInGrace || sig.Requested != 50 {
		t.Fatalf("100/s in the new grace: %v, want in-grace at requested 50/s", sig)
	}
	if sig := monProduce(m, &at, 100, 1); sig.Verdict != ComplianceBreached {
		t.Fatalf("100/s after the new grace: %v, want non-compliant against 50/s", sig)
	}
	if alerts, _ := rec.counts(); alerts != 2 {
		t.Fatalf("alerts after ignoring the new request: %d, want 2", alerts)
	}

	// A producer that obeys within the grace is never alerted.
	var rec2 monitorRecorder
	cfg2 := testMonitorConfig(&rec2)
	cfg2.Grace = 2 * time.Second
	m2, _ := NewComplianceMonitor(cfg2)
	at = 0
	monProduce(m2, &at, 100, 10)
	if err := m2.SetRequestedRateAt(monT0.Add(time.Duration(at)*monTick), 50); err != nil {
		t.Fatal(err)
	}
	monProduce(m2, &at, 100, 5)
	if sig := monProduce(m2, &at, 50, 40); sig.Verdict != ComplianceMet {
		t.Fatalf("obeyed within grace: %v, want compliant", sig)
	}
	if alerts, _ := rec2.counts(); alerts != 0 {
		t.Fatalf("alerts for a producer that obeyed within grace: %d, want 0", alerts)
	}
}

func TestMonitorTolerance(t *testing.T) {
	tests := []struct {
		requested float64
		tolerance float64
		rate      int
		alert     bool
	}{
		{100, 0, 100, false},
		{100, 0, 110, true},
		{100, 0.25, 120, false},
		{100, 0.25, 130, true},
		{100, 0.5, 150, false},
		{100, 0.5, 160, true},
		{0, 0, 10, true}, // a request to stop: any send is a breach
		{0, 10, 10, true},
		{0, 0, 0, false},
	}
	for i, tt := range tests {
		var rec monitorRecorder
		cfg := testMonitorConfig(&rec)
		cfg.RequestedRate, cfg.Tolerance, cfg.RecoveryTolerance = tt.requested, tt.tolerance, 0
		m, err := NewComplianceMonitor(cfg)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		at := 0
		sig := monProduce(m, &at, tt.rate, 30)
		alerts, _ := rec.counts()
		if (alerts == 1) != tt.alert || alerts > 1 || (sig.Verdict == ComplianceBreached) != tt.alert {
			t.Errorf("case %d: %d/s against %v/s, tolerance %v: %v, %d alerts; want alert %v",
				i, tt.rate, tt.requested, tt.tolerance, sig, alerts, tt.alert)
		}
	}
}

// TestMonitorToleranceRounding pins the boundary where float64 puts it on
// the wrong side: 100 × (1 + 0.15) is 114.99999999999999, yet 115/s is
// exactly 15% over and not a breach.
func TestMonitorToleranceRounding(t *testing.T) {
	tests := []struct {
		requested, tolerance float64
		sends                int
		breach               bool
	}{
		{100, 0.15, 115, false},
		{100, 0.15, 116, true},
		{100, 0.57, 157, false},
		{300, 0.36, 408, false},
		{300, 0.36, 409, true},
	}
	for i, tt := range tests {
		m, err := NewComplianceMonitor(ComplianceMonitorConfig{RequestedRate: tt.requested, Tolerance: tt.tolerance, Window: time.Second, Buckets: 1})
		if err != nil {
			t.Fatal(err)
		}
		m.RecordAt(monT0, tt.sends)
		if sig := m.CheckAt(monT0); (sig.Verdict == ComplianceBreached) != tt.breach {
			t.Errorf("case %d: %d sends in 1s against %v/s, tolerance %v: %v; want breach %v",
				i, tt.sends, tt.requested, tt.tolerance, sig, tt.breach)
		}
	}
}

func TestMonitorOldAndSkewedTimes(t *testing.T) {
	var rec monitorRecorder
	cfg := testMonitorConfig(&rec)
	cfg.Grace = 0
	m, _ := NewComplianceMonitor(cfg)
	m.RecordAt(monT0.Add(5*time.Second), 10)
	// A late report from a recorder with a slower clock still counts if it
	// is within the window; the verdict stays at the latest time.
	m.RecordAt(monT0.Add(5*time.Second-500*time.Millisecond), 20)
	m.RecordAt(monT0.Add(5*time.Second-2*time.Second), 1000) // slid out of the window
	sig := m.CheckAt(monT0)                                  // earlier than the latest time
	if sig.Observed != 30 || !sig.At.Equal(monT0.Add(5*time.Second)) {
		t.Fatalf("signature %v at %v, want 30/s at monT0+5s", sig, sig.At)
	}
	// Before the origin: floor division puts it in a negative bucket, out
	// of the window.
	m2, _ := NewComplianceMonitor(cfg)
	m2.RecordAt(monT0, 1)
	m2.RecordAt(monT0.Add(-time.Nanosecond), 1)
	if sig := m2.CheckAt(monT0); sig.Observed != 2 {
		t.Fatalf("two sends within a second: %v, want 2/s", sig)
	}
	if sig := m2.CheckAt(monT0.Add(time.Second - monTick)); sig.Observed != 1 {
		t.Fatalf("one bucket later than the window of the early send: %v, want 1/s", sig)
	}
}

func TestMonitorSaturatesCounts(t *testing.T) {
	cfg := ComplianceMonitorConfig{Window: time.Second, RequestedRate: 1}
	m, _ := NewComplianceMonitor(cfg)
	m.RecordAt(monT0, math.MaxInt)
	m.RecordAt(monT0, math.MaxInt)
	m.RecordAt(monT0, -5) // records nothing
	if sig := m.CheckAt(monT0); sig.Observed != float64(math.MaxInt) || sig.Verdict != ComplianceBreached {
		t.Fatalf("signature %v, want MaxInt/s, non-compliant", sig)
	}
}

// TestMonitorMemoryBounded records 10⁶ sends over 1000 windows, with 50
// episodes of non-compliance, and checks that the monitor's state neither
// grows nor drifts: the ring keeps its Buckets slots, each holding a bucket
// of the current window, no transition is left queued, a record allocates
// nothing, and the observed rate is exact at the end of every block.
func TestMonitorMemoryBounded(t *testing.T) {
	var rec monitorRecorder
	cfg := ComplianceMonitorConfig{Window: time.Second, Buckets: 4, RequestedRate: 1500}
	cfg.OnAlert = testMonitorConfig(&rec).OnAlert
	cfg.OnRecover = testMonitorConfig(&rec).OnRecover
	m, err := NewComplianceMonitor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const blocks, msPerBlock = 100, 10_000 // 10s blocks, alternately 1000/s and 2000/s
	sends := 0
	for blk := range blocks {
		perMs := 1 + blk%2
		for ms := range msPerBlock {
			m.RecordAt(monT0.Add(time.Duration(blk*msPerBlock+ms)*time.Millisecond), perMs)
			sends += perMs
		}
		// The window ending at the block's last millisecond lies within it.
		sig := m.CheckAt(monT0.Add(time.Duration((blk+1)*msPerBlock-1) * time.Millisecond))
		want := float64(1000 * perMs)
		if sig.Observed != want {
			t.Fatalf("block %d: observed %v/s, want %v", blk, sig.Observed, want)
		}
		m.mu.Lock()
		ring, pending, latest := m.ring, m.pending, m.latest
		for i, b := range ring {
			if b.index <= latest-int64(len(ring)) || b.index > latest || m.slot(b.index) != i {
				t.Errorf("block %d: slot %d holds bucket %d, outside the window ending at bucket %d", blk, i, b.index, latest)
			}
		}
		m.mu.Unlock()
		if len(ring) != 4 || cap(ring) != 4 || len(pending) != 0 {
			t.Fatalf("block %d: ring %d/%d slots, %d transitions queued; want 4/4, 0", blk, len(ring), cap(ring), len(pending))
		}
	}
	if sends != 1_500_000 {
		t.Fatalf("recorded %d sends, want 1.5e6", sends)
	}
	if alerts, recovers := rec.counts(); alerts != blocks/2 || recovers != blocks/2-1 {
		t.Fatalf("%d alerts, %d recoveries; want %d, %d", alerts, recovers, blocks/2, blocks/2-1)
	}
	// In steady state a record, one that slides the window included, costs
	// no memory.
	next := blocks * msPerBlock
	if allocs := testing.AllocsPerRun(1000, func() {
		m.RecordAt(monT0.Add(time.Duration(next)*time.Millisecond), 1)
		next++
	}); allocs != 0 {
		t.Fatalf("RecordAt allocated %v times per call, want 0", allocs)
	}
}

// monProduceFrom is monProduce from an arbitrary origin: rate/10 sends at the
// start of each of ticks buckets from origin + *at ticks, each checked; it
// returns the signature checked at the last tick.
func monProduceFrom(m *ComplianceMonitor, origin time.Time, at *int, rate, ticks int) ComplianceSignature {
	var sig ComplianceSignature
	for range ticks {
		now := origin.Add(time.Duration(*at) * monTick)
		m.RecordAt(now, rate/10)
		sig = m.CheckAt(now)
		*at++
	}
	return sig
}

// TestMonitorFarFirstTime: a first observation more than 292 years before
// the next (the zero time.Time, say) must not break the window: the sends
// that follow are measured in their own buckets and the window slides.
func TestMonitorFarFirstTime(t *testing.T) {
	for _, first := range []time.Time{
		{},
		time.Unix(-1<<62, 0),
		monT0.AddDate(-293, 0, 0),
		monT0.Add(-time.Duration(math.MaxInt64)), // exactly at the limit
	} {
		var rec monitorRecorder
		m, err := NewComplianceMonitor(testMonitorConfig(&rec))
		if err != nil {
			t.Fatal(err)
		}
		m.CheckAt(first)
		at := 0
		// A compliant producer: 50/s against 100/s for 60s.
		for i := range 600 {
			sig := monProduceFrom(m, monT0, &at, 50, 1)
			if sig.Verdict == ComplianceBreached || sig.Observed > 50 || (i >= 9 && sig.Observed != 50) {
				t.Fatalf("first time %v, tick %d at 50/s: %v; want compliant at 50/s once the window has filled", first, i, sig)
			}
		}
		if alerts, _ := rec.counts(); alerts != 0 {
			t.Fatalf("first time %v: %d alerts for a compliant producer", first, alerts)
		}
		// And it still alerts on a breach.
		if sig := monProduceFrom(m, monT0, &at, 200, 10); sig.Verdict != ComplianceBreached || sig.Observed != 200 {
			t.Fatalf("first time %v: 200/s: %v, want non-compliant at 200/s", first, sig)
		}
	}
}

// TestMonitorFarForwardJump: a jump forward of more than 292 years (past
// what a time.Duration holds) starts the window afresh at the new time.
func TestMonitorFarForwardJump(t *testing.T) {
	var rec monitorRecorder
	cfg := testMonitorConfig(&rec)
	cfg.Grace = 0
	m, _ := NewComplianceMonitor(cfg)
	m.RecordAt(monT0, 1000)
	later := monT0.AddDate(300, 0, 0)
	at := 0
	// The breach opened at monT0 closes: 50/s is within the recovery
	// tolerance.
	if sig := monProduceFrom(m, later, &at, 50, 20); sig.Observed != 50 || sig.Verdict != ComplianceMet || !sig.At.Equal(later.Add(19*monTick)) {
		t.Fatalf("300 years on at 50/s: %v at %v, want compliant at 50/s", sig, sig.At)
	}
	if alerts, recovers := rec.counts(); alerts != 1 || recovers != 1 {
		t.Fatalf("%d alerts, %d recoveries; want 1, 1", alerts, recovers)
	}
}

// TestMonitorFutureTimeDoesNotSilence: one timestamp far in the future must
// not silence the monitor. Once observations a Window and more behind it
// span a Window of their own, the monitor takes them for the clock, and a
// non-compliant producer is alerted on.
func TestMonitorFutureTimeDoesNotSilence(t *testing.T) {
	for _, skew := range []time.Duration{1000 * time.Hour, 2 * time.Second, time.Duration(math.MaxInt64)} {
		var rec monitorRecorder
		cfg := testMonitorConfig(&rec)
		cfg.Grace = 0
		m, _ := NewComplianceMonitor(cfg)
		m.CheckAt(monT0.Add(skew))
		// Asking for a new rate at the skewed time starts a grace period
		// there; it must not outlast the skew either.
		if err := m.SetRequestedRateAt(monT0.Add(skew), 100); err != nil {
			t.Fatal(err)
		}
		at := 0
		sig := monProduceFrom(m, monT0, &at, 200, 30)
		if alerts, _ := rec.counts(); alerts != 1 || sig.Verdict != ComplianceBreached || sig.Observed != 200 {
			t.Fatalf("skew %v: 200/s against 100/s for 3s after a skewed time: %v, %d alerts; want non-compliant at 200/s, 1 alert",
				skew, sig, alerts)
		}
	}
}

// TestMonitorLateReportKeepsWindow: a single report from before the window
// (a stalled recorder) is dropped and leaves the window as it was, and so
// do late reports interleaved with current ones, however many.
func TestMonitorLateReportKeepsWindow(t *testing.T) {
	var rec monitorRecorder
	cfg := testMonitorConfig(&rec)
	cfg.Grace = 0
	m, _ := NewComplianceMonitor(cfg)
	at := 0
	monProduceFrom(m, monT0, &at, 100, 30)
	// A recorder stalled for 2s reports every tick, between current reports.
	for range 30 {
		m.RecordAt(monT0.Add(time.Duration(at-20)*monTick), 1000)
		if sig := monProduceFrom(m, monT0, &at, 100, 1); sig.Observed != 100 || sig.Verdict != ComplianceMet {
			t.Fatalf("tick %d with late reports interleaved: %v, want compliant at 100/s", at, sig)
		}
	}
	// A burst of late reports spanning less than a Window.
	for i := range 9 {
		m.RecordAt(monT0.Add(time.Duration(at-30+i)*monTick), 1000)
	}
	if sig := m.CheckAt(monT0.Add(time.Duration(at-1) * monTick)); sig.Observed != 100 || !sig.At.Equal(monT0.Add(time.Duration(at-1)*monTick)) {
		t.Fatalf("after a burst of late reports: %v at %v, want 100/s at tick %d", sig, sig.At, at-1)
	}
}

// TestMonitorReset: Reset forgets the window and the clock, so the next
// observation starts afresh with a new grace period, while an open episode
// stays open until the producer is judged recovered.
func TestMonitorReset(t *testing.T) {
	var rec monitorRecorder
	m, _ := NewComplianceMonitor(testMonitorConfig(&rec))
	m.CheckAt(monT0.Add(1000 * time.Hour))
	at := 0
	monProduceFrom(m, monT0.Add(1000*time.Hour), &at, 200, 20) // breach
	if alerts, _ := rec.counts(); alerts != 1 {
		t.Fatalf("%d alerts, want 1", alerts)
	}
	m.Reset()
	at = 0
	if sig := monProduceFrom(m, monT0, &at, 50, 10); sig.Verdict != ComplianceInGrace || sig.Observed != 50 || !sig.At.Equal(monT0.Add(9*monTick)) {
		t.Fatalf("after Reset, at an earlier time: %v at %v, want in-grace at 50/s at monT0+900ms", sig, sig.At)
	}
	if sig := monProduceFrom(m, monT0, &at, 50, 1); sig.Verdict != ComplianceMet {
		t.Fatalf("after the new grace: %v, want compliant", sig)
	}
	if alerts, recovers := rec.counts(); alerts != 1 || recovers != 1 {
		t.Fatalf("%d alerts, %d recoveries; want 1, 1 (the open episode closed)", alerts, recovers)
	}
	if sig := monProduceFrom(m, monT0, &at, 200, 10); sig.Verdict != ComplianceBreached {
		t.Fatalf("200/s after Reset: %v, want non-compliant", sig)
	}
	if alerts, _ := rec.counts(); alerts != 2 {
		t.Fatalf("%d alerts, want 2", alerts)
	}
}

func TestMonitorConcurrentRecord(t *testing.T) {
	var alerts, recovers atomic.Int64
	var m *ComplianceMonitor
	cfg := ComplianceMonitorConfig{
		RequestedRate: 10,
		Window:        time.Second,
		OnAlert: func(ComplianceAlert) {
			alerts.Add(1)
			m.CheckAt(monT0) // a callback may call back into the monitor
		},
		OnRecover: func(ComplianceAlert) { recovers.Add(1) },
	}
	m, err := NewComplianceMonitor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, sends = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range sends {
				// Within the first 900ms, so every send stays in the window
				// ending at the latest time.
				m.RecordAt(monT0.Add(time.Duration((g*sends+i)%9)*monTick), 1)
				if i%50 == 0 {
					m.CheckAt(monT0)
				}
			}
		})
	}
	wg.Wait()
	sig := m.CheckAt(monT0)
	if sig.Observed != goroutines*sends || sig.Verdict != ComplianceBreached {
		t.Fatalf("signature %v, want %d/s, non-compliant", sig, goroutines*sends)
	}
	if alerts.Load() != 1 || recovers.Load() != 0 {
		t.Fatalf("%d alerts, %d recoveries; want 1, 0", alerts.Load(), recovers.Load())
	}
}

func TestMonitorCallbackPanicDoesNotWedge(t *testing.T) {
	var alerts int
	cfg := ComplianceMonitorConfig{RequestedRate: 10, Window: time.Second}
	cfg.OnAlert = func(ComplianceAlert) {
		alerts++
		if alerts == 1 {
			panic("pager down")
		}
	}
	m, _ := NewComplianceMonitor(cfg)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the callback's panic was swallowed")
			}
		}()
		m.RecordAt(monT0, 100)
	}()
	m.RecordAt(monT0.Add(2*time.Second), 0)   // recover
	m.RecordAt(monT0.Add(3*time.Second), 100) // relapse
	if alerts != 2 {
		t.Fatalf("alerts after a panicking callback: %d, want 2", alerts)
	}
}

func TestMonitorConfigErrors(t *testing.T) {
	ok := ComplianceMonitorConfig{Window: time.Second}
	tests := []struct {
		mod   func(*ComplianceMonitorConfig)
		field string
	}{
		{func(c *ComplianceMonitorConfig) { c.Window = 0 }, "Window"},
		{func(c *ComplianceMonitorConfig) { c.Window = -time.Second }, "Window"},
		{func(c *ComplianceMonitorConfig) { c.Window = time.Second + 1 }, "Window"},
		{func(c *ComplianceMonitorConfig) { c.Window, c.Buckets = 5, 10 }, "Window"},
		{func(c *ComplianceMonitorConfig) { c.Buckets = -1 }, "Buckets"},
		{func(c *ComplianceMonitorConfig) { c.Buckets = MaxMonitorBuckets + 1 }, "Buckets"},
		{func(c *ComplianceMonitorConfig) { c.RequestedRate = -1 }, "RequestedRate"},
		{func(c *ComplianceMonitorConfig) { c.RequestedRate = math.NaN() }, "RequestedRate"},
		{func(c *ComplianceMonitorConfig) { c.RequestedRate = math.Inf(1) }, "RequestedRate"},
		{func(c *ComplianceMonitorConfig) { c.Tolerance = -0.1 }, "Tolerance"},
		{func(c *ComplianceMonitorConfig) { c.Tolerance = math.NaN() }, "Tolerance"},
		{func(c *ComplianceMonitorConfig) { c.Tolerance, c.RecoveryTolerance = 0.1, 0.2 }, "RecoveryTolerance"},
		{func(c *ComplianceMonitorConfig) { c.RecoveryTolerance = -1 }, "RecoveryTolerance"},
		{func(c *ComplianceMonitorConfig) { c.Grace = -1 }, "Grace"},
	}
	for i, tt := range tests {
		cfg := ok
		tt.mod(&cfg)
		m, err := NewComplianceMonitor(cfg)
		var me *MonitorError
		if m != nil || !errors.As(err, &me) || me.Field != tt.field || !errors.Is(err, ErrInvalidMonitor) {
			t.Errorf("case %d: NewComplianceMonitor(%+v) = %v, %v; want nil, *MonitorError on %s", i, cfg, m, err, tt.field)
		}
	}
	m, err := NewComplianceMonitor(ok)
	if err != nil {
		t.Fatalf("NewComplianceMonitor(%+v) = %v", ok, err)
	}
	if len(m.ring) != DefaultMonitorBuckets {
		t.Errorf("zero Buckets gave %d buckets, want %d", len(m.ring), DefaultMonitorBuckets)
	}
	m.RecordAt(monT0, 3)
	for _, rate := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := m.SetRequestedRateAt(monT0, rate); !errors.Is(err, ErrInvalidMonitor) {
			t.Errorf("SetRequestedRateAt(%v) = %v, want ErrInvalidMonitor", rate, err)
		}
	}
	if sig := m.CheckAt(monT0); sig.Requested != 0 {
		t.Errorf("a rejected rate changed the request to %v", sig.Requested)
	}
	want := "handoff: invalid compliance monitor: Window = 0s: must be positive"
	if _, err := NewComplianceMonitor(ComplianceMonitorConfig{}); err == nil || err.Error() != want {
		t.Errorf("NewComplianceMonitor(zero) = %v, want %q", err, want)
	}
}

func TestComplianceStrings(t *testing.T) {
	for v, want := range map[ComplianceVerdict]string{
		ComplianceUnmeasured: "unmeasured", ComplianceInGrace: "in-grace", ComplianceMet: "compliant",
		ComplianceBreached: "non-compliant", 4: "ComplianceVerdict(4)",
	} {
		if v.String() != want {
			t.Errorf("ComplianceVerdict(%d).String() = %q, want %q", uint8(v), v.String(), want)
		}
	}
	sig := ComplianceSignature{Window: time.Second, Observed: 155, Requested: 100, Tolerance: 0.5, Verdict: ComplianceBreached}
	if got, want := sig.String(), "non-compliant: observed 155/s, requested 100/s, tolerance 50% over 1s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if sig.Verified() || !(ComplianceSignature{Verdict: ComplianceMet}).Verified() {
		t.Errorf("Verified: only a compliant signature verifies")
	}
}

func TestMonitorWallClockShorthands(t *testing.T) {
	m, _ := NewComplianceMonitor(ComplianceMonitorConfig{Window: time.Hour, RequestedRate: 1e6})
	m.Record(1)
	if err := m.SetRequestedRate(2e6); err != nil {
		t.Fatal(err)
	}
	if sig := m.Check(); sig.Verdict != ComplianceMet || sig.Requested != 2e6 {
		t.Fatalf("Check() = %v, want compliant against 2e6/s", sig)
	}
}
