package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// StartsReport is a tenant's rows started (claims, a failed node's rows
// claimed anew included) per simulated second, against its rate. The
// report has one per tenant when some tenant of the scenario has a rate.
type StartsReport struct {
	// Rate is the tenant's rate (the zero Rate: none).
	Rate backpressure.Rate
	// MaxPerSecond is the most rows started in any one simulated second (a
	// sliding window of whole ticks), cluster-wide.
	MaxPerSecond float64
	// MeanPerSecond is the rows started over the time from the tenant's
	// first start to its last (both ticks included).
	MeanPerSecond float64
	// Worst is, for a rate-limited tenant, the window in which the most
	// rows started beyond Rate.PerSecond × its length; nil without a rate.
	Worst *StartsWindow
}

// StartsWindow is the window [From, From+Span] of simulated time in which
// Started rows of a rate-limited tenant started (ticks From and From+Span
// included). Bound is what the library promises for it: PerSecond × Span +
// Burst + (k − 1), k the nodes that owned shards during the run.
type StartsWindow struct {
	From    time.Duration
	Span    time.Duration
	Started int
	Bound   float64
}

// Held reports whether the window kept to its bound (up to a rounding
// error of the refill far below one row).
func (w StartsWindow) Held() bool { return float64(w.Started) <= w.Bound+1e-6 }

// startMeter follows each tenant's starts tick by tick: the sliding
// one-second window's maximum, the first and last start, and for a
// rate-limited tenant the window of most starts beyond its rate.
// Memory: O(tenants × ticks per second).
type startMeter struct {
	tick   time.Duration
	window int     // ticks in a second, ≥ 1
	ring   [][]int // [tenant][tick mod window]
	sum    []int   // starts in the last window ticks
	best   []int   // most starts in window ticks
	total  []int
	first  []int // tick of the first start, -1 before it
	last   []int
	ticks  int      // ticks recorded
	series *sampler // the one-second window's starts, tick by tick, for the chart
	// perTick is, for rate-limited tenants only, the starts of every tick
	// (nil for the others), for the tests' naive check of the bound.
	perTick [][]int

	// For rate-limited tenants, with ρ = PerSecond × tick in seconds and
	// S(t) the starts up to tick t: the window [t1, t2] with the most
	// S(t2) − S(t1−1) − ρ(t2 − t1), found in one pass by keeping the
	// least S(t1−1) − ρ·t1 so far.
	rho     []float64 // 0: no rate
	cum     []int     // S(t−1)
	minB    []float64
	minAt   []int
	minCum  []int // S(t1−1) at minAt
	excess  []float64
	worstT1 []int
	worstT2 []int
	worstN  []int
}

func newStartMeter(s Scenario) *startMeter {
	nt := len(s.Tenants)
	m := &startMeter{tick: s.Tick, window: max(1, int(time.Second/s.Tick)),
		sum: make([]int, nt), best: make([]int, nt), total: make([]int, nt), first: make([]int, nt), last: make([]int, nt),
		rho: make([]float64, nt), cum: make([]int, nt), minB: make([]float64, nt), minAt: make([]int, nt), minCum: make([]int, nt),
		excess: make([]float64, nt), worstT1: make([]int, nt), worstT2: make([]int, nt), worstN: make([]int, nt)}
	m.ring = make([][]int, nt)
	m.series = newSampler(nt)
	m.perTick = make([][]int, nt)
	for i, t := range s.Tenants {
		m.ring[i] = make([]int, m.window)
		m.first[i] = -1
		m.rho[i] = t.Rate.PerSecond * s.Tick.Seconds()
		m.excess[i] = -1
	}
	return m
}

// add records one tick's starts per tenant.
func (m *startMeter) add(starts []int) {
	t, k := m.ticks, m.ticks%m.window
	for i, n := range starts {
		m.sum[i] += n - m.ring[i][k]
		m.ring[i][k] = n
		m.best[i] = max(m.best[i], m.sum[i])
		if n > 0 {
			if m.first[i] < 0 {
				m.first[i] = t
			}
			m.last[i] = t
			m.total[i] += n
		}
		if m.rho[i] == 0 {
			continue
		}
		m.perTick[i] = append(m.perTick[i], n)
		if b := float64(m.cum[i]) - m.rho[i]*float64(t); t == 0 || b < m.minB[i] {
			m.minB[i], m.minAt[i], m.minCum[i] = b, t, m.cum[i]
		}
		m.cum[i] += n
		if e := float64(m.cum[i]) - m.rho[i]*float64(t) - m.minB[i]; e > m.excess[i] {
			m.excess[i], m.worstT1[i], m.worstT2[i], m.worstN[i] = e, m.minAt[i], t, m.cum[i]-m.minCum[i]
		}
	}
	m.ticks++
	m.series.add(m.sum)
}

// report returns tenant i's figures under rate r, k the nodes that owned
// shards during the run.
func (m *startMeter) report(i int, r backpressure.Rate, k int) *StartsReport {
	sr := &StartsReport{Rate: r, MaxPerSecond: float64(m.best[i]) / (float64(m.window) * m.tick.Seconds())}
	if m.first[i] >= 0 {
		sr.MeanPerSecond = float64(m.total[i]) / (float64(m.last[i]-m.first[i]+1) * m.tick.Seconds())
	}
	if m.rho[i] > 0 && m.ticks > 0 {
		span := time.Duration(m.worstT2[i]-m.worstT1[i]) * m.tick
		sr.Worst = &StartsWindow{From: time.Duration(m.worstT1[i]) * m.tick, Span: span, Started: m.worstN[i],
			Bound: r.PerSecond*span.Seconds() + float64(r.Burst) + float64(k-1)}
	}
	return sr
}

// PriorityWait is the wait of one priority class of a tenant's rows.
type PriorityWait struct {
	Priority int
	Rows     int // rows of the class the tenant's producer made
	Claimed  int // claims of them
	// WaitP50, WaitP99 and WaitMax are nearest-rank, as for the tenant.
	WaitP50, WaitP99, WaitMax time.Duration
}

// priorityWaits summarises waits by class, highest priority first.
func priorityWaits(rows map[int]int, waits map[int][]time.Duration) []PriorityWait {
	var out []PriorityWait
	for p, n := range rows {
		st := summarise(waits[p])
		out = append(out, PriorityWait{Priority: p, Rows: n, Claimed: len(waits[p]), WaitP50: st.P50, WaitP99: st.P99, WaitMax: st.Max})
	}
	slices.SortFunc(out, func(a, b PriorityWait) int { return b.Priority - a.Priority })
	return out
}

// enqueueCapped enqueues a tick's arrivals when some tenant has a pending
// cap: each tenant is a producer of its own, which enqueues its rows of the
// tick in one call and, when the store refuses the batch over the cap,
// one by one until one is refused, dropping that row and the rest of the
// tick's. It returns the rows refused.
func enqueueCapped(ctx context.Context, ob *simStore, s Scenario, arrivals []arrival) ([]arrival, error) {
	var refused []arrival
	byTenant := map[int][]arrival{}
	var order []int
	for _, a := range arrivals {
		if _, ok := byTenant[a.tenant]; !ok {
			order = append(order, a.tenant)
		}
		byTenant[a.tenant] = append(byTenant[a.tenant], a)
	}
	for _, ti := range order {
		rows := byTenant[ti]
	chunks:
		for lo := 0; lo < len(rows); lo += enqueueChunk {
			chunk := rows[lo:min(lo+enqueueChunk, len(rows))]
			err := enqueue(ctx, ob, s, chunk)
			if err == nil {
				continue
			}
			if !errors.Is(err, outbox.ErrPendingCap) {
				return nil, err
			}
			// Nothing of the chunk was written: row by row.
			for k, a := range chunk {
				err := enqueue(ctx, ob, s, []arrival{a})
				if errors.Is(err, outbox.ErrPendingCap) {
					refused = append(refused, rows[lo+k:]...)
					break chunks
				}
				if err != nil {
					return nil, err
				}
			}
		}
	}
	return refused, nil
}

// writeLimits writes, under the policy's table, the lines of the limits a
// scenario sets: starts per second against the rates, waits by priority
// class, and rows refused over pending caps. A scenario without them
// writes nothing.
func (p *PolicyReport) writeLimits(w io.Writer) error {
	var rates, prios, caps bool
	for _, t := range p.Tenants {
		rates = rates || t.Starts != nil
		prios = prios || len(t.ByPriority) > 0
		caps = caps || t.PendingCap > 0
	}
	if rates {
		fmt.Fprintln(w, "starts per second, cluster-wide, against the rate (rows claimed, a failed node's claimed anew included):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  tenant\trate\tburst\tmax over 1s\tmean\tworst window: started\tin\tbound r·T+b+(k−1)\theld for rate\t")
		for _, t := range p.Tenants {
			st := t.Starts
			rate, burst, worst, span, bound, held := "-", "-", "-", "-", "-", "-"
			if st.Rate.PerSecond > 0 {
				rate, burst = strconv.FormatFloat(st.Rate.PerSecond, 'g', -1, 64)+"/s", strconv.Itoa(st.Rate.Burst)
			}
			if wd := st.Worst; wd != nil {
				worst, span = strconv.Itoa(wd.Started), fmtWait(wd.Span)
				mark := "ok"
				switch {
				case !wd.Held() && p.Policy == Backpressure:
					mark = "BROKEN"
				case !wd.Held():
					mark = "over"
				}
				bound = fmt.Sprintf("%.1f %s", wd.Bound, mark)
			}
			if p.Policy == Backpressure {
				held = strconv.Itoa(t.SweepsAtRate) + " sweeps"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.1f/s\t%.1f/s\t%s\t%s\t%s\t%s\t\n", t.Name, rate, burst, st.MaxPerSecond, st.MeanPerSecond, worst, span, bound, held)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if prios {
		fmt.Fprintln(w, "wait by priority class (higher first inside a route):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  tenant\tpriority\trows\tclaimed\twait p50\twait p99\twait max\t")
		for _, t := range p.Tenants {
			for _, c := range t.ByPriority {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", t.Name, c.Priority, c.Rows, c.Claimed, fmtWait(c.WaitP50), fmtWait(c.WaitP99), fmtWait(c.WaitMax))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if caps {
		var parts []string
		others, peak := 0, 0
		for _, t := range p.Tenants {
			switch {
			case t.Rejected > 0:
				parts = append(parts, fmt.Sprintf("%s %d of %d rejected (cap %d, peak unfinished %d)", t.Name, t.Rejected, t.Rows, t.PendingCap, t.PeakUnfinished))
			case t.PendingCap > 0:
				others++
				peak = max(peak, t.PeakUnfinished)
			}
		}
		if others > 0 {
			parts = append(parts, fmt.Sprintf("none of the %d other capped tenants' (peak unfinished %d)", others, peak))
		}
		fmt.Fprintf(w, "pending caps, rows refused at enqueue and never written: %s\n", strings.Join(parts, "; "))
	}
	return nil
}
