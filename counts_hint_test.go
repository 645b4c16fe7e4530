package backpressure

import "testing"

// firstCountCap over a run of sweeps, each recorded with its largest
// grant: full for the first sweep; while grants grow, room to double;
// steady, shrinking or alternating between two sizes, one more than the
// larger of the last two; never above full.
func TestFirstCountCap(t *testing.T) {
	const full = 100
	var h sweepHints
	if got := h.firstCountCap(full); got != full {
		t.Fatalf("first sweep: cap %d, want %d", got, full)
	}
	for i, step := range []struct{ grant, want int }{
		{10, 21}, // grew from none
		{10, 11}, // steady
		{11, 23}, // grew
		{10, 12}, // shrank: the larger of 11 and 10, plus one
		{11, 23}, // grew again
		{11, 12},
		{3, 12},
		{3, 4},
		{0, 4},
		{0, 1},   // claimed nothing twice
		{49, 99}, // grew, 2·49 + 1 < full
		{50, full},
		{50, 51},
		{full, full},
		{full, full},
	} {
		var claims []ScopedClaim // none when the sweep claimed nothing
		if step.grant > 0 {
			claims = []ScopedClaim{{Route: Route{Namespace: "n", TaskQueue: "q"}, Limit: step.grant}, {Route: Route{Namespace: "m", TaskQueue: "q"}, Limit: 1}}
		}
		h.record(sweepResult{plan: Plan{Claims: claims}})
		if got := h.firstCountCap(full); got != step.want {
			t.Fatalf("after sweep %d (largest grant %d): cap %d, want %d", i+1, step.grant, got, step.want)
		}
	}
}
