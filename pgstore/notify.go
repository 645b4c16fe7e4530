package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Subscribe returns a channel that receives a value soon after an Enqueue
// or EnqueueTx that inserted rows commits, in this process or any other
// using the same schema (see [outbox.Notifier]). It holds at most one value:
// many commits before the receiver looks are one wake-up. A wake-up only
// says "look": the claim stays the source of truth, and a dispatcher should
// still poll now and then, for a wake-up lost with a connection.
//
// The channel is closed when ctx is done or the store is closed. Every
// subscriber of a Store shares one dedicated listening connection (outside
// the pool, with the pool's connection settings), opened by the first
// Subscribe and closed when the last subscriber is gone. Subscribe returns
// once that connection listens, so a commit after Subscribe returned is
// never missed while the connection lives; an error means the connection
// could not be opened. If the connection is lost later, it is opened again
// (with a growing pause between attempts, up to 5s) and every subscriber
// gets one wake-up then, since notifications may have been missed.
//
// Mechanism: each enqueue statement that inserts rows calls pg_notify on
// the schema's channel with what it inserted as the payload (see the
// package documentation, "Wake-ups"); PostgreSQL delivers it only when the
// transaction commits, every notification of a transaction at once.
func (s *Store) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	const op = "Subscribe"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	ch, stopped, err := s.listen.subscribe(ctx, s)
	if err != nil {
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		s.listen.unsubscribe(ch)
	}()
	return ch, nil
}

// channelName is the LISTEN/NOTIFY channel of a schema: the schema's name
// and "_outbox", or, when that passes PostgreSQL's 63-byte identifiers, a
// prefix of the name and a hash of all of it.
func channelName(schema string) string {
	const suffix = "_outbox"
	if len(schema)+len(suffix) <= 63 {
		return schema + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s_%08x%s", schema[:63-len(suffix)-9], h.Sum32(), suffix)
}

// listener is a Store's one listening connection and its subscribers. The
// zero value has no connection and no subscriber.
type listener struct {
	start sync.Mutex // serialises starting the loop, which connects

	mu      sync.Mutex
	subs    map[chan struct{}]struct{}
	cancel  context.CancelFunc // stops the running loop; nil when none runs
	stopped chan struct{}      // closed by close, to release Subscribe's goroutines
	closed  bool
}

// subscribe adds a subscriber, first starting the loop on a listening
// connection if none runs. It returns the subscriber's channel and the
// channel close closes.
func (l *listener) subscribe(ctx context.Context, s *Store) (chan struct{}, <-chan struct{}, error) {
	l.start.Lock()
	defer l.start.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, closedError("Subscribe")
	}
	if l.cancel != nil {
		defer l.mu.Unlock()
		ch, stopped := l.add()
		return ch, stopped, nil
	}
	l.mu.Unlock()
	// Only this call (holding start) may start the loop; unsubscribe may
	// only stop one, so no loop runs until this one starts.
	conn, err := s.connectListener(ctx)
	if err != nil {
		return nil, nil, opError("Subscribe", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed { // Close ran while we connected
		_ = conn.Close(context.Background())
		return nil, nil, closedError("Subscribe")
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go s.listenLoop(loopCtx, conn)
	ch, stopped := l.add()
	return ch, stopped, nil
}

// add registers a new subscriber; l.mu must be held.
func (l *listener) add() (chan struct{}, <-chan struct{}) {
	if l.subs == nil {
		l.subs = make(map[chan struct{}]struct{})
	}
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	ch := make(chan struct{}, 1)
	l.subs[ch] = struct{}{}
	return ch, l.stopped
}

// unsubscribe removes and closes ch, if it is still there, and stops the
// loop when no subscriber is left.
func (l *listener) unsubscribe(ch chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[ch]; !ok {
		return
	}
	delete(l.subs, ch)
	close(ch)
	if len(l.subs) == 0 && l.cancel != nil {
		l.cancel()
		l.cancel = nil
	}
}

// wake gives every subscriber a wake-up, unless it already holds one.
func (l *listener) wake() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close closes every subscriber's channel and stops the loop, for good.
func (l *listener) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for ch := range l.subs {
		close(ch)
	}
	l.subs = nil
	if l.stopped != nil {
		close(l.stopped)
	}
	if l.cancel != nil {
		l.cancel()
		l.cancel = nil
	}
}

// connectListener opens a connection with the pool's settings, without
// its tracer, and listens on the schema's channel.
func (s *Store) connectListener(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.Tracer = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listenLoop waits for notifications on conn and wakes the subscribers,
// until ctx is done. A lost connection is opened again, after a pause that
// doubles from 50ms up to 5s while attempts fail, and then every subscriber
// is woken once, for what it may have missed.
func (s *Store) listenLoop(ctx context.Context, conn *pgx.Conn) {
	const (
		firstPause = 50 * time.Millisecond
		maxPause   = 5 * time.Second
	)
	s.kept.Listening(true)
	defer func() {
		s.kept.Listening(false)
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	pause := firstPause
	for {
		if conn == nil {
			c, err := s.connectListener(ctx)
			if err != nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
				pause = min(2*pause, maxPause)
				continue
			}
			conn, pause = c, firstPause
			s.kept.Listening(true)
			s.listen.wake()
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			s.kept.Listening(false)
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			continue
		}
		heard(s.kept, n.Payload) // before the wake-up, so the sweep it starts counts them
		s.listen.wake()
	}
}
