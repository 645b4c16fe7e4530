package backpressure

import "time"

// PendingCountCap exposes pendingCountCap to the external tests.
func (b *Backpressure) PendingCountCap() int { return b.pendingCountCap() }

// CountCap exposes a plan's count cap to the external tests.
func (p Plan) CountCap() int { return p.countCap }

// SetAheadNoExpiry turns off the age limit of counts read ahead
// (SweepAhead), so that a test uses them whatever the machine's pace, and
// returns a func that restores it. Tests that call it must not run in
// parallel.
func SetAheadNoExpiry() (restore func()) {
	old := noExpiry
	noExpiry = true
	return func() { noExpiry = old }
}

// WaitAhead waits until every read-ahead b started has finished, used or
// not, so that a test can change its store without racing a read.
func WaitAhead(b *Backpressure) { b.e.reads.Wait() }

// AheadPending reports whether b holds counts read ahead for its next
// SweepAhead.
func AheadPending(b *Backpressure) bool {
	b.e.sem <- struct{}{}
	defer b.e.unlock()
	return b.e.ahead != nil
}

// NewAt is New with the clock rates read when no time is given.
func NewAt(cfg Config, f OwnedShardFraction, clock func() time.Time) (*Backpressure, error) {
	return newAt(cfg, f, clock)
}
