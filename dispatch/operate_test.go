package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/dispatch"
	"github.com/outboxkit/backpressure/internal/memstore"
	"github.com/outboxkit/backpressure/outbox"
)

// TestOperateOptions checks that New refuses an Operate it cannot honour,
// each with an *OptionError naming the field: memstore implements no
// outbox.Operator, and every bound of Operate's doc is enforced.
func TestOperateOptions(t *testing.T) {
	s, err := memstore.New(memstore.Options{ShardCount: 4})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := backpressure.AllShards(4)
	bp, err := backpressure.New(backpressure.Config{BatchSize: 4, DefaultQuota: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	handler := func(context.Context, outbox.Row) error { return nil }
	for _, c := range []struct {
		op    dispatch.Operate
		field string
	}{
		{dispatch.Operate{Node: "n"}, "Operate.Store"},
		{dispatch.Operate{Node: "", Store: fakeOperator{}}, "Operate.Node"},
		{dispatch.Operate{Node: "a\x00b", Store: fakeOperator{}}, "Operate.Node"},
		{dispatch.Operate{Node: "n", Store: fakeOperator{}, SettingsInterval: time.Millisecond}, "Operate.SettingsInterval"},
		{dispatch.Operate{Node: "n", Store: fakeOperator{}, SettingsInterval: 2 * time.Hour}, "Operate.SettingsInterval"},
		{dispatch.Operate{Node: "n", Store: fakeOperator{}, ReportInterval: time.Millisecond}, "Operate.ReportInterval"},
		{dispatch.Operate{Node: "n", Store: fakeOperator{}, ReportTTL: 500 * time.Millisecond}, "Operate.ReportTTL"},
		{dispatch.Operate{Node: "n", Store: fakeOperator{}, ReportInterval: 5 * time.Second, ReportTTL: 2 * time.Second}, "Operate.ReportTTL"},
	} {
		_, err := dispatch.New(bp, s, handler, dispatch.Options{Workers: 1, Operate: &c.op})
		var oe *dispatch.OptionError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, dispatch.ErrInvalidOptions) {
			t.Errorf("New with Operate %+v = %v, want an *OptionError for %s", c.op, err, c.field)
		}
	}
	if _, err := dispatch.New(bp, s, handler, dispatch.Options{Workers: 1, Operate: &dispatch.Operate{Node: "n", Store: fakeOperator{}}}); err != nil {
		t.Errorf("New with a valid Operate: %v", err)
	}
}

// fakeOperator is an outbox.Operator New only holds: these tests never Run.
type fakeOperator struct{ outbox.Operator }
