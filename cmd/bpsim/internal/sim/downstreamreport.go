package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// DownstreamReport is one tenant's downstream under one arm. Times are
// simulated; the figures that are rates count the arrival window.
type DownstreamReport struct {
	Capacity int              // at the start
	Changes  []CapacityChange // the capacity's changes
	// Calls is the calls made (claims of the tenant's rows), Succeeded
	// those served, Rejected those answered 429.
	Calls, Succeeded, Rejected int
	// Goodput is the calls served and settled inside the arrival window,
	// per second of it. VsOracle is Goodput over the oracle arm's, when
	// the run has one (0: it has none).
	Goodput  float64
	VsOracle float64
	// RejectedPer1000 is 429s per 1,000 calls over the run.
	// SteadyRejectedPer1000 is the same over the steady windows, from 5 s
	// after the start and after each capacity change to the next change
	// (or the end of the arrival window): "after convergence", the same
	// windows for every arm. SteadyCalls counts the calls in them.
	RejectedPer1000       float64
	SteadyCalls           int
	SteadyRejectedPer1000 float64
	// Convergence is, for the start and each capacity change, how long
	// the tenant's rows in flight took to converge on the capacity.
	Convergence []Convergence
	// Ceilings is, under the adaptive arm, the sum over the nodes of the
	// tenant's ceiling (adaptive where a node's controller holds one,
	// else static) after each tick's sweeps, sampled as the timeline is
	// (the peak over Ceilings.Tick); empty under the other arms.
	Ceilings Timeline
}

// Convergence is the time from a capacity change At (0: the start) to the
// first tick from which the tenant's rows in flight (claimed, not yet
// settled, cluster-wide) stay within ±10% of the capacity for 2 s, inside
// the phase (before the next change or the end of the arrival window).
// Converged is false when no such tick exists.
type Convergence struct {
	At        time.Duration
	Capacity  int
	Converged bool
	After     time.Duration
}

// MarshalJSON writes durations as milliseconds, and a convergence that
// never came as null.
func (r *DownstreamReport) MarshalJSON() ([]byte, error) {
	type change struct {
		AtMs     float64 `json:"atMs"`
		Capacity int     `json:"capacity"`
	}
	type conv struct {
		AtMs     float64  `json:"atMs"`
		Capacity int      `json:"capacity"`
		AfterMs  *float64 `json:"convergedAfterMs"` // null: never within the phase
	}
	j := struct {
		Capacity        int      `json:"capacity"`
		Changes         []change `json:"changes,omitempty"`
		Calls           int      `json:"calls"`
		Succeeded       int      `json:"succeeded"`
		Rejected        int      `json:"rejected429"`
		Goodput         float64  `json:"goodputPerSecond"`
		VsOracle        *float64 `json:"goodputVsOracle,omitempty"`
		Per1000         float64  `json:"rejectedPer1000Calls"`
		SteadyCalls     int      `json:"steadyCalls"`
		SteadyPer1000   float64  `json:"steadyRejectedPer1000Calls"`
		Convergence     []conv   `json:"convergence"`
		ConvergeBand    float64  `json:"convergenceBand"`
		ConvergeHoldMs  float64  `json:"convergenceHoldMs"`
		SteadyAfterMsec float64  `json:"steadyFromMsAfterChange"`
		CeilingTickMs   float64  `json:"ceilingTimelineTickMs,omitempty"`
		Ceilings        []int    `json:"ceilingTimeline,omitempty"`
	}{Capacity: r.Capacity, Calls: r.Calls, Succeeded: r.Succeeded, Rejected: r.Rejected, Goodput: round3(r.Goodput),
		Per1000: round3(r.RejectedPer1000), SteadyCalls: r.SteadyCalls, SteadyPer1000: round3(r.SteadyRejectedPer1000),
		ConvergeBand: convergeBand, ConvergeHoldMs: ms(convergeHold), SteadyAfterMsec: ms(steadyAfter)}
	if r.VsOracle > 0 {
		j.VsOracle = ptr(round3(r.VsOracle))
	}
	if len(r.Ceilings.Inflight) > 0 {
		j.CeilingTickMs, j.Ceilings = ms(r.Ceilings.Tick), r.Ceilings.Inflight[0]
	}
	for _, c := range r.Changes {
		j.Changes = append(j.Changes, change{ms(c.At), c.Capacity})
	}
	for _, c := range r.Convergence {
		cv := conv{AtMs: ms(c.At), Capacity: c.Capacity}
		if c.Converged {
			cv.AfterMs = ptr(ms(c.After))
		}
		j.Convergence = append(j.Convergence, cv)
	}
	return json.Marshal(j)
}

// compareArms fills in each downstream's goodput against the oracle arm's.
func (r *Report) compareArms() {
	oracle := r.Policy(Oracle)
	if oracle == nil {
		return
	}
	for _, p := range r.Policies {
		for i, t := range p.Tenants {
			o := oracle.Tenants[i].Downstream
			if t.Downstream != nil && o != nil && o.Goodput > 0 {
				t.Downstream.VsOracle = t.Downstream.Goodput / o.Goodput
			}
		}
	}
}

// writeDownstreams writes the arms' comparison: per arm and downstream
// tenant goodput, 429s and convergence, then the other tenants' waits
// against the no-signals arm's. A report without downstreams writes
// nothing.
func (r *Report) writeDownstreams(w io.Writer) error {
	if !r.Scenario.hasDownstreams() {
		return nil
	}
	fmt.Fprintf(w, "downstreams: a call beyond capacity C is answered 429 with Retry-After; goodput = calls served within the %v window per second;\n", r.Scenario.Duration)
	fmt.Fprintf(w, "steady = from %v after the start and each change of C to the next; converged = first time from which rows in flight stay within ±%.0f%% of C for %v.\n",
		steadyAfter, convergeBand*100, convergeHold)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  arm\ttenant\tcalls\tserved\tgoodput\t×oracle\t429/1000\tsteady 429/1000\tconverged after (C at time)\t")
	for _, p := range r.Policies {
		for _, t := range p.Tenants {
			d := t.Downstream
			if d == nil {
				continue
			}
			vs := "-"
			if d.VsOracle > 0 {
				vs = strconv.FormatFloat(d.VsOracle, 'f', 3, 64)
			}
			var conv []string
			for _, c := range d.Convergence {
				after := "never"
				if c.Converged {
					after = fmtWait(c.After)
				}
				conv = append(conv, fmt.Sprintf("%s (C %d at %v)", after, c.Capacity, c.At))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%.1f/s\t%s\t%.1f\t%.1f\t%s\t\n", p.Policy, t.Name, d.Calls, d.Succeeded, d.Goodput, vs,
				d.RejectedPer1000, d.SteadyRejectedPer1000, strings.Join(conv, ", "))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	base := r.Policy(NoSignals)
	if base == nil {
		return nil
	}
	fmt.Fprintln(w, "the other tenants' waits, p50 / p99, against the no-signals arm's:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  arm\ttenant\twait p50\tno-signals\twait p99\tno-signals\t")
	for _, p := range r.Policies {
		if p == base {
			continue
		}
		for i, t := range p.Tenants {
			if t.Downstream != nil {
				continue
			}
			b := base.Tenants[i]
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", p.Policy, t.Name, fmtWait(t.WaitP50), fmtWait(b.WaitP50), fmtWait(t.WaitP99), fmtWait(b.WaitP99))
		}
	}
	return tw.Flush()
}

// WriteSeedSummary writes the arms' figures across the runs reps of one
// scenario with different seeds (on one database): per arm and downstream
// tenant the range of goodput against the oracle's, the most 429s per
// 1,000 calls (overall and steady) and the longest convergence after each
// change of capacity ("never" counted apart); then per other tenant the
// no-signals arm's run-to-run noise (the range of its waits over the
// seeds) and each arm's largest difference from the same seed's
// no-signals waits. A scenario without a downstream writes nothing.
func WriteSeedSummary(w io.Writer, reps []*Report) error {
	if len(reps) == 0 || !reps[0].Scenario.hasDownstreams() {
		return nil
	}
	var seeds []string
	for _, r := range reps {
		seeds = append(seeds, strconv.FormatInt(r.Seed, 10))
	}
	fmt.Fprintf(w, "across seeds %s (%s):\n", strings.Join(seeds, ", "), reps[0].Database)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  arm\ttenant\tgoodput ×oracle\t429/1000 max\tsteady 429/1000 max\tconverged after, worst seed\t")
	for k := range reps[0].Policies {
		for i, t := range reps[0].Scenario.Tenants {
			if t.Downstream != nil {
				fmt.Fprint(tw, seedArmLine(reps, k, i))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeSeedWaits(w, reps)
}

// seedArmLine is WriteSeedSummary's line for arm k (the index of its
// report in each of reps) and downstream tenant i: the range of goodput
// against the oracle's, the most 429s per 1,000 calls, and per phase the
// longest convergence or how many seeds never converged.
func seedArmLine(reps []*Report, k, i int) string {
	t := reps[0].Scenario.Tenants[i]
	lo, hi := math.Inf(1), math.Inf(-1)
	var per, steady float64
	conv := make([]time.Duration, len(t.Downstream.Changes)+1)
	never := make([]int, len(conv))
	for _, r := range reps {
		d := r.Policies[k].Tenants[i].Downstream
		lo, hi = min(lo, d.VsOracle), max(hi, d.VsOracle)
		per, steady = max(per, d.RejectedPer1000), max(steady, d.SteadyRejectedPer1000)
		for c, cv := range d.Convergence {
			if cv.Converged {
				conv[c] = max(conv[c], cv.After)
			} else {
				never[c]++
			}
		}
	}
	var cs []string
	prev := t.Downstream.Capacity
	for c := range conv {
		label := fmt.Sprintf("start (C %d)", prev)
		if c > 0 {
			ch := t.Downstream.Changes[c-1]
			label = fmt.Sprintf("C %d→%d at %v", prev, ch.Capacity, ch.At)
			prev = ch.Capacity
		}
		v := fmtWait(conv[c])
		if never[c] > 0 {
			v = fmt.Sprintf("never in %d of %d", never[c], len(reps))
		}
		cs = append(cs, label+": "+v)
	}
	vs := "-"
	if hi > 0 {
		vs = fmt.Sprintf("%.3f–%.3f", lo, hi)
	}
	return fmt.Sprintf("  %s\t%s\t%s\t%.1f\t%.1f\t%s\t\n", reps[0].Policies[k].Policy, t.Name, vs, per, steady, strings.Join(cs, ", "))
}

// writeSeedWaits writes WriteSeedSummary's second table: per tenant
// without a downstream, the no-signals arm's range of waits over reps
// (its run-to-run noise, at least a tick) and each other arm's largest
// difference from the same seed's no-signals waits, and whether that is
// within the noise. Runs without a no-signals arm write nothing.
func writeSeedWaits(w io.Writer, reps []*Report) error {
	s := reps[0].Scenario
	base := slices.IndexFunc(reps[0].Policies, func(p *PolicyReport) bool { return p.Policy == NoSignals })
	if base < 0 {
		return nil
	}
	fmt.Fprintln(w, "the other tenants' waits: the no-signals arm's range over the seeds (its run-to-run noise), and each arm's largest |Δ| from the same seed's no-signals:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  tenant\tno-signals p50\tno-signals p99\tarm\tmax |Δ p50|\tmax |Δ p99|\twithin noise\t")
	for i, t := range s.Tenants {
		if t.Downstream != nil {
			continue
		}
		p50lo, p50hi, p99lo, p99hi := time.Duration(math.MaxInt64), time.Duration(0), time.Duration(math.MaxInt64), time.Duration(0)
		for _, r := range reps {
			b := r.Policies[base].Tenants[i]
			p50lo, p50hi, p99lo, p99hi = min(p50lo, b.WaitP50), max(p50hi, b.WaitP50), min(p99lo, b.WaitP99), max(p99hi, b.WaitP99)
		}
		// Waits are whole ticks: a spread under a tick is a tick.
		noise50, noise99 := max(p50hi-p50lo, s.Tick), max(p99hi-p99lo, s.Tick)
		for k, p := range reps[0].Policies {
			if k == base {
				continue
			}
			var d50, d99 time.Duration
			for _, r := range reps {
				a, b := r.Policies[k].Tenants[i], r.Policies[base].Tenants[i]
				d50, d99 = max(d50, (a.WaitP50-b.WaitP50).Abs()), max(d99, (a.WaitP99-b.WaitP99).Abs())
			}
			ok := "yes"
			if d50 > noise50 || d99 > noise99 {
				ok = "NO"
			}
			fmt.Fprintf(tw, "  %s\t%s–%s\t%s–%s\t%s\t%s\t%s\t%s\t\n", t.Name, fmtWait(p50lo), fmtWait(p50hi), fmtWait(p99lo), fmtWait(p99hi), p.Policy, fmtWait(d50), fmtWait(d99), ok)
		}
	}
	return tw.Flush()
}
