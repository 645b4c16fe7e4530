package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// issue30Reach is what Sweep reached before issue 30: its target is at most
// 60% of it (1,015 lines).
const issue30Reach = 1693

// TestRootStructure pins the root package's layout (issue 30): no function
// over LongLines, no two files calling each other both ways, and Sweep's
// reach no larger than it is now (1,519 lines, from 1,693, and 42 more for
// issue 35's adaptive ceilings on the plan's path: 1,561; the issue's
// target of 1,015 is not met yet, so this is a ratchet, not the target).
func TestRootStructure(t *testing.T) {
	r, err := Measure("../..", "Sweep")
	require.NoError(t, err)
	require.Equal(t, "backpressure", r.Package)
	require.Empty(t, r.Long, "functions over %d lines", LongLines)
	require.Empty(t, r.TwoWay, "file pairs calling each other both ways")
	require.LessOrEqual(t, r.ReachLines, 1561, "Sweep reaches more lines than it did after issue 30's reshape")
	require.Less(t, r.ReachLines, issue30Reach)
}
