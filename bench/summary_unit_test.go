package bench

import (
	"strings"
	"testing"
)

// The summary prints each measure once, in the order first recorded, with
// the median of its values (the mean of the middle two for an even count),
// their range, their count and its notes without repeats.
func TestSummaryTablePrint(t *testing.T) {
	var s summaryTable
	s.record("b", "%.2f×", "≥ 1", 3, "best: x")
	s.record("a", "%.1f", "", 7, "")
	s.record("b", "%.2f×", "≥ 1", 1, "best: x")
	s.record("b", "%.2f×", "≥ 1", 2, "best: y")
	s.record("a", "%.1f", "", 8, "")
	var out strings.Builder
	s.print(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"| b | 2.00× (1.00×–3.00×) | 3 | ≥ 1 | best: x; best: y |",
		"| a | 7.5 (7.0–8.0) | 2 |  |  |",
	}
	if got := lines[len(lines)-2:]; got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var empty strings.Builder
	(&summaryTable{}).print(&empty)
	if empty.Len() != 0 {
		t.Fatalf("an empty summary printed %q", empty.String())
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 20000: "20,000", 200000: "200,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
