package main

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// issue30Reach is what Sweep reached before issue 30: its target is at most
// 60% of it (1,015 lines).
const issue30Reach = 1693

// TestRootStructure pins the root package's layout (issue 30): no function
// over LongLines, no two files calling each other both ways, and Sweep's
// reach no larger than it is now (1,428 lines, from 1,693: 1,519 after
// issue 30's reshape, 1,561 with issue 35's adaptive ceilings, less the 138
// lines of the route rule, shard ceilings and settings checks now in
// outbox and internal/limits, plus 5 for issue 31's first-count cap from
// the last two sweeps' grants, with counts read ahead trimmed to it; the issue's
// target of 1,015 is not met yet, so this is a ratchet, not the target).
func TestRootStructure(t *testing.T) {
	r, err := Measure("../..", "Sweep")
	require.NoError(t, err)
	require.Equal(t, "backpressure", r.Package)
	require.Empty(t, r.Long, "functions over %d lines", LongLines)
	require.Empty(t, r.TwoWay, "file pairs calling each other both ways")
	require.LessOrEqual(t, r.ReachLines, 1428, "Sweep reaches more lines than it did after issue 30's reshape")
	require.Less(t, r.ReachLines, issue30Reach)
}

// sweepFloor is what any sweep must reach: the planner as a sweep runs it
// ((*engine).plan), the two counts, the claim and the checks of the store's
// answers, taking the engine and committing.
const sweepFloor = "(*engine).plan,(*sweeper).countClaimed,(*sweeper).countPending,(*counts).broken,claimPlan,(*engine).commit,enter,settle,(*engine).ended"

// TestSweepFloor pins the floor under Sweep's reach (docs/engine.md,
// "What a sweep reaches"): Plan alone reaches 676 lines, the planner as a
// sweep runs it 631, and the required steps with it 897, so issue 30's
// target of 1,015 would leave 118 lines for every optional path (Counter windows, window claims,
// TxSweeper, rate reservation, reads ahead). The figures may only fall.
func TestSweepFloor(t *testing.T) {
	plan, err := Measure("../..", "(*Backpressure).Plan")
	require.NoError(t, err)
	require.LessOrEqual(t, plan.ReachLines, 676, "Plan's reach")
	floor, err := Measure("../..", sweepFloor)
	require.NoError(t, err)
	require.LessOrEqual(t, floor.ReachLines, 897, "the required steps' reach")
	sweep, err := Measure("../..", "Sweep")
	require.NoError(t, err)
	require.Less(t, plan.ReachLines, floor.ReachLines)
	require.Less(t, floor.ReachLines, sweep.ReachLines)
	in := map[string]bool{}
	for _, f := range sweep.Reach {
		in[f.Name] = true
	}
	for _, f := range floor.Reach {
		if !in[f.Name] {
			t.Errorf("%s is in the floor but Sweep does not reach it", f.Name)
		}
	}
}

// TestOutboxImportsNoPlanner pins that package outbox, the vocabulary every
// store speaks, depends on nothing of the planner's (issue 30): no package
// it imports, directly or through the module's other packages, is the root
// package. Test files are not followed (outbox's external tests may use the
// planner).
func TestOutboxImportsNoPlanner(t *testing.T) {
	const module = "github.com/outboxkit/backpressure"
	seen := map[string]bool{}
	var visit func(path string, via []string)
	visit = func(path string, via []string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.ImportDir(filepath.Join("../..", strings.TrimPrefix(strings.TrimPrefix(path, module), "/")), 0)
		require.NoError(t, err, path)
		for _, imp := range pkg.Imports {
			if imp == module {
				t.Errorf("%s imports the root package %s", strings.Join(append(via, path), " → "), module)
			}
			if strings.HasPrefix(imp, module+"/") {
				visit(imp, append(via, path))
			}
		}
	}
	visit(module+"/outbox", nil)
	require.True(t, seen[module+"/internal/limits"], "the walk followed outbox's imports within the module")
}
