package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMeasureSample(t *testing.T) {
	r, err := Measure("testdata/sample", "Entry")
	require.NoError(t, err)
	require.Equal(t, "sample", r.Package)
	require.Equal(t, []Func{{Name: "(*T).M", File: "b.go", Lines: 84}}, r.Long)
	require.Equal(t, []string{"a.go ↔ b.go"}, r.TwoWay)
	require.Equal(t, []Func{
		{Name: "(*T).M", File: "b.go", Lines: 84},
		{Name: "Entry", File: "a.go", Lines: 1},
		{Name: "helper", File: "a.go", Lines: 1},
		{Name: "step", File: "b.go", Lines: 1},
	}, r.Reach)
	require.Equal(t, 87, r.ReachLines)
	require.Equal(t, 2, r.ReachFiles)
}

func TestMeasureNoEntry(t *testing.T) {
	_, err := Measure("testdata/sample", "Missing")
	require.ErrorContains(t, err, "no function Missing")
	r, err := Measure("testdata/sample", "")
	require.NoError(t, err)
	require.Empty(t, r.Reach)
}
