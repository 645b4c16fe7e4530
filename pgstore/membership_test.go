package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"pgregory.net/rapid"
)

// AssignShards: every shard has exactly one owner among the nodes, the
// result ignores the nodes' order, and a join or a leave moves only the
// shards the node gains or loses — about shardCount/n of them.
func TestAssignShardsProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const shardCount = 2048
		nodes := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z0-9-]{1,12}`), 1, 8, rapid.ID).Draw(t, "nodes")
		owners := mustAssign(t, nodes, shardCount)
		perm := rapid.Permutation(nodes).Draw(t, "perm")
		if again := mustAssign(t, perm, shardCount); !slices.Equal(owners, again) {
			t.Fatalf("AssignShards(%v) differs from AssignShards(%v)", nodes, perm)
		}
		count := map[string]int{}
		for s, o := range owners {
			if !slices.Contains(nodes, o) {
				t.Fatalf("shard %d owned by %q, not one of %v", s, o, nodes)
			}
			count[o]++
		}
		for _, n := range nodes { // n ≤ 8: ≥ 256 shards expected each, σ ≈ 15
			if want := shardCount / len(nodes); count[n] < want/2 || count[n] > want*3/2 {
				t.Fatalf("node %q owns %d of %d shards over %d nodes, want about %d", n, count[n], shardCount, len(nodes), want)
			}
		}
		joiner := rapid.StringMatching(`[A-Z]{1,12}`).Draw(t, "joiner") // never among nodes
		after := mustAssign(t, append(slices.Clone(nodes), joiner), shardCount)
		moved := 0
		for s := range owners {
			if after[s] != owners[s] {
				moved++
				if after[s] != joiner {
					t.Fatalf("join of %q moved shard %d from %q to %q", joiner, s, owners[s], after[s])
				}
			}
		}
		if want := shardCount / (len(nodes) + 1); moved < want/2 || moved > want*3/2 {
			t.Fatalf("join of %q to %d nodes moved %d shards, want about %d", joiner, len(nodes), moved, want)
		}
		// A leave is the join seen backwards: only the leaver's shards move.
		if len(nodes) > 1 {
			leaver := nodes[rapid.IntRange(0, len(nodes)-1).Draw(t, "leaver")]
			rest := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == leaver })
			left := mustAssign(t, rest, shardCount)
			for s := range owners {
				if owners[s] != leaver && left[s] != owners[s] {
					t.Fatalf("leave of %q moved shard %d from %q to %q", leaver, s, owners[s], left[s])
				}
			}
		}
	})
	if got := mustAssign(t, nil, 3); !slices.Equal(got, []string{"", "", ""}) {
		t.Errorf("AssignShards(nil, 3) = %q, want three empty owners", got)
	}
}

// mustAssign is AssignShards, failing t on an error.
func mustAssign(t interface{ Fatalf(string, ...any) }, nodes []string, shardCount int) []string {
	owners, err := pgstore.AssignShards(nodes, shardCount)
	if err != nil {
		t.Fatalf("AssignShards(%q, %d): %v", nodes, shardCount, err)
	}
	return owners
}

// AssignShards refuses a shard count outside [1, MaxShardCount] with an
// ArgumentError rather than panicking or allocating without bound, and
// takes both ends of the range.
func TestAssignShardsShardCountRange(t *testing.T) {
	for i, c := range []struct {
		shardCount int
		ok         bool
	}{
		{-1, false}, {0, false}, {1, true}, {backpressure.MaxShardCount, true},
		{backpressure.MaxShardCount + 1, false}, {math.MinInt, false}, {math.MaxInt, false},
	} {
		owners, err := pgstore.AssignShards([]string{"a", "b"}, c.shardCount)
		var ae *outbox.ArgumentError
		switch {
		case c.ok && (err != nil || len(owners) != c.shardCount):
			t.Errorf("step %d: AssignShards(a, b; %d) = %d owners, %v; want %d owners", i, c.shardCount, len(owners), err, c.shardCount)
		case !c.ok && (owners != nil || !errors.As(err, &ae) || ae.Op != "AssignShards" || ae.Arg != "shardCount" || !errors.Is(err, outbox.ErrInvalidArgument)):
			t.Errorf("step %d: AssignShards(a, b; %d) = %d owners, %v; want an ArgumentError on shardCount", i, c.shardCount, len(owners), err)
		}
	}
}

// setHeld given a shard outside the store's count returns an error matching
// backpressure.ErrInvalidShards, never a panic, and fails closed: the
// membership then owns nothing.
func TestSetHeldOutOfRangeFailsClosed(t *testing.T) {
	for i, c := range []struct {
		shardCount int
		shards     []int32
		want       []int // owned; nil: an error
	}{
		{4, []int32{0, 3}, []int{0, 3}},
		{4, []int32{4}, nil},
		{4, []int32{1, 9}, nil},
		{4, []int32{-1}, nil},
	} {
		owned, err := pgstore.SetHeld(c.shardCount, c.shards...)
		switch {
		case c.want == nil && (!errors.Is(err, backpressure.ErrInvalidShards) || owned.OwnedCount() != 0 || owned.ShardCount() != c.shardCount):
			t.Errorf("step %d: setHeld(%v) over %d shards = %v, %v; want an ErrInvalidShards error and nothing owned", i, c.shards, c.shardCount, owned.Owned(), err)
		case c.want != nil && (err != nil || !slices.Equal(owned.Owned(), c.want)):
			t.Errorf("step %d: setHeld(%v) over %d shards = %v, %v; want %v", i, c.shards, c.shardCount, owned.Owned(), err, c.want)
		}
	}
}

// Follow over a nil or zero Backpressure returns ErrInvalidConfig at once
// instead of panicking; over a real one it applies the owned set and runs
// until ctx is done.
func TestFollowNeedsABackpressure(t *testing.T) {
	s := dbClockStore(t, testSchema(t))
	m, err := pgstore.JoinManual(t.Context(), s, pgstore.MembershipOptions{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(t.Context())
	for i, bp := range []*backpressure.Backpressure{nil, {}} {
		if err := m.Follow(t.Context(), bp); !errors.Is(err, backpressure.ErrInvalidConfig) {
			t.Errorf("step %d: Follow(ctx, %v) = %v, want ErrInvalidConfig", i, bp, err)
		}
	}
	none, err := backpressure.NewOwnedShardFraction(nil, s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: 1, DefaultQuota: 1}, none)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.Follow(ctx, bp); !errors.Is(err, context.Canceled) {
		t.Errorf("Follow(canceled ctx, bp) = %v, want context.Canceled", err)
	}
	if got := bp.OwnedShards().OwnedCount(); got != s.ShardCount() {
		t.Errorf("after Follow, bp owns %d shards, want the node's %d", got, s.ShardCount())
	}
}

// Closing the store closes its Memberships' fenced views: their
// subscribers' channels close and their calls return ErrClosed, not the
// closed pool's error, even over a pool the store owned. Closing a view
// alone leaves the store open.
func TestCloseClosesFencedViews(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s, err := pgstore.Open(ctx, databaseURL(), pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Store().Close(); err != nil {
		t.Fatalf("closing b's view: %v", err)
	}
	if _, err := b.Store().Get(ctx, "k"); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("b's closed view: Get = %v, want ErrClosed", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("store after closing b's view: Get = %v, want ErrNotFound", err)
	}
	view := a.Store()
	ch, err := view.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	failsafe := time.NewTimer(time.Minute) // not an assertion of speed
	defer failsafe.Stop()
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-failsafe.C:
			t.Fatal("the view's subscription never closed after the store closed")
		}
	}
	all, err := backpressure.AllShards(s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Get":   func() error { _, err := view.Get(ctx, "k"); return err },
		"Stats": func() error { _, err := view.Stats(ctx); return err },
		"Claim": func() error { _, err := claimerOf(view).ClaimOutboxRowsUnscoped(ctx, all, 1); return err },
		"Enqueue": func() error {
			_, err := view.Enqueue(ctx, []outbox.Message{{DispatchKey: "k", Namespace: "ns"}})
			return err
		},
		"Subscribe": func() error { _, err := view.Subscribe(ctx); return err },
		"Heartbeat": func() error { return a.Heartbeat(ctx) },
	} {
		if err := call(); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("view after the store closed: %s = %v, want ErrClosed", name, err)
		}
	}
	if err := view.Close(); err != nil {
		t.Errorf("closing the closed view: %v, want nil", err)
	}
}

// pauseKey, in a call's ctx, makes pauseTracer hold that call's first
// statement.
type pauseKey struct{}

// pauseTracer holds the first statement whose ctx carries pauseKey: it
// closes paused, then waits for release (or a failsafe, for a call that
// cannot go on until that statement does).
type pauseTracer struct {
	once    sync.Once
	paused  chan struct{}
	release chan struct{}
}

func (p *pauseTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if ctx.Value(pauseKey{}) != nil {
		p.once.Do(func() {
			close(p.paused)
			select {
			case <-p.release:
			case <-time.After(2 * time.Second): // a failsafe, not an assertion of speed
			}
		})
	}
	return ctx
}

func (p *pauseTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A manual Heartbeat that passed its checks before Leave, and whose
// transaction would run after Leave's release, must not re-take the shards
// or the membership Leave gave up: Leave waits for it, and it then finds
// the node gone. The heartbeat's first statement is held until Leave
// returns (or, when Leave waits for the heartbeat, a failsafe lets it go).
func TestHeartbeatRacingLeaveTakesNothing(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	cfg, err := pgxpool.ParseConfig(databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	tr := &pauseTracer{paused: make(chan struct{}), release: make(chan struct{})}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	beat := make(chan error, 1)
	go func() { beat <- a.Heartbeat(context.WithValue(ctx, pauseKey{}, true)) }()
	<-tr.paused
	left := make(chan error, 1)
	go func() {
		err := a.Leave(ctx)
		close(tr.release)
		left <- err
	}()
	if err := <-left; err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := <-beat; err != nil && !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Heartbeat racing Leave: %v, want nil or ErrClosed", err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	var members, shards int
	if err := adminPool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+q+`.members WHERE node = 'a'),
		(SELECT count(*) FROM `+q+`.shard_owners WHERE owner = 'a' AND lease_expires_at > clock_timestamp())`).Scan(&members, &shards); err != nil {
		t.Fatal(err)
	}
	if members != 0 || shards != 0 {
		t.Errorf("after Leave, with a Heartbeat racing it: a is %d members and owns %d shards, want none", members, shards)
	}
	if err := a.Heartbeat(ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Heartbeat after Leave = %v, want ErrClosed", err)
	}
	if got := a.Owned().OwnedCount(); got != 0 {
		t.Errorf("after Leave a owns %d shards in its view, want 0", got)
	}
}

func TestJoinRefusesBadArguments(t *testing.T) {
	f := newFixture(t) // a manual clock: Join refuses it
	var ae *outbox.ArgumentError
	if _, err := f.s.Join(f.ctx, pgstore.MembershipOptions{}); !errors.As(err, &ae) || ae.Arg != "Store" {
		t.Errorf("Join on a store with Options.Now = %v, want an ArgumentError on Store", err)
	}
	s := dbClockStore(t, f.schema)
	for _, c := range []struct {
		opts pgstore.MembershipOptions
		arg  string
	}{
		{pgstore.MembershipOptions{Node: "a\x00b"}, "MembershipOptions.Node"},
		{pgstore.MembershipOptions{Node: string(make([]byte, 256))}, "MembershipOptions.Node"},
		{pgstore.MembershipOptions{Lease: time.Millisecond}, "MembershipOptions.Lease"},
		{pgstore.MembershipOptions{Lease: time.Second, Heartbeat: time.Second}, "MembershipOptions.Heartbeat"},
		{pgstore.MembershipOptions{Lease: 31 * time.Second}, "MembershipOptions.Lease"},                              // below 30s + 7.75s
		{pgstore.MembershipOptions{Lease: 40 * time.Second, Heartbeat: 11 * time.Second}, "MembershipOptions.Lease"}, // below 30s + 11s
	} {
		if _, err := s.Join(f.ctx, c.opts); !errors.As(err, &ae) || ae.Arg != c.arg || !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Join(%+v) = %v, want an ArgumentError on %s", c.opts, err, c.arg)
		}
	}
}

// dbClockStore opens a store on schema with the database's clock and a
// claim lease of 30s: no claimed row comes back during a test.
func dbClockStore(t *testing.T, schema string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(t.Context(), newPool(t, nil, 4), pgstore.Options{Schema: schema, Lease: 30 * time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// waitLeasesLapse waits until the database's clock passes every live
// ownership lease of node.
func waitLeasesLapse(t *testing.T, schema, node string) {
	t.Helper()
	for {
		var lapsed bool
		err := adminPool.QueryRow(t.Context(), `SELECT coalesce(max(lease_expires_at), '-infinity') < now() AND
			(SELECT lease_expires_at < now() FROM `+pgx.Identifier{schema}.Sanitize()+`.members WHERE node = $1)
			FROM `+pgx.Identifier{schema}.Sanitize()+`.shard_owners WHERE owner = $1`, node).Scan(&lapsed)
		if err != nil {
			t.Fatal(err)
		}
		if lapsed {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Fenced claims on the real database: a node claims only on the shards it
// holds under a live lease at its epoch. After its leases lapse it claims
// nothing, even though its own view still lists the shards; after another
// node took them over, neither does its stale epoch; and a joiner gets its
// shards only once the owner released them.
func TestMembershipFencing(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s := dbClockStore(t, schema)
	all, err := backpressure.AllShards(s.ShardCount())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 400 {
		msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("k%04d", i), Namespace: "ns", TaskQueue: "q"})
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	claimedByAny := 0
	claim := func(m *pgstore.Membership, limit int) []outbox.Row {
		t.Helper()
		rows, err := claimerOf(m.Store()).ClaimOutboxRowsUnscoped(ctx, all, limit)
		claimedByAny += len(rows)
		if err != nil {
			t.Fatalf("%s: claim: %v", m.Node(), err)
		}
		owned := m.Owned().Owned()
		for _, r := range rows {
			if !slices.Contains(owned, r.Shard) {
				t.Fatalf("%s claimed %s on shard %d, not among its shards %v", m.Node(), r.DispatchKey, r.Shard, owned)
			}
		}
		return rows
	}
	const lease = 300 * time.Millisecond
	a, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a", Lease: lease, Heartbeat: lease / 4})
	if err != nil {
		t.Fatalf("Join a: %v", err)
	}
	if got := len(a.Owned().Owned()); got != s.ShardCount() {
		t.Fatalf("a alone owns %d shards, want %d", got, s.ShardCount())
	}
	if rows := claim(a, 10); len(rows) != 10 {
		t.Fatalf("a alone claimed %d rows, want 10", len(rows))
	}

	// Expired: a's view still has every shard, the database says its leases lapsed.
	waitLeasesLapse(t, schema, "a")
	if rows := claim(a, 10); len(rows) != 0 {
		t.Fatalf("a claimed %d rows with its ownership leases lapsed, want 0", len(rows))
	}
	// The scoped claim is fenced the same way.
	if rows, err := claimerOf(a.Store()).ClaimOutboxRowsScoped(ctx, all, []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: "ns", TaskQueue: "q"}, Limit: 10}}); err != nil || len(rows) != 0 {
		t.Fatalf("a's scoped claim with its leases lapsed = %d rows, %v; want none", len(rows), err)
	}

	// Superseded: b joins alone (a is no longer a live member) and takes every shard at the next epoch.
	b, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "b", Lease: 10 * time.Second, Heartbeat: time.Second})
	if err != nil {
		t.Fatalf("Join b: %v", err)
	}
	if got := len(b.Owned().Owned()); got != s.ShardCount() {
		t.Fatalf("b owns %d shards after a's leases lapsed, want %d", got, s.ShardCount())
	}
	if rows := claim(a, 10); len(rows) != 0 {
		t.Fatalf("a claimed %d rows at a superseded epoch, want 0", len(rows))
	}
	if rows := claim(b, 10); len(rows) != 10 {
		t.Fatalf("b claimed %d rows, want 10", len(rows))
	}

	// a rejoins: its assigned shards are b's under a live lease, so it waits.
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatalf("a: Heartbeat: %v", err)
	}
	if got := a.Owned().Owned(); len(got) != 0 {
		t.Fatalf("a took %v while b held them under a live lease", got)
	}
	if rows := claim(a, 10); len(rows) != 0 {
		t.Fatalf("a claimed %d rows owning nothing, want 0", len(rows))
	}
	// b sees a and drains a's shards: it stops claiming on them (and
	// counting them in its ceilings) but keeps their leases one more
	// heartbeat, so a cannot take them yet.
	want := mustAssign(t, []string{"a", "b"}, s.ShardCount())
	if err := b.Heartbeat(ctx); err != nil {
		t.Fatalf("b: Heartbeat: %v", err)
	}
	if got, mine := len(b.Owned().Owned()), len(slices.DeleteFunc(slices.Clone(want), func(o string) bool { return o != "b" })); got != mine {
		t.Fatalf("b owns %d shards after seeing a, want its %d", got, mine)
	}
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatalf("a: Heartbeat: %v", err)
	}
	if got := a.Owned().Owned(); len(got) != 0 {
		t.Fatalf("a took %v while b drained them", got)
	}
	// b releases them at its next heartbeat; a takes them at its next.
	if err := b.Heartbeat(ctx); err != nil {
		t.Fatalf("b: Heartbeat: %v", err)
	}
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatalf("a: Heartbeat: %v", err)
	}
	for _, m := range []*pgstore.Membership{a, b} {
		var mine []int
		for sh, o := range want {
			if o == m.Node() {
				mine = append(mine, sh)
			}
		}
		if got := m.Owned().Owned(); !slices.Equal(got, mine) {
			t.Fatalf("%s owns %v, want %v", m.Node(), got, mine)
		}
		if rows := claim(m, 20); len(rows) == 0 {
			t.Fatalf("%s claimed nothing on its %d shards", m.Node(), len(mine))
		}
	}
	// Each of a's shards went a (epoch 1), b (2), a (3); b's a (1), b (2).
	var bad int
	if err := adminPool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.shard_owners o
		WHERE o.epoch <> (SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.shard_epochs e WHERE e.shard = o.shard)
			OR o.epoch <> CASE o.owner WHEN 'a' THEN 3 WHEN 'b' THEN 2 END`).Scan(&bad); err != nil || bad != 0 {
		t.Errorf("%d shards with an unexpected epoch or history (%v)", bad, err)
	}

	// Leave releases at once: b takes a's shards at its next heartbeat.
	if err := a.Leave(ctx); err != nil {
		t.Fatalf("a: Leave: %v", err)
	}
	if rows := claim(a, 10); len(rows) != 0 {
		t.Fatalf("a claimed %d rows after Leave", len(rows))
	}
	if err := b.Heartbeat(ctx); err != nil {
		t.Fatalf("b: Heartbeat: %v", err)
	}
	if got := len(b.Owned().Owned()); got != s.ShardCount() {
		t.Fatalf("b owns %d shards after a left, want %d", got, s.ShardCount())
	}
	// Claimed counts are per shard, whoever claimed: b's headroom counts
	// the rows a claimed and still runs.
	if counts, err := claimerOf(b.Store()).CountClaimedOutboxRows(ctx, b.Owned()); err != nil || counts["ns"] != claimedByAny {
		t.Errorf("b's claimed count after the hand-off = %v, %v; want ns: %d (a's rows and b's)", counts, err, claimedByAny)
	}
	select {
	case f := <-b.Changes():
		if len(f.Owned()) != s.ShardCount() {
			t.Errorf("b's newest change lists %d shards, want %d", len(f.Owned()), s.ShardCount())
		}
	default:
		t.Errorf("b's Changes has no value after its set changed")
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
}
