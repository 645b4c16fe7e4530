package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

var _ outbox.Historian = (*Store)(nil)

// AppendHistory stores points (see [outbox.Historian]); bad points are
// an [*outbox.ArgumentError] and store nothing.
func (s *Store) AppendHistory(ctx context.Context, points []outbox.HistoryPoint) error {
	const op = "AppendHistory"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if len(points) > outbox.MaxReportNamespaces {
		return &outbox.ArgumentError{Op: op, Arg: "points", Reason: "more than outbox.MaxReportNamespaces points"}
	}
	for i, p := range points {
		if err := outbox.CheckHistoryPoint(op, i, p); err != nil {
			return err
		}
	}
	h := slices.Clone(s.st.history)
	for _, p := range points {
		p.Held = cloneHeld(p.Held)
		h = append(h, p)
	}
	s.st.history = h
	return nil
}

func cloneHeld(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// History returns the points p selects (see [outbox.Historian]).
func (s *Store) History(ctx context.Context, p outbox.HistoryParams) ([]outbox.HistoryPoint, error) {
	const op = "History"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	p, err := p.Check(op)
	if err != nil {
		return nil, err
	}
	out := []outbox.HistoryPoint{}
	for _, pt := range s.st.history {
		if (p.Namespace == "" || pt.Namespace == p.Namespace) && !pt.At.Before(p.Since) {
			pt.Held = cloneHeld(pt.Held)
			out = append(out, pt)
		}
	}
	// The newest Limit by (At, order appended), then History's order.
	slices.SortStableFunc(out, func(a, b outbox.HistoryPoint) int { return a.At.Compare(b.At) })
	out = out[max(0, len(out)-p.Limit):]
	outbox.SortHistory(out)
	return out, nil
}

// PruneHistory thins the history as [outbox.ThinHistory] does at now.
func (s *Store) PruneHistory(ctx context.Context, now time.Time) (int, error) {
	const op = "PruneHistory"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	kept := outbox.ThinHistory(s.st.history, now)
	n := len(s.st.history) - len(kept)
	s.st.history = kept
	return n, nil
}
