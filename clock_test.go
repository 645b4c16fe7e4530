package backpressure

import (
	"testing"
	"time"
)

// The clock is part of the settings: b.now reads Config.Clock, SetConfig
// replaces it, Config returns it, and nil means the wall clock.
func TestClockIsASetting(t *testing.T) {
	fixed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return fixed }
	b := mustNew(t, Config{BatchSize: 1, DefaultQuota: 1, Clock: clock}, allShards(t, 1))
	if got := b.now(); !got.Equal(fixed) {
		t.Fatalf("now() = %v with Config.Clock set, want %v", got, fixed)
	}
	if b.Config().Clock == nil {
		t.Fatalf("Config().Clock = nil, want the clock New was given")
	}
	if err := b.SetConfig(Config{BatchSize: 1, DefaultQuota: 1}); err != nil {
		t.Fatal(err)
	}
	if got := b.now(); got.Equal(fixed) || b.Config().Clock != nil {
		t.Fatalf("after SetConfig without a Clock: now() = %v, Config().Clock nil %v; want the wall clock and nil",
			got, b.Config().Clock == nil)
	}
	later := fixed.Add(time.Hour)
	if err := b.SetConfig(Config{BatchSize: 1, DefaultQuota: 1, Clock: func() time.Time { return later }}); err != nil {
		t.Fatal(err)
	}
	if got := b.now(); !got.Equal(later) {
		t.Fatalf("now() = %v after SetConfig with a new Clock, want %v", got, later)
	}
	var zero Backpressure
	if got := zero.now(); got.IsZero() {
		t.Fatalf("zero Backpressure: now() = %v, want the wall clock", got)
	}
}
