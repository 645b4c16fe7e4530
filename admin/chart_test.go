package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// TestChartEscapedAndBounded checks that a chart escapes its labels and
// title, draws at most MaxChartSeries lines of MaxHistoryBuckets points,
// and says "no history" when there is none.
func TestChartEscapedAndBounded(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	var series []ChartSeries
	for range MaxChartSeries + 3 {
		s := ChartSeries{Label: `<script>alert("x")</script>`}
		for i := range 1000 {
			s.At, s.Values = append(s.At, t0.Add(time.Duration(i)*time.Second)), append(s.Values, float64(i))
		}
		series = append(series, s)
	}
	out := string(Chart(`c"<`, `<b>t</b>`, t0, t0.Add(1000*time.Second), series))
	if strings.Contains(out, "<script") || strings.Contains(out, "<b>") || strings.Contains(out, `id="c"<"`) {
		t.Errorf("the chart carries unescaped input:\n%.500s", out)
	}
	if n := strings.Count(out, "<polyline"); n != MaxChartSeries {
		t.Errorf("%d lines; want %d", n, MaxChartSeries)
	}
	for _, pl := range strings.Split(out, `points="`)[1:] {
		pts := strings.Fields(pl[:strings.IndexByte(pl, '"')])
		if len(pts) != MaxHistoryBuckets {
			t.Errorf("a line of %d points; want %d", len(pts), MaxHistoryBuckets)
		}
	}
	if len(out) > 64<<10 {
		t.Errorf("the chart is %d bytes", len(out))
	}
	if empty := string(Chart("e", "t", t0, t0.Add(time.Second), nil)); !strings.Contains(empty, "no history") {
		t.Errorf("an empty chart does not say no history: %s", empty)
	}
}

// TestPayloadView checks the payload view's cut at MaxPayloadView at a
// UTF-8 boundary, and hex for bytes that are not UTF-8.
func TestPayloadView(t *testing.T) {
	big := strings.Repeat("é", MaxPayloadView) // 2 bytes a rune
	d := payloadOf(outbox.Row{Payload: []byte("x" + big)})
	if !d.Cut || !d.Text || d.Shown > MaxPayloadView || d.Shown < MaxPayloadView-1 || d.Size != 1+len(big) || d.Row.Payload != nil {
		t.Errorf("a long payload: cut %v, text %v, shown %d, size %d", d.Cut, d.Text, d.Shown, d.Size)
	}
	d = payloadOf(outbox.Row{Payload: []byte{0xff, 0x00, 0x41}})
	if d.Text || d.Body != "ff0041" {
		t.Errorf("binary payload shown as %q (text %v); want hex", d.Body, d.Text)
	}
}

// TestBacklogChartSaysCapped checks that the backlog chart says its line
// is a lower bound exactly when a sample's backlog was capped.
func TestBacklogChartSaysCapped(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	for _, capped := range []bool{false, true} {
		th := TenantHistory{Namespace: "a", Step: time.Minute}
		for i := range 5 {
			th.Samples = append(th.Samples, HistorySample{At: t0.Add(time.Duration(i) * time.Minute), Backlog: 100 - 10*i, BacklogCapped: capped && i == 4})
		}
		charts := chartsOf("t", th, t0.Add(-time.Minute), t0.Add(5*time.Minute))
		if got := strings.Contains(string(charts[1]), "≥ (capped)"); got != capped {
			t.Errorf("a backlog with its last sample capped %v: the chart says capped %v:\n%s", capped, got, charts[1])
		}
	}
}
