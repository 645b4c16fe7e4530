package memstore

import (
	"context"
	"fmt"

	"github.com/outboxkit/backpressure/outbox"
)

// subscriber is one Subscribe call's channel. It is closed, under the
// store's mutex, when the subscriber's ctx is done or the store closes;
// notify sends under the same mutex, so it never sends on a closed channel.
type subscriber struct {
	ch chan struct{}
}

// Subscribe returns a channel that receives a value after any Enqueue that
// inserted rows or Requeue that moved rows; notifications are coalesced (the channel holds at most
// one). The channel is closed when ctx is done or the store is closed.
func (s *Store) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	if err := s.begin(ctx, "Subscribe"); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	sub := &subscriber{ch: make(chan struct{}, 1)}
	s.subs[sub] = struct{}{}
	done := s.done
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[sub]; ok {
			delete(s.subs, sub)
			close(sub.ch)
		}
	}()
	return sub.ch, nil
}

// notify wakes every subscriber. Called with mu held.
func (s *Store) notify() {
	for sub := range s.subs {
		select {
		case sub.ch <- struct{}{}:
		default: // one is waiting already: coalesced
		}
	}
}

// Close closes the store: every later call returns an error matching
// [outbox.ErrClosed], and every subscriber's channel is closed. Closing a
// closed store returns such an error too.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.done == nil: // the zero Store, never opened
		return fmt.Errorf("memstore: Close: %w", outbox.ErrClosed)
	case s.st == nil: // closed already: Close is idempotent
		return nil
	}
	s.st = nil
	for sub := range s.subs {
		delete(s.subs, sub)
		close(sub.ch)
	}
	close(s.done)
	return nil
}
