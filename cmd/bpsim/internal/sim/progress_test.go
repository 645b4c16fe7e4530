package sim

import (
	"strings"
	"testing"
	"time"
)

func TestProgressPlainLines(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	p := &progress{w: &b, now: func() time.Time { return now }}
	p.start(Unscoped, 1, 3, 100)
	for i := range 50 {
		now = now.Add(time.Second)
		p.tick(i, i)
	}
	p.done(&PolicyReport{Policy: Unscoped, Settled: 100, Ticks: 50, Makespan: 5 * time.Second, Wall: 2 * time.Second})
	want := "bpsim: [1/3] unscoped: running 100 rows\n" +
		"bpsim: [1/3] unscoped: 100 rows settled in 50 ticks (5.0s simulated), 2.0s\n"
	if b.String() != want {
		t.Errorf("not a terminal: wrote %q, want %q", b.String(), want)
	}
}

func TestProgressTerminalRedraws(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	p := &progress{w: &b, terminal: true, now: func() time.Time { return now }}
	p.start(Backpressure, 3, 3, 10)
	p.tick(1, 1) // too soon: a quick run stays quiet
	if b.Len() != 0 {
		t.Fatalf("drew %q before the delay", b.String())
	}
	now = now.Add(2 * time.Second)
	p.tick(2, 5)
	p.tick(3, 6) // within progressEvery of the last draw: skipped
	now = now.Add(time.Second)
	p.tick(4, 7)
	p.done(&PolicyReport{Policy: Backpressure, Settled: 10, Ticks: 9})
	out := b.String()
	if n := strings.Count(out, "\r\x1b[K["); n != 2 {
		t.Errorf("redrew %d times, want 2: %q", n, out)
	}
	if !strings.Contains(out, "5/10 rows settled (50%)") || !strings.HasSuffix(out, "10 rows settled in 9 ticks (0s simulated), 0.0s\n") {
		t.Errorf("unexpected progress output %q", out)
	}
}

// TestProgressNil checks that progress with no writer reads no clock and
// changes nothing, whatever it is told.
func TestProgressNil(t *testing.T) {
	p := &progress{now: func() time.Time { t.Fatal("progress with no writer read the clock"); return time.Time{} }, terminal: true}
	p.start(Unscoped, 1, 1, 1)
	p.tick(1, 1)
	p.abort()
	p.done(&PolicyReport{})
	if p.policy != "" || p.total != 0 || p.drawn || !p.started.IsZero() {
		t.Errorf("progress with no writer changed its state: %+v", p)
	}
}

// TestProgressAbortClearsTheLine checks that a run ending in an error
// clears a drawn status line, so the error starts its own line, and that
// it writes nothing when no line was drawn.
func TestProgressAbortClearsTheLine(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	p := &progress{w: &b, terminal: true, now: func() time.Time { return now }}
	p.start(Unscoped, 1, 3, 10)
	p.abort()
	if b.Len() != 0 {
		t.Fatalf("abort with no line drawn wrote %q", b.String())
	}
	now = now.Add(2 * time.Second)
	p.tick(2, 5)
	p.abort()
	if out := b.String(); !strings.HasSuffix(out, "\r\x1b[K") || strings.Count(out, "\r\x1b[K") != 2 {
		t.Errorf("abort after a draw wrote %q, want the line cleared", out)
	}
}
