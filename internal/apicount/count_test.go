package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCountSample(t *testing.T) {
	pkgs, err := Count("testdata/sample")
	require.NoError(t, err)
	require.Len(t, pkgs, 1)
	require.Equal(t, API{
		Name:    "sample",
		Names:   []string{"A", "B", "F", "NewT", "T", "TZero", "V"},
		Methods: []string{"T.M"},
	}, pkgs[0])
}

func TestRunPrintsOneLinePerPackage(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"testdata/sample"}, &out, &errOut), errOut.String())
	require.Equal(t, "sample         names   7  methods   1\n", out.String())
}

func TestRunMissingDir(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run([]string{"testdata/nothing-here"}, &out, &errOut))
	require.True(t, strings.HasPrefix(errOut.String(), "apicount: "), errOut.String())
}

// TestRootStaysHoldable pins issue 22's target: the root package's index
// stays at most 50 top-level names, so a newcomer can hold it in their
// head. A name added to the root must displace one, or move to a package
// of its own.
func TestRootStaysHoldable(t *testing.T) {
	pkgs, err := Count("../..")
	require.NoError(t, err)
	require.Len(t, pkgs, 1)
	require.Equal(t, "backpressure", pkgs[0].Name)
	require.LessOrEqual(t, len(pkgs[0].Names), 50, "root names: %v", pkgs[0].Names)
}
