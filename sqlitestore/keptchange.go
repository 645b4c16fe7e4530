package sqlitestore

import (
	"time"

	"github.com/outboxkit/backpressure/internal/keptcount"
	"github.com/outboxkit/backpressure/outbox"
)

// What the store's writes report to its kept counts (kept.go): what a
// claim took, what a completion did, which namespaces an enqueue or a
// requeue touched. These call nothing else of the store's, so every write
// can report through them.

// newKept returns the kept counts Options.RecountInterval asks for: nil
// (none) unless it is positive. They hear every change (data_version), so
// pending counts are kept from the start.
func newKept(interval time.Duration) *keptcount.Counts {
	if interval <= 0 {
		return nil
	}
	k := keptcount.New(interval)
	k.Listening(true)
	return k
}

// completeKept begins a completion's change for the kept counts, and
// returns the function that ends it with the call's results (nil and an
// error: unknown).
func (s *Store) completeKept(completions []outbox.Completion) func([]outbox.Result, error) {
	ch, at := s.kept.Begin(), s.now()
	return func(results []outbox.Result, err error) {
		if err != nil {
			ch.Failed()
			return
		}
		ch.Completed(completions, results, at)
	}
}

// touched tells the kept counts that an enqueue of msgs (or, for nil, a
// change of pending rows anywhere) committed, or may have.
func (s *Store) touched(msgs []outbox.Message) {
	if s.kept == nil {
		return
	}
	if msgs == nil {
		s.kept.Touched(nil)
		return
	}
	seen := make(map[string]bool, len(msgs))
	names := []string{}
	for _, m := range msgs {
		if !seen[m.Namespace] {
			seen[m.Namespace] = true
			names = append(names, m.Namespace)
		}
	}
	s.kept.Touched(names)
}
