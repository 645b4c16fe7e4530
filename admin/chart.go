package admin

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// Chart bounds: an SVG chart is ChartWidth × ChartHeight pixels, draws at
// most MaxChartSeries lines of at most MaxHistoryBuckets points each, so
// its markup is bounded (about 40 bytes a point).
const (
	ChartWidth     = 360
	ChartHeight    = 90
	MaxChartSeries = 6
)

// ChartSeries is one line of a chart: a label and its values at times.
type ChartSeries struct {
	Label  string
	At     []time.Time
	Values []float64
}

// chartColours are the series' colours, in order.
var chartColours = []string{"#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b"}

// Chart returns a small server-rendered SVG line chart of series over
// [from, to), titled title: each label and the title HTML-escaped, every
// number formatted by the package, at most [MaxChartSeries] series (the
// rest are left out) and [MaxHistoryBuckets] points per series (the
// newest kept). The y axis runs from 0 to the greatest value, which the
// chart states. An empty span or no values draws an empty frame saying
// "no history".
func Chart(id, title string, from, to time.Time, series []ChartSeries) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s" class="chart" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		html.EscapeString(id), ChartWidth, ChartHeight, ChartWidth, ChartHeight, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="0.5" y="0.5" width="%d" height="%d" fill="#fff" stroke="#ccc"/>`, ChartWidth-1, ChartHeight-1)
	if len(series) > MaxChartSeries {
		series = series[:MaxChartSeries]
	}
	top := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = max(top, v)
			}
		}
	}
	span := to.Sub(from).Seconds()
	const padTop, padBottom, padLeft = 14.0, 4.0, 4.0
	fmt.Fprintf(&b, `<text x="4" y="11" font-size="10" fill="#333">%s (max %s)</text>`, html.EscapeString(title), html.EscapeString(formatValue(top)))
	if span <= 0 || !hasValues(series) {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#999" text-anchor="middle">no history</text></svg>`, ChartWidth/2, ChartHeight/2+8)
		return template.HTML(b.String())
	}
	if top == 0 {
		top = 1 // all zero: the lines lie on the axis
	}
	plotW, plotH := float64(ChartWidth)-2*padLeft, float64(ChartHeight)-padTop-padBottom
	x := 0
	for i, s := range series {
		n := min(len(s.At), len(s.Values))
		at, vs := s.At[:n], s.Values[:n]
		if n > MaxHistoryBuckets {
			at, vs = at[n-MaxHistoryBuckets:], vs[n-MaxHistoryBuckets:]
		}
		var pts []string
		for j := range at {
			v := vs[j]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			px := padLeft + plotW*math.Min(math.Max(at[j].Sub(from).Seconds()/span, 0), 1)
			py := padTop + plotH*(1-v/top)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
		}
		colour := chartColours[i%len(chartColours)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colour, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="11" font-size="9" fill="%s" text-anchor="end">%s</text>`, ChartWidth-4-x, colour, html.EscapeString(s.Label))
		x += 6 * (min(len([]rune(s.Label)), 24) + 1)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func hasValues(series []ChartSeries) bool {
	for _, s := range series {
		if len(s.Values) > 0 {
			return true
		}
	}
	return false
}

// formatValue formats a chart's maximum: whole numbers as such, others
// with two significant decimals.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
