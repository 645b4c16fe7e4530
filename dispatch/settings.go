package dispatch

import (
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// applySettings returns base with settings applied: for each namespace,
// a set Quota, Weight or Rate replaces base's entry (Rates), and Paused
// sets its quota to 0. A setting with Fault set holds its namespace (quota 0), as a
// pause does: a setting that cannot be read never loosens a limit (a
// dispatcher puts the namespace's last good settings in its place when it
// has them). base's maps are not modified. The result is what a dispatcher
// passes to [backpressure.Backpressure.SetConfig], which validates it.
func applySettings(base backpressure.Config, settings []outbox.NamespaceSettings) backpressure.Config {
	cfg := base
	cfg.Quotas = make(map[string]int, len(base.Quotas))
	for k, v := range base.Quotas {
		cfg.Quotas[k] = v
	}
	cfg.Weights = make(map[string]int, len(base.Weights))
	for k, v := range base.Weights {
		cfg.Weights[k] = v
	}
	cfg.Rates = make(map[string]backpressure.Rate, len(base.Rates))
	for k, v := range base.Rates {
		cfg.Rates[k] = v
	}
	for _, s := range settings {
		if s.Quota != nil {
			cfg.Quotas[s.Namespace] = *s.Quota
		}
		if s.Paused || s.Fault != "" {
			cfg.Quotas[s.Namespace] = 0
		}
		if s.Weight != nil {
			cfg.Weights[s.Namespace] = *s.Weight
		}
		if s.Rate != nil {
			cfg.Rates[s.Namespace] = *s.Rate
		}
	}
	return cfg
}

// planEntryOf returns the outbox.PlanEntry a node report carries for r.
func planEntryOf(r backpressure.NamespaceReport) outbox.PlanEntry {
	return outbox.PlanEntry{
		Namespace: r.Namespace, Quota: r.Quota, Weight: r.Weight, Ceiling: r.Ceiling, Claimed: r.Claimed,
		Pending: r.Pending, Granted: r.Granted, Held: r.Held, Reason: r.Reason.String(), Capped: r.Capped, Rate: r.Rate, Tokens: r.Tokens,
		Adaptive: r.Adaptive, Hold: r.Hold,
	}
}
