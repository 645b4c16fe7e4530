package sim

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/outboxkit/backpressure"
)

// Chart sizes: one policy's panel, and the combined chart of all of them.
const (
	panelWidth  = 9 * vg.Inch
	panelHeight = 3.6 * vg.Inch
)

// palette colours the tenants: the first (in the default scenario the
// bursty one) red, then colours that stay apart from it and each other.
var palette = []color.RGBA{
	{0xE1, 0x57, 0x59, 0xff}, // red
	{0x4E, 0x79, 0xA7, 0xff}, // blue
	{0x59, 0xA1, 0x4F, 0xff}, // green
	{0xF2, 0x8E, 0x2B, 0xff}, // orange
	{0xB0, 0x7A, 0xA1, 0xff}, // purple
	{0x76, 0xB7, 0xB2, 0xff}, // teal
	{0x9C, 0x75, 0x5F, 0xff}, // brown
	{0xFF, 0x9D, 0xA7, 0xff}, // pink
	{0xED, 0xC9, 0x48, 0xff}, // yellow
	{0x79, 0x70, 0x6E, 0xff}, // grey
}

// chartXMax is the x-axis end shared by every panel: the longest run, plus
// room on the right for the legend.
func chartXMax(r *Report) float64 {
	top := 0.0
	for _, p := range r.Policies {
		top = max(top, float64(p.Ticks)*p.Timeline.Tick.Seconds())
	}
	return max(top*1.2, 1)
}

// chartYMax is the y-axis top shared by every panel, so that the panels
// compare at a glance: the highest in-flight count or quota, plus room.
func chartYMax(r *Report) float64 {
	top := 1
	for _, p := range r.Policies {
		for _, t := range p.Tenants {
			top = max(top, t.PeakInflight, t.Quota, t.ClusterCeiling)
		}
	}
	return float64(top) * 1.08
}

// tenantSeriesPlot returns a plot titled title over [0, xMax] × [0, yMax]
// with a grid and one line per tenant of tl's series, in the palette's
// colours, bold where bold(i) says, each in the legend by its tenant's name.
func tenantSeriesPlot(s Scenario, title, yLabel string, tl Timeline, xMax, yMax float64, bold func(i int) bool) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "simulated time (s)"
	pl.Y.Label.Text = yLabel
	pl.Y.Min, pl.Y.Max = 0, yMax
	pl.Legend.Top = true
	pl.Legend.Left = false
	pl.Add(plotter.NewGrid())
	tick := tl.Tick.Seconds()
	for i, series := range tl.Inflight {
		xys := make(plotter.XYs, len(series))
		for k, v := range series {
			xys[k] = plotter.XY{X: float64(k) * tick, Y: float64(v)}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1)
		if bold(i) {
			line.Width = vg.Points(1.8)
		}
		pl.Add(line)
		pl.Legend.Add(s.Tenants[i].Name, line)
	}
	pl.X.Min, pl.X.Max = 0, xMax
	return pl, nil
}

// policyPlot draws one policy's in-flight rows per tenant over simulated
// time, with the quotas as dashed lines and, under backpressure, the
// cluster-wide caps above them as dotted lines.
func policyPlot(s Scenario, p *PolicyReport, xMax, yMax float64) (*plot.Plot, error) {
	title := fmt.Sprintf("%s — %s\n%s", p.Policy, p.Description, waitSummary(p))
	pl, err := tenantSeriesPlot(s, title, "rows in flight", p.Timeline, xMax, yMax, func(i int) bool { return i == 0 })
	if err != nil {
		return nil, err
	}
	if err := addMembershipMarks(pl, s, yMax); err != nil {
		return nil, err
	}

	// One dashed line per distinct quota, labelled with who has it.
	var quotas []int
	for _, t := range s.Tenants {
		if t.Quota != backpressure.Unlimited && !slices.Contains(quotas, t.Quota) {
			quotas = append(quotas, t.Quota)
		}
	}
	for k, q := range quotas {
		qv := float64(q)
		f := plotter.NewFunction(func(float64) float64 { return qv })
		f.Color = color.Gray{Y: 90}
		f.Width = vg.Points(1)
		f.Dashes = plotutil.Dashes(1 + k%3)
		pl.Add(f)
		pl.Legend.Add(fmt.Sprintf("quota %d", q), f)
	}

	// Under backpressure, also the cap it enforces cluster-wide where that
	// is above the quota: the sum of the per-node ceilings, each rounded
	// up. A peak between the two lines is within backpressure's own cap.
	if p.Policy == Backpressure {
		seen := map[int]bool{}
		for _, t := range p.Tenants {
			c := t.ClusterCeiling
			if t.Quota == backpressure.Unlimited || c <= t.Quota || seen[c] {
				continue
			}
			seen[c] = true
			cv := float64(c)
			f := plotter.NewFunction(func(float64) float64 { return cv })
			f.Color = color.RGBA{0xB0, 0x30, 0x30, 0xff}
			f.Width = vg.Points(0.8)
			f.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
			pl.Add(f)
			pl.Legend.Add(fmt.Sprintf("cap %d = Σ node ceilings of quota %d", c, t.Quota), f)
		}
	}
	return pl, nil
}

// waitSummary is a chart subtitle: the first tenant's p99 wait and the
// worst p99 wait of the others.
func waitSummary(p *PolicyReport) string {
	if len(p.Tenants) == 0 {
		return ""
	}
	s := fmt.Sprintf("p99 wait from enqueue to claim: %s %s", p.Tenants[0].Name, fmtWait(p.Tenants[0].WaitP99))
	if len(p.Tenants) > 1 {
		worst := p.Tenants[1].WaitP99
		for _, t := range p.Tenants[2:] {
			worst = max(worst, t.WaitP99)
		}
		s += fmt.Sprintf(", the other %d tenants at most %s", len(p.Tenants)-1, fmtWait(worst))
	}
	return s
}

// writePolicyPNG writes one policy's chart as PNG.
func writePolicyPNG(w io.Writer, s Scenario, p *PolicyReport, xMax, yMax float64) error {
	pl, err := policyPlot(s, p, xMax, yMax)
	if err != nil {
		return err
	}
	wt, err := pl.WriterTo(panelWidth, panelHeight, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// writeCombinedPNG writes every policy's chart stacked in one PNG, with a
// shared y-axis scale and aligned axes.
func writeCombinedPNG(w io.Writer, r *Report) error {
	xMax, yMax := chartXMax(r), chartYMax(r)
	plots := make([]*plot.Plot, len(r.Policies))
	for i, p := range r.Policies {
		pl, err := policyPlot(r.Scenario, p, xMax, yMax)
		if err != nil {
			return err
		}
		plots[i] = pl
	}
	return writeStackedPNG(w, plots)
}

// addMembershipMarks draws a vertical line at each failure, hand-over and
// join of the scenario's nodes, labelled in the legend.
func addMembershipMarks(pl *plot.Plot, s Scenario, yMax float64) error {
	if !s.dynamic() {
		return nil
	}
	m := newMembership(s)
	type mark struct {
		tick  int
		label string
		dash  []vg.Length
	}
	var marks []mark
	for i := range s.NodeList {
		if m.fail[i] >= 0 {
			marks = append(marks,
				mark{m.fail[i], fmt.Sprintf("node-%d fails", i), []vg.Length{vg.Points(6), vg.Points(3)}},
				mark{m.handover[i], fmt.Sprintf("its shards move (membership lease %v)", s.membershipLease()), []vg.Length{vg.Points(2), vg.Points(3)}})
		}
		if m.join[i] > 0 {
			marks = append(marks, mark{m.join[i], fmt.Sprintf("node-%d joins", i), nil})
		}
	}
	for _, mk := range marks {
		x := float64(mk.tick) * s.Tick.Seconds()
		line, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: yMax}})
		if err != nil {
			return err
		}
		line.Color = color.Gray{Y: 40}
		line.Width = vg.Points(1.2)
		line.Dashes = mk.dash
		pl.Add(line)
		pl.Legend.Add(fmt.Sprintf("%v %s", time.Duration(mk.tick)*s.Tick, mk.label), line)
	}
	return nil
}

// startsYMax is the y-axis top of the starts charts: the highest rows
// started in a second, or rate plus burst, plus room.
func startsYMax(r *Report) float64 {
	top := 1.0
	for _, p := range r.Policies {
		for _, series := range p.Starts.Inflight {
			for _, v := range series {
				top = max(top, float64(v))
			}
		}
	}
	for _, t := range r.Scenario.Tenants {
		top = max(top, t.Rate.PerSecond+float64(t.Rate.Burst))
	}
	return top * 1.08
}

// startsPlot draws one policy's rows started per second (the second up to
// each instant) per tenant, with each rate as a dashed line and, for the
// first rate, rate + burst + (nodes − 1) dotted: the most a second can
// start.
func startsPlot(s Scenario, p *PolicyReport, xMax, yMax float64) (*plot.Plot, error) {
	title := fmt.Sprintf("%s — rows started per second (sliding 1 s window)\n%s", p.Policy, startsSummary(p))
	pl, err := tenantSeriesPlot(s, title, "rows started in the last second", p.Starts, xMax, yMax, func(i int) bool { return s.Tenants[i].Rate.PerSecond > 0 })
	if err != nil {
		return nil, err
	}
	if err := addMembershipMarks(pl, s, yMax); err != nil {
		return nil, err
	}
	for i, t := range s.Tenants {
		if t.Rate.PerSecond == 0 {
			continue
		}
		rv := t.Rate.PerSecond
		f := plotter.NewFunction(func(float64) float64 { return rv })
		f.Color = palette[i%len(palette)]
		f.Width = vg.Points(1)
		f.Dashes = plotutil.Dashes(1)
		pl.Add(f)
		pl.Legend.Add(fmt.Sprintf("%s rate %g/s", t.Name, rv), f)
		bv := rv + float64(t.Rate.Burst) + float64(s.Nodes-1)
		g := plotter.NewFunction(func(float64) float64 { return bv })
		g.Color = color.RGBA{0xB0, 0x30, 0x30, 0xff}
		g.Width = vg.Points(0.8)
		g.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		pl.Add(g)
		pl.Legend.Add(fmt.Sprintf("bound over 1 s: rate + burst %d + (nodes − 1)", t.Rate.Burst), g)
	}
	return pl, nil
}

// startsSummary is a starts chart's subtitle: each rate-limited tenant's
// most and mean starts per second.
func startsSummary(p *PolicyReport) string {
	var parts []string
	for _, t := range p.Tenants {
		if t.Starts != nil && t.Starts.Rate.PerSecond > 0 {
			parts = append(parts, fmt.Sprintf("%s: at most %.0f in a second, mean %.1f/s, against rate %g/s burst %d",
				t.Name, t.Starts.MaxPerSecond, t.Starts.MeanPerSecond, t.Starts.Rate.PerSecond, t.Starts.Rate.Burst))
		}
	}
	return strings.Join(parts, "; ")
}

// writePlotPNG writes one plot as a PNG panel.
func writePlotPNG(w io.Writer, pl *plot.Plot) error {
	wt, err := pl.WriterTo(panelWidth, panelHeight, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// writeStackedPNG writes plots stacked in one PNG with aligned axes.
func writeStackedPNG(w io.Writer, pls []*plot.Plot) error {
	plots := make([][]*plot.Plot, len(pls))
	for i, pl := range pls {
		plots[i] = []*plot.Plot{pl}
	}
	img := vgimg.New(panelWidth, panelHeight*vg.Length(len(plots)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
