package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

func tableOf(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteTables(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestFairnessNotApplicable checks that a run with no tick in which two
// tenants wanted rows prints Jain's index as n/a, and writes it as null.
func TestFairnessNotApplicable(t *testing.T) {
	p := &PolicyReport{Policy: Unscoped, Tenants: []TenantReport{{Name: "only", Quota: 5, Claimed: 200}}}
	out := tableOf(t, &Report{Scenario: smallScenario(), Policies: []*PolicyReport{p}})
	if !strings.Contains(out, "Jain's fairness n/a") {
		t.Errorf("table:\n%s\nwant Jain's fairness n/a", out)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"jainFairness":null`) || strings.Contains(string(b), `"database"`) {
		t.Errorf("JSON %s: want jainFairness null and no database", b)
	}
	p.Fairness, p.FairnessTicks = 0.5, 10
	if b, _ := json.Marshal(p); !strings.Contains(string(b), `"jainFairness":0.5`) {
		t.Errorf("JSON %s: want jainFairness 0.5", b)
	}
}

// TestFootnotes checks that the "*" footnote is printed only when a row is
// marked "*", and the p99 note only when a tenant had under 100 claims.
func TestFootnotes(t *testing.T) {
	within := TenantReport{Name: "a", Quota: 50, ClusterCeiling: 52, PeakInflight: 50, Claimed: 500}
	bp := &PolicyReport{Policy: Backpressure, Tenants: []TenantReport{within}}
	r := &Report{Scenario: smallScenario(), Policies: []*PolicyReport{bp}}
	out := tableOf(t, r)
	if strings.Contains(out, `"*"`) || strings.Contains(out, "50/50 *") || strings.Contains(out, "wait p99:") {
		t.Errorf("no row over its quota, 500 claims: want neither footnote:\n%s", out)
	}
	bp.Tenants[0].PeakInflight, bp.Tenants[0].Claimed = 52, 99
	out = tableOf(t, r)
	if !strings.Contains(out, "52/50 *") || !strings.Contains(out, `"*": over the quota`) || !strings.Contains(out, "quota 50 → 52") ||
		!strings.Contains(out, "fewer than 100 rows it is its max") {
		t.Errorf("a row marked * and 99 claims: want both footnotes:\n%s", out)
	}
}
