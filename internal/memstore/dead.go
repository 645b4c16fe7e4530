package memstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// ListDead returns dead rows in dispatch-key (byte) order, after p.After,
// of p.Namespace (or every namespace), at most p.Limit of them (0 means
// 100). A Limit outside 0 to 10,000 is an [*outbox.ArgumentError].
func (s *Store) ListDead(ctx context.Context, p outbox.ListDeadParams) ([]outbox.Row, error) {
	const op = "ListDead"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	limit, err := call(op).ListDead(p)
	if err != nil {
		return nil, err
	}
	out := []outbox.Row{}
	for _, r := range s.st.rows {
		if r.State == outbox.StateDead && r.DispatchKey > p.After && (p.Namespace == "" || r.Namespace == p.Namespace) {
			out = append(out, copyRow(r))
		}
	}
	slices.SortFunc(out, func(a, b outbox.Row) int { return strings.Compare(a.DispatchKey, b.DispatchKey) })
	return out[:min(len(out), limit)], nil
}

// Requeue moves the dead rows among dispatchKeys back to pending,
// claimable at once, with Attempts 0 and FinishedAt cleared (LastError is
// kept), and returns how many it moved. Keys of rows that are not dead, or
// of no row, are left alone; a key named twice moves its row once; a key no
// row can have is an [*outbox.ArgumentError], and then nothing moves.
// Subscribers are notified when it moved any.
func (s *Store) Requeue(ctx context.Context, dispatchKeys []string) (int, error) {
	const op = "Requeue"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := call(op).Keys(dispatchKeys); err != nil {
		return 0, err
	}
	now := s.now()
	next := s.st.clone()
	moved := 0
	for _, k := range dispatchKeys {
		r, ok := next.rows[k]
		if !ok || r.State != outbox.StateDead {
			continue
		}
		if err := s.step(op); err != nil {
			return 0, err
		}
		r.State = outbox.StatePending
		r.Attempts = 0
		r.RunAt = now
		r.FinishedAt = time.Time{}
		next.rows[k] = r
		moved++
	}
	s.st = next
	if moved > 0 {
		s.notify()
	}
	return moved, nil
}

// PurgeSettled deletes up to limit rows settled before before (FinishedAt
// < before), oldest FinishedAt first, and returns how many. A limit below
// 1 is an [*outbox.ArgumentError].
func (s *Store) PurgeSettled(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.purge(ctx, "PurgeSettled", outbox.StateSettled, before, limit)
}

// PurgeDead deletes up to limit rows dead-lettered before before, oldest
// first, as PurgeSettled does for settled rows.
func (s *Store) PurgeDead(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.purge(ctx, "PurgeDead", outbox.StateDead, before, limit)
}

func (s *Store) purge(ctx context.Context, op string, st outbox.State, before time.Time, limit int) (int, error) {
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := call(op).PurgeLimit(limit); err != nil {
		return 0, err
	}
	rows := s.st.byID(func(r *outbox.Row) bool { return r.State == st && r.FinishedAt.Before(before) })
	slices.SortStableFunc(rows, func(a, b outbox.Row) int { return a.FinishedAt.Compare(b.FinishedAt) })
	next := s.st.clone()
	n := 0
	for _, r := range rows[:min(len(rows), limit)] {
		if err := s.step(op); err != nil {
			return 0, err
		}
		delete(next.rows, r.DispatchKey)
		n++
	}
	s.st = next
	return n, nil
}
