package memstore

import (
	"context"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Complete applies each completion to its row, fenced by its lease: one
// whose lease is not the row's current live claim is reported in its
// [outbox.Result] as a [*outbox.LeaseLostError] and changes nothing; the
// others take effect together. An invalid Outcome, a Retry or Snooze with a Delay
// outside 0 to [outbox.MaxDelay], a dispatch key no row can have (empty, not valid UTF-8, holding a
// NUL byte) or one named twice is an [*outbox.ArgumentError], and then
// nothing is applied.
func (s *Store) Complete(ctx context.Context, completions []outbox.Completion) ([]outbox.Result, error) {
	const op = "Complete"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := call(op).Completions(completions); err != nil {
		return nil, err
	}
	now := s.now()
	next := s.st.clone()
	out := make([]outbox.Result, len(completions))
	for i, c := range completions {
		r, ok := next.rows[c.DispatchKey]
		if !ok || r.Token != c.Token || !live(&r, now) {
			out[i].Err = &outbox.LeaseLostError{Op: op, DispatchKey: c.DispatchKey, Token: c.Token}
			continue
		}
		if err := s.step(op); err != nil {
			return nil, err
		}
		switch {
		case c.Outcome == outbox.Settle:
			r.State = outbox.StateSettled
			r.FinishedAt = now
		case c.Outcome == outbox.Snooze:
			r.State = outbox.StatePending
			r.RunAt = now.Add(c.Delay)
			r.Attempts--
			r.Snoozes++
			if c.Error != "" {
				r.LastError = outbox.TruncateError(c.Error)
			}
		case c.Outcome == outbox.Retry && (r.MaxAttempts == 0 || r.Attempts < r.MaxAttempts):
			r.State = outbox.StatePending
			r.RunAt = now.Add(c.Delay)
			r.LastError = outbox.TruncateError(c.Error)
		default: // DeadLetter, or Retry of a row out of attempts
			r.State = outbox.StateDead
			r.FinishedAt = now
			r.LastError = outbox.TruncateError(c.Error)
		}
		next.rows[r.DispatchKey] = r
		out[i].State = r.State
	}
	s.st = next
	return out, nil
}

// Settle settles the row claimed under lease: Complete with one entry.
func (s *Store) Settle(ctx context.Context, lease outbox.Lease) error {
	return s.completeOne(ctx, outbox.Completion{Lease: lease, Outcome: outbox.Settle})
}

// Retry puts the row claimed under lease back to pending, claimable after
// delay, recording cause (dead-lettering it instead once it is out of
// attempts): Complete with one entry.
func (s *Store) Retry(ctx context.Context, lease outbox.Lease, delay time.Duration, cause error) error {
	c := outbox.Completion{Lease: lease, Outcome: outbox.Retry, Delay: delay}
	if cause != nil {
		c.Error = cause.Error()
	}
	return s.completeOne(ctx, c)
}

func (s *Store) completeOne(ctx context.Context, c outbox.Completion) error {
	res, err := s.Complete(ctx, []outbox.Completion{c})
	if err != nil {
		return err
	}
	return res[0].Err
}

// ExtendLeases extends each live lease to Lease() from now and reports,
// per lease, the new end or a [*outbox.LeaseLostError]; a lease already
// lost is never revived. A dispatch key no row can have, or one named
// twice, is an [*outbox.ArgumentError], and then nothing is extended.
func (s *Store) ExtendLeases(ctx context.Context, leases []outbox.Lease) ([]outbox.Result, error) {
	const op = "ExtendLeases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := call(op).Leases(leases); err != nil {
		return nil, err
	}
	now := s.now()
	next := s.st.clone()
	out := make([]outbox.Result, len(leases))
	for i, l := range leases {
		r, ok := next.rows[l.DispatchKey]
		if !ok || r.Token != l.Token || !live(&r, now) {
			out[i].Err = &outbox.LeaseLostError{Op: op, DispatchKey: l.DispatchKey, Token: l.Token}
			continue
		}
		if err := s.step(op); err != nil {
			return nil, err
		}
		r.LeaseExpiresAt = now.Add(s.lease)
		next.rows[r.DispatchKey] = r
		out[i] = outbox.Result{State: r.State, LeaseExpiresAt: r.LeaseExpiresAt}
	}
	s.st = next
	return out, nil
}
