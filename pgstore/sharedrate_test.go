package pgstore_test

import (
	"testing"

	"github.com/outboxkit/backpressure/dispatch/dispatchtest"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestSharedRate runs dispatchtest.SharedRate on one schema: a rate set
// through the settings API reaches each of three nodes at its first
// settings poll after the write, and the cluster-wide bound holds after
// it.
func TestSharedRate(t *testing.T) {
	schema := testSchema(t)
	dispatchtest.SharedRate{Open: func(t *testing.T) dispatchtest.SettingsStore {
		s, err := pgstore.New(t.Context(), newPool(t, nil, 4), pgstore.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}.Run(t)
}
