package storetest

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// testOperateFaults checks what [outbox.Operator] does with settings and
// reports that only writes by other means can leave (rows written by
// Harness.RawSettings and RawNodeReport), and the checks of every write:
// ListSettings and NodeReports return the good rows and mark the bad ones
// with their Fault, PutSettings validates the setting it leaves whole and
// overwrites a bad row, the MaxSettings cap is kept on write and
// reported on read, and PutNodeReport refuses figures that are not
// finite.
func testOperateFaults[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("BadSettingsRows", func(t *testing.T) { checkBadSettingsRows(t, newHarness) })
	t.Run("PutSettingsValidates", func(t *testing.T) { checkPutSettingsValidates(t, newHarness) })
	t.Run("RateRoundTrip", func(t *testing.T) { checkRateRoundTrip(t, newHarness) })
	t.Run("BadNodeReports", func(t *testing.T) { checkBadNodeReports(t, newHarness) })
	t.Run("SettingsCap", func(t *testing.T) { checkSettingsCap(t, newHarness) })
}

// rawOperator is setupOperator for the checks that need RawSettings.
func rawOperator[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) (*ox, outbox.Operator) {
	t.Helper()
	o, op := setupOperator(t, newHarness)
	if o.h.RawSettings == nil || o.h.RawNodeReport == nil {
		t.Skip("Harness.RawSettings or RawNodeReport is nil: rows written by other means than the store's API are not checked")
	}
	return o, op
}

// badSettingsBodies are settings rows only SQL can write, none of which a
// dispatcher may apply as they read.
var badSettingsBodies = map[string]string{
	"null":          `null`,
	"array":         `[1, 2]`,
	"number":        `5`,
	"text":          `"paused"`,
	"quota-neg":     `{"quota": -5}`,
	"quota-neg-p":   `{"quota": -5, "paused": true}`,
	"quota-text":    `{"quota": "7"}`,
	"quota-frac":    `{"quota": 1.5}`,
	"paused-null":   `{"paused": null}`,
	"paused-number": `{"paused": 1}`,
	"weight-zero":   `{"weight": 0}`,
	"quota-huge":    `{"quota": 1e30}`,
	"rate-number":   `{"rate": 20}`,
	"rate-null":     `{"rate": null}`,
	"rate-noburst":  `{"rate": {"per_second": 20}}`,
	"rate-burst0":   `{"rate": {"per_second": 20, "burst": 0}}`,
	"rate-neg":      `{"rate": {"per_second": -1, "burst": 1}}`,
	"rate-fracb":    `{"rate": {"per_second": 2, "burst": 1.5}}`,
	"rate-text":     `{"rate": {"per_second": "20", "burst": 1}}`,
	"rate-huge":     `{"rate": {"per_second": 1e10, "burst": 1}}`,
}

func checkBadSettingsRows[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op := rawOperator(t, newHarness)
	q := 3
	for _, s := range []outbox.NamespaceSettings{{Namespace: "good-quota", Quota: &q}, {Namespace: "good-paused", Paused: true}} {
		if _, err := op.PutSettings(o.ctx, s); err != nil {
			t.Fatalf("PutSettings(%+v): %v", s, err)
		}
	}
	raw := map[string]string{"good-raw": `{"paused": true, "newer-key": [1]}`}
	for ns, b := range badSettingsBodies {
		raw[ns] = b
	}
	if err := o.h.RawSettings(o.ctx, raw); err != nil {
		t.Fatalf("RawSettings: %v", err)
	}
	list, err := op.ListSettings(o.ctx)
	if err != nil {
		t.Fatalf("ListSettings with bad rows: %v; want the rows, the bad ones marked", err)
	}
	if len(list) != len(raw)+2 {
		t.Fatalf("ListSettings returned %d rows, want %d", len(list), len(raw)+2)
	}
	for i, s := range list {
		if i > 0 && list[i-1].Namespace >= s.Namespace {
			t.Errorf("ListSettings not in byte order at %d: %q then %q", i, list[i-1].Namespace, s.Namespace)
		}
		_, bad := badSettingsBodies[s.Namespace]
		switch {
		case bad && (s.Fault == "" || s.Quota != nil || s.Weight != nil || s.Paused || s.Version == 0):
			t.Errorf("row %q (%s) read as %+v; want its Fault set, its values unset, its version", s.Namespace, raw[s.Namespace], s)
		case !bad && s.Fault != "":
			t.Errorf("good row %q read with Fault %q", s.Namespace, s.Fault)
		case s.Namespace == "good-raw" && !s.Paused, s.Namespace == "good-paused" && !s.Paused, s.Namespace == "good-quota" && deref(s.Quota) != 3:
			t.Errorf("good row %q read as %+v", s.Namespace, s)
		}
	}
	// A write overwrites a bad row.
	if _, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{Namespace: "null", Paused: true}); err != nil {
		t.Fatalf("PutSettings over a bad row: %v", err)
	}
	list, err = op.ListSettings(o.ctx)
	for _, s := range list {
		if s.Namespace == "null" && (s.Fault != "" || !s.Paused) {
			t.Errorf("row null after PutSettings = %+v, %v; want paused, no fault", s, err)
		}
	}
}

func checkPutSettingsValidates[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op := setupOperator(t, newHarness)
	neg, zero, big := -5, 0, 1<<21
	if _, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{Namespace: "p", Paused: true}); err != nil {
		t.Fatal(err)
	}
	v0, _ := op.SettingsVersion(o.ctx)
	for _, s := range []outbox.NamespaceSettings{
		{Namespace: "p", Quota: &neg, Paused: true}, // the pause must not hide the quota
		{Namespace: "p", Quota: &neg},
		{Namespace: "q", Weight: &zero},
		{Namespace: "q", Weight: &big, Paused: true},
		{Namespace: "q", Fault: "set by a caller"},
		{Namespace: "q", Rate: &backpressure.Rate{PerSecond: 20}},           // a rate needs a burst
		{Namespace: "q", Rate: &backpressure.Rate{PerSecond: -1, Burst: 1}}, // below 0
		{Namespace: "q", Rate: &backpressure.Rate{Burst: 3}, Paused: true},  // a burst without a rate
	} {
		_, err := op.PutSettings(o.ctx, s)
		var ae *outbox.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, outbox.ErrInvalidArgument) || (s.Fault == "" && !errors.Is(err, backpressure.ErrInvalidConfig)) {
			t.Errorf("PutSettings(quota %v, weight %v, paused %v, fault %q) = %v; want an *outbox.ArgumentError matching backpressure.ErrInvalidConfig",
				deref(s.Quota), deref(s.Weight), s.Paused, s.Fault, err)
		}
	}
	if v, err := op.SettingsVersion(o.ctx); err != nil || v != v0 {
		t.Errorf("SettingsVersion after refused writes = %d, %v; want %d", v, err, v0)
	}
	list, _ := op.ListSettings(o.ctx)
	if len(list) != 1 || !list[0].Paused || list[0].Quota != nil {
		t.Errorf("ListSettings after refused writes = %+v; want p paused alone", list)
	}
}

// checkRateRoundTrip checks that a rate PutSettings stores is what
// ListSettings returns, fractional per-second values included, and that
// the zero Rate (no limit for the namespace) is kept as set.
func checkRateRoundTrip[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op := setupOperator(t, newHarness)
	want := map[string]backpressure.Rate{"r1": {PerSecond: 20, Burst: 10}, "r2": {PerSecond: 0.25, Burst: 1}, "r3": {}}
	for ns, r := range want {
		if _, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{Namespace: ns, Rate: &r}); err != nil {
			t.Fatalf("PutSettings(%s rate %+v): %v", ns, r, err)
		}
	}
	list, err := op.ListSettings(o.ctx)
	if err != nil || len(list) != len(want) {
		t.Fatalf("ListSettings = %+v, %v; want %d rows", list, err, len(want))
	}
	for _, s := range list {
		if s.Fault != "" || s.Rate == nil || *s.Rate != want[s.Namespace] {
			t.Errorf("ListSettings' %s = rate %v fault %q; want rate %+v", s.Namespace, s.Rate, s.Fault, want[s.Namespace])
		}
	}
}

func checkBadNodeReports[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op := rawOperator(t, newHarness)
	if err := op.PutNodeReport(o.ctx, outbox.NodeReport{Node: "good", Workers: 3}, time.Minute); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{"b-null": `null`, "b-array": `[1, 2]`, "b-type": `{"Workers": "x"}`}
	for node, body := range bad {
		if err := o.h.RawNodeReport(o.ctx, node, body, time.Minute); err != nil {
			t.Fatalf("RawNodeReport(%q): %v", node, err)
		}
	}
	got, err := op.NodeReports(o.ctx)
	if err != nil || len(got) != 4 {
		t.Fatalf("NodeReports with malformed reports = %d reports, %v; want 4, the bad ones marked", len(got), err)
	}
	for _, r := range got {
		_, isBad := bad[r.Node]
		if isBad != (r.Fault != "") || isBad && (r.Workers != 0 || r.ExpiresAt.IsZero()) || !isBad && r.Workers != 3 {
			t.Errorf("NodeReports has %+v (bad: %v)", r, isBad)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		for _, r := range []outbox.NodeReport{{Node: "n", SweepsPerSecond: f}, {Node: "n", RowsPerSecond: f}} {
			var ae *outbox.ArgumentError
			if err := op.PutNodeReport(o.ctx, r, time.Minute); !errors.As(err, &ae) || !errors.Is(err, outbox.ErrInvalidArgument) {
				t.Errorf("PutNodeReport(sweeps/s %v, rows/s %v) = %v; want an *outbox.ArgumentError", r.SweepsPerSecond, r.RowsPerSecond, err)
			}
		}
	}
}

func checkSettingsCap[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	o, op := rawOperator(t, newHarness)
	full := map[string]string{}
	for i := range outbox.MaxSettings {
		full[fmt.Sprintf("cap-%05d", i)] = `{}`
	}
	if err := o.h.RawSettings(o.ctx, full); err != nil {
		t.Fatalf("RawSettings of %d rows: %v", len(full), err)
	}
	_, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{Namespace: "new", Paused: true})
	var ae *outbox.ArgumentError
	if !errors.As(err, &ae) || !errors.Is(err, outbox.ErrTooManySettings) || !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("PutSettings of a new namespace at the cap = %v; want an *outbox.ArgumentError matching ErrTooManySettings", err)
	}
	if _, err := op.PutSettings(o.ctx, outbox.NamespaceSettings{Namespace: "cap-00007", Paused: true}); err != nil {
		t.Errorf("PutSettings of a namespace that has settings, at the cap: %v", err)
	}
	if list, err := op.ListSettings(o.ctx); err != nil || len(list) != outbox.MaxSettings {
		t.Errorf("ListSettings at the cap = %d rows, %v; want %d, no error", len(list), err, outbox.MaxSettings)
	}
	if err := o.h.RawSettings(o.ctx, map[string]string{"zz-beyond": `{"paused": true}`}); err != nil {
		t.Fatal(err)
	}
	list, err := op.ListSettings(o.ctx)
	if !errors.Is(err, outbox.ErrTooManySettings) || len(list) != outbox.MaxSettings || list[len(list)-1].Namespace != fmt.Sprintf("cap-%05d", outbox.MaxSettings-1) {
		t.Errorf("ListSettings beyond the cap = %d rows, %v; want the first %d and an error matching ErrTooManySettings", len(list), err, outbox.MaxSettings)
	}
}
