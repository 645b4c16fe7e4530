package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// summary collects the rows of issue 31's table that this process's
// benchmarks measured, to print them together once every benchmark has
// run (see TestMain). Each benchmark call (one per -count) adds one value
// per row it measures; the table gives the median over the calls and
// their range.
var summary = &summaryTable{}

// summaryTable is the table's rows in the order first recorded.
type summaryTable struct {
	mu    sync.Mutex
	order []string
	rows  map[string]*summaryRow
}

// summaryRow is one measure: its values (one per benchmark call), how to
// print one, the target, and notes (such as which arm was best).
type summaryRow struct {
	values []float64
	format string // fmt verb for one value, e.g. "%.2f×"
	target string
	notes  []string
}

// record adds value to the row measure (created with format and target on
// first use); note, when not empty, is kept beside it.
func (t *summaryTable) record(measure, format, target string, value float64, note string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		t.rows = map[string]*summaryRow{}
	}
	r, ok := t.rows[measure]
	if !ok {
		r = &summaryRow{format: format, target: target}
		t.rows[measure] = r
		t.order = append(t.order, measure)
	}
	r.values = append(r.values, value)
	if note != "" && !slices.Contains(r.notes, note) {
		r.notes = append(r.notes, note)
	}
}

// print writes the table as Markdown, one row per measure: the median of
// its values, their range when there are several, and how many.
func (t *summaryTable) print(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.order) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSummary (issue 31's table): median (min–max) over the runs (-count) of each benchmark; every ratio is of arms paired in the same run")
	fmt.Fprintln(w, "| measure | measured | runs | target | notes |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, m := range t.order {
		r := t.rows[m]
		v := slices.Clone(r.values)
		slices.Sort(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		s := fmt.Sprintf(r.format, med)
		if len(v) > 1 {
			s += fmt.Sprintf(" ("+r.format+"–"+r.format+")", v[0], v[len(v)-1])
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s |\n", m, s, len(v), r.target, strings.Join(r.notes, "; "))
	}
}

// TestMain runs the package's tests and benchmarks, then prints the
// summary table of what the benchmarks recorded (nothing when none did).
func TestMain(m *testing.M) {
	code := m.Run()
	summary.print(os.Stdout)
	os.Exit(code)
}
