package pgstore_test

import (
	"context"
	"testing"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestSharedSettingsBadRows runs dispatchtest.Settings on one schema:
// settings rows written by SQL (JSON null for a paused namespace, a quota
// of -5, [1, 2]) never loosen a limit on a dispatcher node.
func TestSharedSettingsBadRows(t *testing.T) {
	schema := testSchema(t)
	pool := newPool(t, nil, 4)
	open := func(t *testing.T) dispatchtest.SettingsStore {
		s, err := pgstore.New(t.Context(), newPool(t, nil, 4), pgstore.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	open(t) // creates the schema
	dispatchtest.Settings{Open: open, Raw: func(ctx context.Context, bodies map[string]string) error {
		return rawSettings(ctx, pool, schema, bodies)
	}}.Run(t)
}

// TestHistory runs dispatchtest.History, each check on a schema of its
// own: the node's counters in the history, and a seeded drain's estimate.
func TestHistory(t *testing.T) {
	dispatchtest.History{Open: func(t *testing.T) dispatchtest.HistoryStore {
		s, err := pgstore.New(t.Context(), newPool(t, nil, 4), pgstore.Options{Schema: testSchema(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
