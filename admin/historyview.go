package admin

import (
	"context"
	"html/template"
	"slices"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// ChartSpan is the span of history the pages chart, in ChartBuckets
// buckets.
const (
	ChartSpan    = time.Hour
	ChartBuckets = 60
)

// TenantRates is what a page shows of one tenant's history: its latest
// rates, the age of the newest point they come from, the drain estimate,
// and its charts.
type TenantRates struct {
	StartedPerSecond, SettledPerSecond float64
	Newest                             time.Time // the newest point's At; zero when there is none
	Drain                              Drain
	Charts                             []template.HTML
}

// historyOf reads the history of namespace ns ("" for every one) over the
// last ChartSpan and builds it per tenant; ok is false when the store
// keeps no history. One store call of at most outbox.DefaultHistoryPage
// points.
func historyOf(ctx context.Context, s Store, ns string, now time.Time) (pts []outbox.HistoryPoint, hs []TenantHistory, ok bool, err error) {
	h, ok := s.(outbox.Historian)
	if !ok {
		return nil, nil, false, nil
	}
	from := now.Add(-ChartSpan)
	pts, err = h.History(ctx, outbox.HistoryParams{Namespace: ns, Since: from})
	if err != nil {
		return nil, nil, true, err
	}
	hs, err = BuildHistory(pts, from, now.Add(time.Millisecond), ChartBuckets)
	return pts, hs, true, err
}

// ratesOf is th's TenantRates, with the live backlog and charts when
// charts is set.
func ratesOf(id string, th TenantHistory, backlog int, capped bool, from, to time.Time, charts bool) TenantRates {
	r := TenantRates{Drain: EstimateDrain(th, backlog, capped)}
	if n := len(th.Samples); n > 0 {
		last := th.Samples[n-1]
		r.StartedPerSecond, r.SettledPerSecond, r.Newest = last.StartedPerSecond, last.SettledPerSecond, last.Newest
	}
	if charts {
		r.Charts = chartsOf(id, th, from, to)
	}
	return r
}

// chartsOf draws th: rows started and settled per second, the backlog
// (labelled "backlog ≥ (capped)" when a node counted a sample's backlog
// only as deep as its plan needed, so the line is a lower bound there),
// and rows held by reason.
func chartsOf(id string, th TenantHistory, from, to time.Time) []template.HTML {
	at := make([]time.Time, len(th.Samples))
	started, settled, backlog := make([]float64, len(at)), make([]float64, len(at)), make([]float64, len(at))
	reasons := map[string][]float64{}
	backlogLabel := "backlog"
	for i, s := range th.Samples {
		at[i], started[i], settled[i], backlog[i] = s.At, s.StartedPerSecond, s.SettledPerSecond, float64(s.Backlog)
		if s.BacklogCapped {
			backlogLabel = "backlog ≥ (capped)"
		}
		for r := range s.Held {
			if reasons[r] == nil {
				reasons[r] = make([]float64, len(at))
			}
		}
	}
	for i, s := range th.Samples {
		for r := range reasons {
			reasons[r][i] = float64(s.Held[r])
		}
	}
	var held []ChartSeries
	for r, vs := range reasons {
		held = append(held, ChartSeries{Label: r, At: at, Values: vs})
	}
	slices.SortFunc(held, func(a, b ChartSeries) int { return compareStrings(a.Label, b.Label) })
	return []template.HTML{
		Chart(id+"-rates", "rows/s", from, to, []ChartSeries{{Label: "started", At: at, Values: started}, {Label: "settled", At: at, Values: settled}}),
		Chart(id+"-backlog", "backlog", from, to, []ChartSeries{{Label: backlogLabel, At: at, Values: backlog}}),
		Chart(id+"-held", "held by reason", from, to, held),
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// addHistory reads the history of every namespace and fills in d's rates
// and overview.
func (d *tenantsData) addHistory(ctx context.Context, s Store, now time.Time) error {
	pts, hs, ok, err := historyOf(ctx, s, "", now)
	if err != nil || !ok {
		return err
	}
	d.History = true
	from, to := now.Add(-ChartSpan), now
	byNS := map[string]TenantHistory{}
	for _, th := range hs {
		byNS[th.Namespace] = th
	}
	d.Rates = map[string]TenantRates{}
	total, capped := 0, false
	for _, t := range d.Page.Tenants {
		backlog := t.Rows.Ready + t.Rows.Scheduled + t.Rows.Claimed
		total, capped = total+backlog, capped || t.Rows.Capped
		d.Rates[t.Namespace] = ratesOf("", byNS[t.Namespace], backlog, t.Rows.Capped, from, to, false)
	}
	all, err := BuildHistory(AllTenants(pts), from, to.Add(time.Millisecond), ChartBuckets)
	if err != nil {
		return err
	}
	var th TenantHistory
	if len(all) == 1 {
		th = all[0]
	}
	d.Overview = ratesOf("overview", th, total, capped || d.Page.More, from, to, true)
	return nil
}

// HistoryRates returns, by namespace, the rates and drain estimate of
// each of tenants from the store's history of the last ChartSpan (one
// History call of namespace ns, "" for all), without charts; ok is false
// when the store keeps no history, or it holds no point of them.
func HistoryRates(ctx context.Context, s Store, ns string, tenants []Tenant, now time.Time) (rates map[string]TenantRates, ok bool, err error) {
	_, hs, kept, err := historyOf(ctx, s, ns, now)
	if err != nil || !kept {
		return nil, false, err
	}
	byNS := map[string]TenantHistory{}
	for _, th := range hs {
		byNS[th.Namespace] = th
	}
	rates = map[string]TenantRates{}
	for _, t := range tenants {
		th, has := byNS[t.Namespace]
		ok = ok || has
		rates[t.Namespace] = ratesOf("", th, t.Rows.Ready+t.Rows.Scheduled+t.Rows.Claimed, t.Rows.Capped, now.Add(-ChartSpan), now, false)
	}
	return rates, ok, nil
}
