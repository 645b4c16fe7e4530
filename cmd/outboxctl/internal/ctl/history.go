package ctl

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/backpressure/admin"
)

// printRates prints the started and settled rates and the drain estimate
// of tenants from the store's history, when it holds any of them: a
// table for tenants (many set), one line for why.
func printRates(ctx context.Context, c Config, s admin.Store, ns string, tenants []admin.Tenant, many bool) error {
	rates, ok, err := admin.HistoryRates(ctx, s, ns, tenants, c.now())
	if err != nil || !ok {
		return err
	}
	now := c.now()
	if !many {
		r := rates[tenants[0].Namespace]
		fmt.Fprintf(c.Stdout, "history: %.1f started/s, %.1f settled/s%s; time to drain: %s\n",
			r.StartedPerSecond, r.SettledPerSecond, pointAge(now, r), r.Drain)
		return nil
	}
	fmt.Fprintln(c.Stdout, "from the nodes' history (the newest minute):")
	w := table(c.Stdout)
	fmt.Fprintln(w, "NAMESPACE\tSTARTED/S\tSETTLED/S\tDRAIN\tAS OF")
	for _, t := range tenants {
		r := rates[t.Namespace]
		asOf := "-"
		if !r.Newest.IsZero() {
			asOf = admin.Age(now, r.Newest) + " ago"
		}
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%s\t%s\n", display(t.Namespace), r.StartedPerSecond, r.SettledPerSecond, r.Drain, asOf)
	}
	return w.Flush()
}

// pointAge says how old r's newest point is.
func pointAge(now time.Time, r admin.TenantRates) string {
	if r.Newest.IsZero() {
		return " (no point in the last minute)"
	}
	return " (newest point " + admin.Age(now, r.Newest) + " old)"
}
