package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Subscribe returns a channel that receives a value soon after rows are
// committed by an Enqueue or Requeue of this store (at once, from the
// committing goroutine), or by any other writer of the database: an
// EnqueueTx in an application transaction, another Store on the same file,
// another process. Those the store cannot see commit, so it polls for them:
// while it has subscribers, one goroutine reads the database's enqueue
// counter (outbox_meta.enqueue_seq, which every enqueue bumps in its own
// transaction) every Options.PollInterval, so they are seen within about
// one interval of their commit. (The driver's commit hook would only see
// the store's own connections, and fires before the commit is durable.)
//
// Notifications are coalesced: the channel holds at most one value. A
// notification only says "look": the claim stays the source of truth, and
// a dispatcher still sweeps on a timer for rows that become claimable by
// time (schedules, retry delays, expired leases), which notify no one. The
// channel is closed when ctx is done or the store is closed.
func (s *Store) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	if err := s.ready(); err != nil {
		return nil, s.fail("Subscribe", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Where the counter stands now: the poller signals only what commits
	// after this, and so surely every commit after Subscribe returns.
	var seq int64
	if err := s.reader.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'enqueue_seq'`).Scan(&seq); err != nil {
		return nil, s.fail("Subscribe", err)
	}
	ch := make(chan struct{}, 1)
	done, ok := s.subs.add(s, ch, seq)
	if !ok {
		return nil, fmt.Errorf("sqlitestore: Subscribe: %w", outbox.ErrClosed)
	}
	go func() {
		select {
		case <-ctx.Done():
			s.subs.remove(ch)
		case <-done:
		}
	}()
	return ch, nil
}

// subscribers are a store's subscriptions and their poller.
type subscribers struct {
	mu      sync.Mutex
	chans   map[chan struct{}]bool
	seen    int64 // the highest enqueue_seq already signalled
	polling bool
	// ctx is done once closeAll ran: it ends the poller and its query in
	// flight, and Subscribe's watchers. Made by the first add or closeAll.
	ctx    context.Context
	cancel context.CancelFunc
	closed bool
}

// init makes b.ctx if it is not made yet. b.mu is held.
func (b *subscribers) init() {
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithCancel(context.Background())
	}
}

// add registers ch, with seq the enqueue counter as the subscriber found
// it, and starts the poller if it is not running. It returns the channel
// closed when the store closes, and false when it already has.
func (b *subscribers) add(s *Store, ch chan struct{}, seq int64) (<-chan struct{}, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	if seq > b.seen {
		// Commits in (seen, seq] came after every subscriber already here
		// subscribed (each found at most seen), and the poller has not
		// signalled them yet: tell those subscribers now, since raising
		// seen means the poller never will.
		b.signal()
		b.seen = seq
	}
	b.init()
	if b.chans == nil {
		b.chans = map[chan struct{}]bool{}
	}
	b.chans[ch] = true
	if !b.polling {
		b.polling = true
		go b.poll(b.ctx, s)
	}
	return b.ctx.Done(), true
}

// remove unregisters ch and closes it.
func (b *subscribers) remove(ch chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.chans[ch] {
		delete(b.chans, ch)
		close(ch)
	}
}

// closeAll closes every channel and stops the poller; later adds fail.
func (b *subscribers) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.init()
	b.cancel()
	for ch := range b.chans {
		close(ch)
	}
	b.chans = nil
}

// committed signals every subscriber that the enqueue numbered seq (and so
// every one before it) committed.
func (b *subscribers) committed(seq int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = max(b.seen, seq)
	b.signal()
}

// passed records that the enqueue numbered seq committed without rows to
// signal, when every enqueue before it was signalled already (otherwise the
// poller still signals those).
func (b *subscribers) passed(seq int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == seq-1 {
		b.seen = seq
	}
}

// signal sends to every channel that is empty. b.mu is held.
func (b *subscribers) signal() {
	for ch := range b.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// poll reads enqueue_seq every poll interval while there are subscribers,
// signalling when it grew past what was already signalled. It ends when the
// store closes (ctx is done) or the last subscriber leaves. It starts no
// goroutine of its own, so nothing outlives it.
func (b *subscribers) poll(ctx context.Context, s *Store) {
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		var seq int64
		err := s.reader.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'enqueue_seq'`).Scan(&seq)
		b.mu.Lock()
		if len(b.chans) == 0 || b.closed {
			b.polling = false
			b.mu.Unlock()
			return
		}
		if err == nil && seq > b.seen {
			b.seen = seq
			b.signal()
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
