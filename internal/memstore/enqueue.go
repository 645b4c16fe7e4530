package memstore

import (
	"context"
	"fmt"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Enqueue inserts msgs, all or nothing, skipping any whose dispatch key the
// store already holds in any state (or that an earlier message of the batch
// carries), and returns how many it inserted. A batch with an invalid
// message returns a [*outbox.MessageError] and inserts nothing. Subscribers
// are notified when at least one row was inserted.
func (s *Store) Enqueue(ctx context.Context, msgs []outbox.Message) (inserted int, err error) {
	const op = "Enqueue"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := call(op).Messages(msgs); err != nil {
		return 0, err
	}
	now := s.now()
	next := s.st.clone()
	for _, m := range msgs {
		if _, dup := next.rows[m.DispatchKey]; dup {
			continue
		}
		if err := s.step(op); err != nil {
			return 0, err
		}
		next.nextID++
		r := outbox.Row{
			ID:          next.nextID,
			DispatchKey: m.DispatchKey,
			Namespace:   m.Namespace,
			TaskQueue:   m.TaskQueue,
			Shard:       backpressure.ShardFor(m.DispatchKey, s.shardCount),
			Payload:     append([]byte{}, m.Payload...),
			State:       outbox.StatePending,
			MaxAttempts: m.MaxAttempts,
			Priority:    m.Priority,
			Headers:     cloneHeaders(m.Headers),
			EnqueuedAt:  now,
			RunAt:       now,
		}
		if r.MaxAttempts == 0 {
			r.MaxAttempts = s.maxAttempts
		}
		if !m.RunAt.IsZero() {
			r.RunAt = m.RunAt
		}
		next.rows[r.DispatchKey] = r
		inserted++
	}
	s.st = next
	if inserted > 0 {
		s.notify()
	}
	return inserted, nil
}

// Get returns the row with dispatchKey in whatever state, or an error
// matching [outbox.ErrNotFound]; a key no row can have is an
// [*outbox.ArgumentError].
func (s *Store) Get(ctx context.Context, dispatchKey string) (outbox.Row, error) {
	const op = "Get"
	if err := s.begin(ctx, op); err != nil {
		return outbox.Row{}, err
	}
	defer s.mu.Unlock()
	if err := call(op).DispatchKey("dispatchKey", dispatchKey); err != nil {
		return outbox.Row{}, err
	}
	r, ok := s.st.rows[dispatchKey]
	if !ok {
		return outbox.Row{}, fmt.Errorf("memstore: %s %q: %w", op, dispatchKey, outbox.ErrNotFound)
	}
	return copyRow(r), nil
}

// Stats counts every row by state, judged on the store's clock.
func (s *Store) Stats(ctx context.Context) (outbox.Stats, error) {
	if err := s.begin(ctx, "Stats"); err != nil {
		return outbox.Stats{}, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var st outbox.Stats
	for _, r := range s.st.rows {
		switch {
		case r.State == outbox.StatePending && now.Before(r.RunAt):
			st.Scheduled++
		case r.State == outbox.StatePending:
			st.Pending++
		case live(&r, now):
			st.Claimed++
		case r.State == outbox.StateClaimed:
			st.Expired++
		case r.State == outbox.StateSettled:
			st.Settled++
		case r.State == outbox.StateDead:
			st.Dead++
		}
		st.Total++
	}
	return st, nil
}
