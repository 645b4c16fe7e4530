package sim

import (
	"fmt"
	"io"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// DownstreamChartFile is every arm's chart of rows in flight against the
// downstreams' capacities, stacked, written for a scenario with a
// downstream.
const DownstreamChartFile = "downstream.png"

// downstreamPlot draws one arm's rows in flight per tenant, the tenants
// with a downstream bold, and each downstream's capacity over time as a
// dashed step in its tenant's colour.
func downstreamPlot(s Scenario, p *PolicyReport, xMax, yMax float64) (*plot.Plot, error) {
	title := fmt.Sprintf("%s — rows in flight against the downstream's capacity C (dashed)\n%s", p.Policy, downstreamSummary(p))
	pl, err := tenantSeriesPlot(s, title, "rows in flight", p.Timeline, xMax, yMax, func(i int) bool { return s.Tenants[i].Downstream != nil })
	if err != nil {
		return nil, err
	}
	end := s.Duration.Seconds()
	for i, t := range s.Tenants {
		d := t.Downstream
		if d == nil {
			continue
		}
		xys := plotter.XYs{{X: 0, Y: float64(d.Capacity)}}
		c := d.Capacity
		for _, ch := range d.Changes {
			x := ch.At.Seconds()
			xys = append(xys, plotter.XY{X: x, Y: float64(c)}, plotter.XY{X: x, Y: float64(ch.Capacity)})
			c = ch.Capacity
		}
		xys = append(xys, plotter.XY{X: end, Y: float64(c)})
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1)
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		pl.Add(line)
		pl.Legend.Add(fmt.Sprintf("%s C", t.Name), line)
		if tr := p.Tenants[i].Downstream; tr != nil && len(tr.Ceilings.Inflight) > 0 {
			tick := tr.Ceilings.Tick.Seconds()
			var pts plotter.XYs
			for k, v := range tr.Ceilings.Inflight[0] {
				pts = append(pts, plotter.XY{X: float64(k) * tick, Y: float64(v)})
			}
			cl, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			cl.Color = palette[i%len(palette)]
			cl.Width = vg.Points(0.7)
			cl.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
			pl.Add(cl)
			pl.Legend.Add(fmt.Sprintf("%s Σ node ceilings", t.Name), cl)
		}
	}
	return pl, nil
}

// downstreamSummary is a downstream chart's subtitle: per downstream
// tenant, its goodput against the oracle's and its 429s per 1,000 calls.
func downstreamSummary(p *PolicyReport) string {
	var parts []string
	for _, t := range p.Tenants {
		d := t.Downstream
		if d == nil {
			continue
		}
		vs := ""
		if d.VsOracle > 0 {
			vs = fmt.Sprintf(" (%.2f× oracle)", d.VsOracle)
		}
		parts = append(parts, fmt.Sprintf("%s: goodput %.1f/s%s, %.0f 429s per 1,000 calls", t.Name, d.Goodput, vs, d.RejectedPer1000))
	}
	return strings.Join(parts, "; ")
}

// writeDownstreamPNG writes every arm's downstream chart stacked in one
// PNG, on shared axes.
func writeDownstreamPNG(w io.Writer, r *Report) error {
	xMax, yMax := chartXMax(r), chartYMax(r)
	var pls []*plot.Plot
	for _, p := range r.Policies {
		pl, err := downstreamPlot(r.Scenario, p, xMax, yMax)
		if err != nil {
			return err
		}
		pls = append(pls, pl)
	}
	return writeStackedPNG(w, pls)
}
