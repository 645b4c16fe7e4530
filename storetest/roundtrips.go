package storetest

import "testing"

func testRoundTrips[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Skip("not yet written")
}
