package dispatchtest

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// finished reports whether r is in a final state: settled or dead.
func finished(r outbox.Row) bool {
	return r.State == outbox.StateSettled || r.State == outbox.StateDead
}

// awaitRows polls s every 5ms until done holds for the row of every key,
// and returns those rows. Past deadline it returns the rows that were done
// at the last look, in key order up to the first that was not: fewer than
// keys.
func awaitRows(t *testing.T, s outbox.Store, keys []string, done func(outbox.Row) bool, deadline time.Time) []outbox.Row {
	t.Helper()
	rows := make([]outbox.Row, 0, len(keys))
	for {
		rows = rows[:0]
		for _, k := range keys {
			r, err := s.Get(context.Background(), k)
			if err != nil {
				t.Fatalf("Get(%q): %v", k, err)
			}
			if !done(r) {
				break
			}
			rows = append(rows, r)
		}
		if len(rows) == len(keys) || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(5 * time.Millisecond)
	}
}
