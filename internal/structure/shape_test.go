package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShapeOutsideRoot pins issue 30's structure targets in the packages
// it named outside the root package and that reached them: bpsim's
// command and its sim package, and dispatchtest. Each has no function over
// LongLines and no two files calling each other both ways.
func TestShapeOutsideRoot(t *testing.T) {
	for _, dir := range []string{"../../cmd/bpsim", "../../cmd/bpsim/internal/sim", "../../dispatch/dispatchtest"} {
		r, err := Measure(dir, "")
		require.NoError(t, err, dir)
		require.Empty(t, r.Long, "%s: functions over %d lines", dir, LongLines)
		require.Empty(t, r.TwoWay, "%s: file pairs calling each other both ways", dir)
	}
}
