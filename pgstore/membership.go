package pgstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
)

// MaxNodeBytes is the longest node name, in bytes.
const MaxNodeBytes = 255

// MinHeartbeat is the shortest MembershipOptions.Heartbeat (50ms). A
// heartbeat is one transaction of three statements, so a node heartbeats
// at most 20 times a second, and the interval stays well above the round
// trips a heartbeat needs on any network where a lease of
// [outbox.MinLease] makes sense; a shorter interval would only spin.
const MinHeartbeat = 50 * time.Millisecond

// ErrNodeNameInUse reports a Join, or a heartbeat, whose node name is held
// by another live member of the schema (another process, or another Join in
// this one): it is a member under that name until it leaves or its lease
// lapses, with every ownership lease it holds under the name. The Join
// failed and left nothing running; a heartbeat that gets it owns nothing
// from then on (its leases lapsed already, since the name is taken only
// once they have), and later heartbeats try the name again.
var ErrNodeNameInUse = errors.New("pgstore: node name in use by another live member")

// MembershipOptions configures [Store.Join]. The zero value is valid.
type MembershipOptions struct {
	// Node names this node: valid UTF-8 without NUL bytes, at most
	// [MaxNodeBytes] bytes. The database keeps it unique among live
	// members: a Join under a name another Join holds (in any process)
	// fails with [ErrNodeNameInUse] until that one leaves, or its member
	// lease and every ownership lease it holds lapse; the holder is
	// unaffected. So a process restarted under a fixed name may rejoin
	// only after about a Lease. Zero value: host name, process id and a
	// random suffix, so a restarted process is a new node at once.
	Node string

	// Lease is the membership and ownership lease: a node that has not
	// heartbeaten for Lease, on the database's clock, is no longer a
	// member, and its shards may be taken over. Zero value: 3/2 of the
	// store's claim lease (Options.Lease), at most [outbox.MaxLease]. It
	// must be at least the claim lease plus Heartbeat, as the zero values
	// are (for a claim lease up to 16h), so that a node that dies still
	// owns its shards (and its ceiling still counts) while its claimed
	// rows' leases run out: that is what keeps a tenant's running rows
	// within the sum of the current owners' ceilings across a hand-off.
	// Below that, or above [outbox.MaxLease], is an error.
	Lease time.Duration

	// Heartbeat is how often the node renews its leases and rebalances.
	// Zero value: Lease/4, at least [MinHeartbeat]. It must be in
	// [MinHeartbeat, Lease/2], so that one late or failed heartbeat does
	// not lose the node its shards.
	Heartbeat time.Duration

	// Logger receives a warning for each failed heartbeat. Nil: none.
	Logger *slog.Logger
}

// Membership is one node's membership of the set of dispatcher nodes that
// share a schema, kept with heartbeat leases in the database. Each
// heartbeat renews the node's member lease, computes the assignment of the
// shards over the live members with [AssignShards] (rendezvous hashing, so a
// join or a leave moves about 1/n of the shards), releases the shards it
// owns but is no longer assigned (after draining them for one heartbeat:
// it stops claiming on them and drops them from [Membership.Owned] first,
// so its ceilings stop counting them before another node starts claiming
// on them), renews those it still owns, and takes
// the assigned shards that are free: released by their owner, or whose
// owner's lease expired. Every acquisition increments the shard's epoch, its
// fencing token. Leases are judged by the database's clock (now() and
// clock_timestamp()), never the nodes'.
//
// Claims through [Membership.Store] are fenced: a claim takes rows only on
// shards this node owns, at the epoch it acquired them with, under an
// ownership lease that is live at the instant the claim statement runs. A
// node paused or partitioned past its lease claims nothing, and a new owner
// claims only after the old owner's lease expired or it released the shard:
// at no instant do two nodes claim on one shard. Completions stay fenced by
// claim tokens. The claimed counts are per shard, whoever claimed the rows,
// so a new owner's headroom includes the rows the old owner still runs.
//
// Build it with [Store.Join]; end it with [Membership.Leave]. A Membership
// is safe for concurrent use.
//
// The node's own view, [Membership.Owned], never runs ahead of the
// database: a heartbeat's leases are taken to run for Lease from the
// instant the heartbeat was sent (the database starts them later, when it
// runs the statements), on this process's monotonic clock, so the view is
// empty from the moment any of its leases may have lapsed, whatever the
// replies said or failed to say, and fills again from the database's
// answer to the next heartbeat that is confirmed within a Lease of being
// sent.
//
// Convergence: after a join, ownership matches the new assignment within
// about four heartbeats; after a node leaves without Leave (it crashed or
// is paused), within Lease plus a heartbeat, both on the database's clock.
type Membership struct {
	store       *Store // unfenced: the heartbeats
	view        *Store // fenced: the claims
	node        string
	incarnation string // random, per Join: the database keeps one live incarnation per node name
	lease       time.Duration
	heartbeat   time.Duration
	logger      *slog.Logger
	manual      bool // tests: no background heartbeats

	mu       sync.Mutex
	held     map[int32]int64 // shard → epoch, as of the last heartbeat: the claims' shards
	draining []int32         // shards no longer assigned, kept one more heartbeat, not claimed on
	owned    backpressure.OwnedShardFraction
	none     backpressure.OwnedShardFraction      // no shard of the store's count
	changes  chan backpressure.OwnedShardFraction // holds the newest unread set
	// validUntil is when held may stop being true: the sending time of
	// the last heartbeat confirmed in time, plus the lease, on the
	// monotonic clock; zero before the first. expiry empties held then.
	validUntil time.Time
	expiry     *time.Timer
	replyHook  func()                        // tests: runs once a heartbeat's transaction committed, before its reply is judged
	lockedHook func(context.Context, pgx.Tx) // tests: runs in a heartbeat's transaction between its lock and rebalance statements
	left       bool

	beating chan struct{} // a token per heartbeat or Leave release in flight: one at a time
	stop    context.CancelFunc
	done    chan struct{}
}

// Join adds this process as a node of the store's schema and runs its
// first heartbeat before returning, so [Membership.Owned] is meaningful at
// once (it may still be empty while other nodes hand shards over). Heartbeats
// then run in the background until [Membership.Leave].
//
// Invalid options are an [*outbox.ArgumentError]; so is a store built with
// Options.Now, since membership leases are judged on the database's clock.
// A failed first heartbeat is returned, and nothing is left running.
func (s *Store) Join(ctx context.Context, opts MembershipOptions) (*Membership, error) {
	const op = "Join"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if s.now != nil {
		return nil, argError(op, "Store", "built with Options.Now: membership leases are judged on the database's clock")
	}
	if s.fence != nil {
		return nil, argError(op, "Store", "is a Membership's store")
	}
	opts, err := s.membershipOptions(ctx, op, opts)
	if err != nil {
		return nil, err
	}
	m, err := s.newMembership(op, opts, joinManual(ctx))
	if err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, s.sql.membership.seed, int32(s.shardCount)); err != nil {
		return nil, opError(op, err)
	}
	m.expiry = time.AfterFunc(time.Hour, m.expire)
	m.expiry.Stop()
	if err := m.Heartbeat(ctx); err != nil {
		m.expiry.Stop()
		if errors.Is(err, ErrNodeNameInUse) {
			return nil, fmt.Errorf("pgstore: %s: node %q: %w", op, m.node, ErrNodeNameInUse)
		}
		return nil, err
	}
	s.adopt(m.view)
	bg, stop := context.WithCancel(context.Background())
	m.stop = stop
	if m.manual {
		close(m.done)
	} else {
		go m.loop(bg)
	}
	return m, nil
}

// membershipOptions is Join's validation of opts, with its defaults
// filled in: a node name, and a lease and heartbeat derived from the
// store's claim lease.
func (s *Store) membershipOptions(ctx context.Context, op string, opts MembershipOptions) (MembershipOptions, error) {
	if opts.Node == "" {
		opts.Node = defaultNode()
	}
	switch reason := validate.Text(opts.Node); {
	case reason != "":
		return opts, argError(op, "MembershipOptions.Node", "%s", reason)
	case len(opts.Node) > MaxNodeBytes:
		return opts, argError(op, "MembershipOptions.Node", "%d bytes, above %d", len(opts.Node), MaxNodeBytes)
	}
	switch {
	case opts.Lease == 0:
		opts.Lease = min(s.lease*3/2, outbox.MaxLease)
	case opts.Lease < outbox.MinLease:
		return opts, argError(op, "MembershipOptions.Lease", "%v is below the floor of %v", opts.Lease, outbox.MinLease)
	case opts.Lease > outbox.MaxLease:
		return opts, argError(op, "MembershipOptions.Lease", "%v is above outbox.MaxLease (%v): a dead node's shards would not move for that long", opts.Lease, outbox.MaxLease)
	}
	switch {
	case opts.Heartbeat == 0:
		opts.Heartbeat = max(opts.Lease/4, MinHeartbeat) // ≤ Lease/2: Lease ≥ outbox.MinLease
	case opts.Heartbeat < MinHeartbeat || opts.Heartbeat > opts.Lease/2:
		return opts, argError(op, "MembershipOptions.Heartbeat", "%v is not in [MinHeartbeat = %v, Lease/2 = %v]", opts.Heartbeat, MinHeartbeat, opts.Lease/2)
	}
	// The tests' manual memberships may lapse while claims live, to show
	// that fencing alone stops the claims; a real one may not.
	if opts.Lease < s.lease+opts.Heartbeat && !joinManual(ctx) {
		return opts, argError(op, "MembershipOptions.Lease", "%v is below the claim lease (%v) plus the heartbeat (%v): a dead node's claimed rows would outlive its ownership, uncounted by the next owner's ceiling", opts.Lease, s.lease, opts.Heartbeat)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return opts, nil
}

// newMembership is the Membership Join returns, not yet seeded nor
// running: its state, and its fenced view of s.
func (s *Store) newMembership(op string, opts MembershipOptions, manual bool) (*Membership, error) {
	none, err := backpressure.NewOwnedShardFraction(nil, s.shardCount)
	if err != nil { // New bounds the shard count; a zero Store has none
		return nil, fmt.Errorf("pgstore: %s: %w", op, err)
	}
	var inc [16]byte
	_, _ = rand.Read(inc[:])
	m := &Membership{
		store:       s,
		node:        opts.Node,
		incarnation: hex.EncodeToString(inc[:]),
		lease:       opts.Lease,
		heartbeat:   opts.Heartbeat,
		logger:      opts.Logger,
		manual:      manual,
		held:        map[int32]int64{},
		owned:       none,
		none:        none,
		changes:     make(chan backpressure.OwnedShardFraction, 1),
		beating:     make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	m.view = &Store{
		pool:        s.pool,
		schema:      s.schema,
		shardCount:  s.shardCount,
		lease:       s.lease,
		maxAttempts: s.maxAttempts,
		caps:        s.caps,
		now:         s.now,
		windowClaim: s.windowClaim,
		sql:         s.sql,
		channel:     s.channel,
		identity:    s.identity,
		fence:       m,
	}
	return m, nil
}

// defaultNode is host-pid-random.
func defaultNode() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Node returns the node's name.
func (m *Membership) Node() string { return m.node }

// Store returns the fenced view of the store: the same outbox, whose claims
// take rows only on shards this node owns under a live ownership lease at
// the claim statement's instant (see [Membership]). Its other methods are
// the store's. Closing it does not close the store or its pool; closing
// the store closes it.
func (m *Membership) Store() *Store { return m.view }

// Owned returns the shards the database said the node owned at its last
// heartbeat confirmed within a Lease of being sent; none from the instant
// a Lease has passed since that heartbeat was sent (its leases may have
// lapsed by then, whatever later heartbeats did that were not confirmed),
// after Leave, once its store is closed, or once a heartbeat found the
// name taken ([ErrNodeNameInUse]).
func (m *Membership) Owned() backpressure.OwnedShardFraction {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lapsed(time.Now()) {
		return m.none
	}
	return m.owned
}

// lapsed reports whether the held set may no longer be true at now. m.mu
// is held.
func (m *Membership) lapsed(now time.Time) bool {
	return !now.Before(m.validUntil)
}

// expire empties the held set once validUntil has passed: the timer's
// function, armed at every confirmed heartbeat (a stale firing finds a
// later validUntil and does nothing).
func (m *Membership) expire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.held) > 0 && m.lapsed(time.Now()) {
		_ = m.setHeld(map[int32]int64{}) // cannot fail: no shard
	}
}

// Changes returns a channel that receives the owned set each time it
// changes. It holds only the newest unread set: a slow reader skips
// intermediate ones, never the latest. It is never closed.
func (m *Membership) Changes() <-chan backpressure.OwnedShardFraction { return m.changes }

// Follow applies the owned set to bp with SetOwnedShards, now and at every
// change, until ctx is done; it returns ctx's error, or at once
// SetOwnedShards's: one matching [backpressure.ErrInvalidConfig] for a nil
// bp or one not built with backpressure.New; on a nil Membership, one
// matching [outbox.ErrClosed]. Run it beside a dispatcher
// over the same bp: the next sweep uses the new set.
func (m *Membership) Follow(ctx context.Context, bp *backpressure.Backpressure) error {
	if m == nil {
		return closedError("Follow")
	}
	if err := bp.SetOwnedShards(m.Owned()); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case f := <-m.changes:
			if err := bp.SetOwnedShards(f); err != nil {
				return err
			}
		}
	}
}

// loop heartbeats until ctx is done.
func (m *Membership) loop(ctx context.Context) {
	defer close(m.done)
	t := time.NewTicker(m.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A reply later than a lease is of no use (see Heartbeat), and one
		// cut off sooner may leave the database renewing what this node
		// believes lost.
		hctx, cancel := context.WithTimeout(ctx, m.lease)
		err := m.Heartbeat(hctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			if errors.Is(err, outbox.ErrClosed) {
				// The store was closed (or the node left): nothing will
				// heartbeat again, so stop rather than log every beat,
				// and own nothing: the leases will lapse unrenewed.
				m.mu.Lock()
				_ = m.setHeld(map[int32]int64{}) // cannot fail: no shard
				m.mu.Unlock()
				return
			}
			m.logger.Warn("pgstore: membership heartbeat failed", "node", m.node, "err", err)
		}
	}
}

// Heartbeat runs one heartbeat now (the background loop runs one every
// MembershipOptions.Heartbeat): renew the member lease, read the live
// members, and release, renew and take shards as the assignment says. It
// is three statements in one transaction. Its reply sets the node's view
// (see [Membership.Owned]) to what the database says the node owns, valid
// for a Lease from when it was sent. A reply that comes a Lease or more
// after it was sent empties the view instead, and is an error. On any
// other error the view is unchanged, still lapsing a Lease after the last
// confirmed heartbeat was sent; an error matching [ErrNodeNameInUse]
// empties it. Heartbeats run one at a time. After [Membership.Leave] it
// returns an error matching [outbox.ErrClosed] and takes nothing.
func (m *Membership) Heartbeat(ctx context.Context) error {
	const op = "Heartbeat"
	if err := m.store.begin(ctx, op); err != nil {
		return err
	}
	// Leave's release waits for a heartbeat in flight, and one that starts
	// after Leave sees left: no heartbeat re-takes shards Leave released.
	select {
	case m.beating <- struct{}{}:
	case <-ctx.Done():
		return opError(op, ctx.Err())
	}
	defer func() { <-m.beating }()
	m.mu.Lock()
	left, draining := m.left, m.draining
	m.mu.Unlock()
	if left {
		return closedError(op)
	}
	if draining == nil {
		draining = []int32{} // not NULL to the statement
	}
	sent := time.Now() // monotonic: every lease the database grants below starts later
	held, drain, err := m.beat(ctx, draining)
	if err != nil {
		if errors.Is(err, ErrNodeNameInUse) {
			m.mu.Lock()
			m.validUntil = time.Time{}
			_ = m.setHeld(map[int32]int64{}) // cannot fail: no shard
			m.mu.Unlock()
		}
		return opError(op, err)
	}
	m.mu.Lock()
	hook := m.replyHook
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return closedError(op)
	}
	m.draining = drain
	until := sent.Add(m.lease)
	if took := time.Since(sent); took >= m.lease {
		// The leases this heartbeat renewed may have lapsed by now; the
		// next confirmed heartbeat says what the node owns.
		m.validUntil = time.Time{}
		_ = m.setHeld(map[int32]int64{}) // cannot fail: no shard
		return opError(op, fmt.Errorf("reply came %v after the heartbeat was sent, not within the lease (%v): owning nothing until the next", took, m.lease))
	}
	m.validUntil = until
	if err := m.setHeld(held); err != nil {
		return opError(op, err)
	}
	m.expiry.Reset(time.Until(until))
	return nil
}

// beat is Heartbeat's transaction. It returns the shards the node may claim
// on, with their epochs, and the ones it drains.
//
// A shard no longer assigned to the node is not released at once: the
// heartbeat that finds it unassigned drops it from the claims' shards (and
// from the owned set the planner's ceilings come from) but renews its lease
// one more time, and the next heartbeat releases it. By then the node's
// sweeps use the smaller owned set, so its ceilings no longer count the
// shard when the next owner starts claiming on it, and the cluster's
// running rows stay within the current owners' ceilings.
//
// The ownership rows it will update (the assigned shards and the ones it
// owns) are locked first, in shard order, so two heartbeats, or a
// heartbeat and a claim, never deadlock; its time is clock_timestamp()
// taken after those locks, so an acquisition is stamped after every claim
// under the previous owner committed.
func (m *Membership) beat(ctx context.Context, draining []int32) (held map[int32]int64, drain []int32, err error) {
	sql := &m.store.sql.membership
	err = pgx.BeginFunc(ctx, m.store.pool, func(tx pgx.Tx) error {
		held, drain = map[int32]int64{}, []int32{}
		rows, err := tx.Query(ctx, sql.renew, m.node, m.lease.Microseconds(), m.incarnation, m.beatGuard())
		if err != nil {
			return err
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if !slices.Contains(live, m.node) { // renew did not write: another incarnation holds the name
			return ErrNodeNameInUse
		}
		assigned, err := assignedTo(m.node, live, m.store.shardCount)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sql.lock, m.node, assigned); err != nil {
			return err
		}
		m.mu.Lock()
		hook := m.lockedHook
		m.mu.Unlock()
		if hook != nil {
			hook(ctx, tx)
		}
		rows, err = tx.Query(ctx, sql.rebalance, m.node, assigned, m.lease.Microseconds(), draining)
		if err != nil {
			return err
		}
		var (
			shard   int32
			epoch   int64
			keeping bool
		)
		_, err = pgx.ForEachRow(rows, []any{&shard, &epoch, &keeping}, func() error {
			if keeping {
				drain = append(drain, shard)
			} else {
				held[shard] = epoch
			}
			return nil
		})
		return err
	})
	return held, drain, err
}

// beatGuard is the idle_in_transaction_session_timeout a heartbeat's
// transaction runs under, in ms as text: half the member lease. The
// transaction locks ownership rows in its second statement and holds them
// until it commits; a node frozen between its statements (a SIGSTOP, a
// stalled VM, a long GC pause) would otherwise hold them for as long as it
// is frozen, and every other node's heartbeat would wait on them, so no
// shard could change hands and the frozen node's shards would not be
// taken over. With the guard the server ends such a session, releasing
// its locks, half a lease after its last statement; a heartbeat idle that
// long would have come back too late to be of use anyway (see Heartbeat's
// timeout of one lease). TestChaosMembership's SIGSTOPs found it.
func (m *Membership) beatGuard() string {
	return strconv.FormatInt(max((m.lease/2).Milliseconds(), 1), 10)
}

// setHeld installs a new held set and publishes the owned set if it
// changed. m.mu is held. A shard outside the store's count (only a
// tampered shard_owners table could return one) fails closed: it holds
// nothing, so the fence claims nothing, and returns the error.
func (m *Membership) setHeld(held map[int32]int64) error {
	ids := make([]int, 0, len(held))
	for s := range held {
		ids = append(ids, int(s))
	}
	f, err := backpressure.NewOwnedShardFraction(ids, m.store.shardCount)
	if err != nil {
		held, f = map[int32]int64{}, m.none
	}
	same := len(held) == len(m.held)
	for s := range held {
		if _, ok := m.held[s]; !ok {
			same = false
		}
	}
	m.held = held
	if !same {
		m.owned = f
		select {
		case <-m.changes:
		default:
		}
		m.changes <- f
	}
	return err
}

// Leave stops the heartbeats, releases the node's shards (other nodes take
// them at their next heartbeat) and removes the node from the members. The
// fenced store claims nothing afterwards. A second Leave returns nil. If
// the release fails (ctx, a lost database), the shards come free when
// their leases expire.
func (m *Membership) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return nil
	}
	m.left = true
	_ = m.setHeld(map[int32]int64{}) // cannot fail: no shard
	m.mu.Unlock()
	m.expiry.Stop()
	m.stop()
	<-m.done
	if err := m.store.begin(ctx, "Leave"); err != nil {
		return err
	}
	select { // a heartbeat in flight finishes first; later ones see left
	case m.beating <- struct{}{}:
	case <-ctx.Done():
		return opError("Leave", ctx.Err())
	}
	defer func() { <-m.beating }()
	if _, err := m.store.pool.Exec(ctx, m.store.sql.membership.leave, m.node, m.incarnation); err != nil {
		return opError("Leave", err)
	}
	return nil
}

// fence returns the fenced form of a claim: its statement and parameters
// ($3 the shards of the claim that the node holds, the all flag false, then
// their epochs and the node), or ok false when it holds none of them.
func (m *Membership) fence(st *statements, sql string, params []any) (string, []any, bool) {
	m.mu.Lock()
	held := maps.Clone(m.held)
	if m.lapsed(time.Now()) && !m.manual { // the tests' manual memberships show the database's fence alone
		held = nil
	}
	m.mu.Unlock()
	var shards []int32
	if all := params[len(params)-1].(bool); all {
		shards = slices.Sorted(maps.Keys(held))
	} else {
		for _, s := range params[2].([]int32) {
			if _, ok := held[s]; ok {
				shards = append(shards, s)
			}
		}
	}
	if len(shards) == 0 {
		return "", nil, false
	}
	epochs := make([]int64, len(shards))
	for i, s := range shards {
		epochs[i] = held[s]
	}
	params = slices.Clone(params)
	params[2], params[len(params)-1] = shards, false
	params = append(params, epochs, m.node)
	switch sql {
	case st.claimScoped:
		sql = st.claimScopedFenced
	case st.claimUnscoped:
		sql = st.claimUnscopedFenced
	case st.claimWindow:
		sql = st.claimWindowFenced
	default:
		panic("pgstore: fence: not a claim statement")
	}
	return sql, params, true
}

// AssignShards returns the owner of each shard in [0, shardCount) among
// nodes by rendezvous (highest random weight) hashing: shard s goes to the
// node n with the greatest weight(n, s), ties to the smaller name. The
// result depends only on the set of nodes, not their order; adding or
// removing one node of n moves only the shards it gains or loses, about
// shardCount/n. With no nodes every owner is "". Cost: O(shardCount ×
// len(nodes)).
//
// A shardCount outside [1, backpressure.MaxShardCount] is an
// [*outbox.ArgumentError] (Op "AssignShards", Arg "shardCount"), with a
// nil result.
func AssignShards(nodes []string, shardCount int) ([]string, error) {
	if shardCount < 1 || shardCount > backpressure.MaxShardCount {
		return nil, argError("AssignShards", "shardCount", "%d is not in [1, %d]", shardCount, backpressure.MaxShardCount)
	}
	owners := make([]string, shardCount)
	best := make([]uint64, shardCount)
	for _, n := range nodes {
		seed := nodeSeed(n)
		for s := range owners {
			w := weight(seed, s)
			if owners[s] == "" && n != "" || w > best[s] || w == best[s] && cmp.Less(n, owners[s]) {
				owners[s], best[s] = n, w
			}
		}
	}
	return owners, nil
}

// assignedTo is the shards AssignShards gives node among live.
func assignedTo(node string, live []string, shardCount int) ([]int32, error) {
	owners, err := AssignShards(live, shardCount)
	if err != nil {
		return nil, err
	}
	mine := []int32{}
	for s, owner := range owners {
		if owner == node {
			mine = append(mine, int32(s))
		}
	}
	return mine, nil
}

func nodeSeed(node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	return h.Sum64()
}

// weight mixes a node's seed with a shard through splitmix64's finalizer,
// so that the weights of one node over the shards, and of the nodes for one
// shard, are spread independently.
func weight(seed uint64, shard int) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(shard))
	z := seed ^ (binary.LittleEndian.Uint64(b[:])+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// manualKey, in Join's ctx, makes a Membership without background
// heartbeats (the tests drive them), lets its lease be shorter than the
// claim lease plus a heartbeat (the fencing tests need ownership to lapse
// under live claims), and makes its fence skip the local lease deadline,
// so that a test shows the database's fence alone stops a lapsed node's
// claims. Only export_test.go sets it.
type manualKey struct{}

func joinManual(ctx context.Context) bool {
	v, _ := ctx.Value(manualKey{}).(bool)
	return v
}
