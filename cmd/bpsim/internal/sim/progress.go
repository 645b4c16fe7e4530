package sim

import (
	"fmt"
	"io"
	"time"
)

// progress reports a run as it goes. On a terminal it redraws one status
// line, and only once the run has taken a moment, so quick runs stay quiet;
// elsewhere (a pipe, a file, CI) it writes one plain line per policy.
// Wall-clock time is read here only, never by the simulation.
type progress struct {
	w        io.Writer // nil: report nothing
	terminal bool
	now      func() time.Time

	policy       Policy
	index, count int // policy index (1-based) and the number of policies
	total        int // rows per policy
	started      time.Time
	lastDraw     time.Time
	drawn        bool
}

// Terminal redraws wait this long after a policy starts, then at most this
// often.
const (
	progressDelay = 1 * time.Second
	progressEvery = 100 * time.Millisecond
)

func (p *progress) start(policy Policy, index, count, total int) {
	if p.w == nil {
		return
	}
	p.policy, p.index, p.count, p.total = policy, index, count, total
	p.started, p.drawn = p.now(), false
	if !p.terminal {
		fmt.Fprintf(p.w, "bpsim: [%d/%d] %s: running %d rows\n", index, count, policy, total)
	}
}

func (p *progress) tick(tick, settled int) {
	if p.w == nil || !p.terminal {
		return
	}
	now := p.now()
	if now.Sub(p.started) < progressDelay || now.Sub(p.lastDraw) < progressEvery {
		return
	}
	p.lastDraw, p.drawn = now, true
	pct := 100
	if p.total > 0 {
		pct = settled * 100 / p.total
	}
	fmt.Fprintf(p.w, "\r\x1b[K[%d/%d] %s: tick %d, %d/%d rows settled (%d%%), %.1fs",
		p.index, p.count, p.policy, tick, settled, p.total, pct, now.Sub(p.started).Seconds())
}

func (p *progress) done(r *PolicyReport) {
	if p.w == nil {
		return
	}
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, "bpsim: [%d/%d] %s: %d rows settled in %d ticks (%s simulated), %.1fs\n",
		p.index, p.count, p.policy, r.Settled, r.Ticks, fmtWait(r.Makespan), r.Wall.Seconds())
}

// abort ends the run's progress early, before an error is printed: on a
// terminal it clears the status line, so the error does not follow it on
// the same line.
func (p *progress) abort() {
	if p.w == nil || !p.terminal || !p.drawn {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
	p.drawn = false
}
