package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/outboxkit/backpressure"
)

// fairnessText is the index as the table prints it: "0.491", or "n/a".
func (p *PolicyReport) fairnessText() string {
	if p.FairnessTicks == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(p.Fairness, 'f', 3, 64)
}

// WriteTable writes the policy's table: one line per tenant, then the
// overall figures and the exactly-once verdict.
func (p *PolicyReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s: %s\n", p.Policy, p.Description)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tweight\tqueues\trows\tclaimed\twait p50\twait p99\twait max\tstarved\tpeak/quota\theld@ceiling\t")
	for _, t := range p.Tenants {
		held := "-"
		if p.Policy.dispatched() {
			held = strconv.Itoa(t.HeldAtCeiling)
		}
		if t.Paused && p.Policy.dispatched() {
			held += fmt.Sprintf(" (%d paused)", t.HeldAtEnd)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Name, max(t.Weight, 1), t.Queues, t.Rows, t.Claimed,
			fmtWait(t.WaitP50), fmtWait(t.WaitP99), fmtWait(t.WaitMax), fmtWait(t.StarvedMax), peakQuota(p.Policy, t), held)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := p.writeLimits(&b); err != nil {
		return err
	}
	verdict := "ok"
	if !p.Audit.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "throughput %.1f rows/s (%d rows in %s simulated) · Jain's fairness %s · exactly-once %s\n",
		p.Throughput, p.Settled, fmtWait(p.Makespan), p.fairnessText(), verdict)
	if len(p.Events) > 0 {
		fmt.Fprintf(&b, "membership: %s\n", strings.Join(p.Events, "; "))
	}
	if len(p.Events) > 0 && p.Policy.dispatched() {
		var parts []string
		held := true
		for _, t := range p.Tenants {
			if t.Quota == backpressure.Unlimited {
				continue
			}
			rel := "≤"
			if t.PeakInflight > t.PeakCeiling {
				rel = ">"
			}
			parts = append(parts, fmt.Sprintf("%s peak %d %s %d", t.Name, t.PeakInflight, rel, t.PeakCeiling))
			held = held && t.OverAtClaim == 0 && t.OverNodeCeiling == 0
		}
		verdict := "no claim took a tenant over them, no sweep left a node over its ceiling"
		if !held {
			verdict = "BROKEN: a claim went over them or a sweep left a node over its ceiling (see report.json)"
		}
		fmt.Fprintf(&b, "quotas across the hand-off, against Σ current owners' ceilings: %s; %s\n", strings.Join(parts, ", "), verdict)
	}
	if p.GaveUp {
		fmt.Fprintf(&b, "gave up after %d ticks: every running claim kept outliving its lease (%d of %d rows settled)\n",
			p.Ticks, p.Settled, p.Audit.Keys)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// peakQuota prints a tenant's peak against its quota, marked "!" when the
// peak broke the policy's cap: the quota, or under backpressure the sum of
// the per-node ceilings; and "*" when a backpressure peak is over the quota
// but within that sum (each node rounds its ceiling up).
func peakQuota(p Policy, t TenantReport) string {
	if t.Quota == backpressure.Unlimited {
		return fmt.Sprintf("%d/∞  ", t.PeakInflight)
	}
	return fmt.Sprintf("%d/%d%s", t.PeakInflight, t.Quota, peakMark(p, t))
}

// peakMark is peakQuota's mark: " !", " *" or "  ".
func peakMark(p Policy, t TenantReport) string {
	switch {
	case t.Quota == backpressure.Unlimited:
		return "  "
	case p.dispatched() && (t.OverAtClaim > 0 || t.OverNodeCeiling > 0):
		return " !"
	case p.dispatched() && t.PeakInflight > t.Quota:
		return " *"
	case t.PeakInflight > t.Quota:
		return " !"
	}
	return "  "
}

// WriteTables writes every policy's table, then a comparison of the quiet
// tenants' waits and the verdict.
func (r *Report) WriteTables(w io.Writer) error {
	workers := "unlimited"
	if r.Scenario.WorkersPerNode > 0 {
		workers = strconv.Itoa(r.Scenario.WorkersPerNode)
	}
	fmt.Fprintf(w, "bpsim: %d nodes × %d shards, batch %d, %s workers/node, tick %v; %d tenants, %d rows; seed %d; %s\n\n",
		r.Scenario.Nodes, r.Scenario.ShardCount, r.Scenario.BatchSize, workers, r.Scenario.Tick,
		len(r.Scenario.Tenants), r.Rows, r.Seed, r.Database)
	for _, p := range r.Policies {
		if err := p.WriteTable(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if err := r.writeDownstreams(w); err != nil {
		return err
	}
	if r.Scenario.hasDownstreams() {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "wait: simulated, in whole ticks of %v; 0s means claimed by the first sweep after the enqueue.\n", r.Scenario.Tick)
	fmt.Fprintln(w, "peak/quota: most rows claimed at once cluster-wide; \"!\" marks a peak over the quota.")
	if bp := r.Policy(Backpressure); bp != nil && slices.ContainsFunc(bp.Tenants, func(t TenantReport) bool { return peakMark(Backpressure, t) == " *" }) {
		var notes []string
		for _, t := range bp.Tenants {
			note := fmt.Sprintf("quota %d → %d", t.Quota, t.ClusterCeiling)
			if t.ClusterCeiling > t.Quota && t.Quota != backpressure.Unlimited && !slices.Contains(notes, note) {
				notes = append(notes, note)
			}
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "\"*\": over the quota, within backpressure's cap: each node's ceiling is ⌈quota × owned/shards⌉, rounded up,\n"+
				"     so the cluster-wide cap is their sum, at most quota + nodes − 1: %s.\n", strings.Join(notes, ", "))
		}
	}
	fmt.Fprintln(w, "starved: longest run of sweeps that claimed none of the tenant's rows while it had rows waiting and was under its quota.")
	fmt.Fprintln(w, "held@ceiling: rows that a backpressure sweep left pending because their tenant was at its ceiling (or paused).")
	if r.fewRows() {
		fmt.Fprintln(w, "wait p99: nearest rank, so for a tenant with fewer than 100 rows it is its max.")
	}
	return nil
}

// fewRows reports whether some tenant had between 1 and 99 claims under
// some policy: its nearest-rank p99 wait is then its max.
func (r *Report) fewRows() bool {
	for _, p := range r.Policies {
		for _, t := range p.Tenants {
			if t.Claimed > 0 && t.Claimed < 100 {
				return true
			}
		}
	}
	return false
}
