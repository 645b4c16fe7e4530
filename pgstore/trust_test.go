package pgstore_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestJoinRefusesLoopsAndLeases: a heartbeat interval below MinHeartbeat or
// above half the lease, and a lease above outbox.MaxLease, are refused at
// Join with an *outbox.ArgumentError naming the option.
func TestJoinRefusesLoopsAndLeases(t *testing.T) {
	s := dbClockStore(t, testSchema(t))
	for _, c := range []struct {
		opts pgstore.MembershipOptions
		arg  string
	}{
		{pgstore.MembershipOptions{Lease: time.Minute, Heartbeat: time.Nanosecond}, "MembershipOptions.Heartbeat"},
		{pgstore.MembershipOptions{Lease: time.Minute, Heartbeat: time.Millisecond}, "MembershipOptions.Heartbeat"},
		{pgstore.MembershipOptions{Lease: time.Minute, Heartbeat: pgstore.MinHeartbeat - 1}, "MembershipOptions.Heartbeat"},
		{pgstore.MembershipOptions{Lease: time.Minute, Heartbeat: -time.Second}, "MembershipOptions.Heartbeat"},
		{pgstore.MembershipOptions{Lease: time.Minute, Heartbeat: 30*time.Second + 1}, "MembershipOptions.Heartbeat"},
		{pgstore.MembershipOptions{Lease: math.MaxInt64}, "MembershipOptions.Lease"},
		{pgstore.MembershipOptions{Lease: outbox.MaxLease + time.Microsecond}, "MembershipOptions.Lease"},
	} {
		m, err := s.Join(t.Context(), c.opts)
		var ae *outbox.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != c.arg || !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Join(%+v) = %v, want an ArgumentError on %s", c.opts, err, c.arg)
		}
		if m != nil {
			t.Errorf("Join(%+v) returned a Membership with its error", c.opts)
		}
	}
	// The bounds themselves are accepted, and so are the zero values on a
	// store with the shortest claim lease (the heartbeat is then raised
	// to MinHeartbeat).
	m, err := s.Join(t.Context(), pgstore.MembershipOptions{Lease: outbox.MaxLease, Heartbeat: outbox.MaxLease / 2})
	if err != nil {
		t.Fatalf("Join at the bounds: %v", err)
	}
	if err := m.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	short, err := pgstore.New(t.Context(), newPool(t, nil, 4), pgstore.Options{Schema: s.Schema(), Lease: outbox.MinLease})
	if err != nil {
		t.Fatal(err)
	}
	if m, err = short.Join(t.Context(), pgstore.MembershipOptions{}); err != nil {
		t.Fatalf("Join with zero options on a store with a claim lease of %v: %v", outbox.MinLease, err)
	}
	if err := m.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestJoinNodeNameUnique: a second Join under a live member's name fails
// with ErrNodeNameInUse, from another store or the same one, and leaves
// the first member as it was; after Leave the name is free at once. A name
// whose member lapsed (member and ownership leases) is taken over by the
// next Join, and the old incarnation's heartbeats then fail with
// ErrNodeNameInUse and own nothing; its Leave leaves the new one alone.
func TestJoinNodeNameUnique(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s1, s2 := dbClockStore(t, schema), dbClockStore(t, schema)
	shards := s1.ShardCount()
	a, err := s1.Join(ctx, pgstore.MembershipOptions{Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*pgstore.Store{"another store": s2, "the same store": s1} {
		b, err := s.Join(ctx, pgstore.MembershipOptions{Node: "n"})
		if !errors.Is(err, pgstore.ErrNodeNameInUse) || b != nil {
			t.Fatalf("second Join of n from %s = %v, %v; want ErrNodeNameInUse", name, b, err)
		}
	}
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatalf("first member's heartbeat after the refused Joins: %v", err)
	}
	if got := len(a.Owned().Owned()); got != shards {
		t.Fatalf("first member owns %d shards after the refused Joins, want %d", got, shards)
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := s2.Join(ctx, pgstore.MembershipOptions{Node: "n"})
	if err != nil {
		t.Fatalf("Join of n after Leave: %v", err)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}

	// Lapsed: the name is taken over.
	const lease = 300 * time.Millisecond
	old, err := pgstore.JoinManual(ctx, s1, pgstore.MembershipOptions{Node: "m", Lease: lease, Heartbeat: lease / 4})
	if err != nil {
		t.Fatal(err)
	}
	waitLeasesLapse(t, schema, "m")
	next, err := pgstore.JoinManual(ctx, s2, pgstore.MembershipOptions{Node: "m", Lease: 10 * time.Second, Heartbeat: time.Second})
	if err != nil {
		t.Fatalf("Join of m after its member lapsed: %v", err)
	}
	if got := len(next.Owned().Owned()); got != shards {
		t.Fatalf("new m owns %d shards, want %d", got, shards)
	}
	if err := old.Heartbeat(ctx); !errors.Is(err, pgstore.ErrNodeNameInUse) {
		t.Fatalf("old m's heartbeat after the takeover = %v, want ErrNodeNameInUse", err)
	}
	if got := old.Owned().Owned(); len(got) != 0 {
		t.Fatalf("old m owns %v after its name was taken over", got)
	}
	if err := old.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Heartbeat(ctx); err != nil {
		t.Fatalf("new m's heartbeat after the old one's Leave: %v", err)
	}
	if got := len(next.Owned().Owned()); got != shards {
		t.Fatalf("new m owns %d shards after the old one's Leave, want %d", got, shards)
	}
	var epochs int
	if err := adminPool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.shard_owners
		WHERE owner = 'm' AND epoch > 1`).Scan(&epochs); err != nil || epochs != shards {
		t.Errorf("%d shards of m at a new epoch (%v), want all %d: the takeover fences the old incarnation", epochs, err, shards)
	}
	if err := next.Leave(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOwnedLapsesUnconfirmed: with no heartbeat confirmed, Owned is empty
// from a lease after the last confirmed one was sent (and Changes says so),
// though no heartbeat reported a failure; a heartbeat whose reply comes
// later than the lease, though the database renewed every lease, is an
// error and leaves Owned empty; the next confirmed one reclaims.
func TestOwnedLapsesUnconfirmed(t *testing.T) {
	ctx := t.Context()
	schema := testSchema(t)
	s := dbClockStore(t, schema)
	const lease = 400 * time.Millisecond
	m, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a", Lease: lease, Heartbeat: lease / 4})
	if err != nil {
		t.Fatal(err)
	}
	all := s.ShardCount()
	if got := len(m.Owned().Owned()); got != all {
		t.Fatalf("owns %d shards after Join, want %d", got, all)
	}
	<-m.Changes() // the Join's set
	waitOwnedEmpty(t, m)
	select {
	case f := <-m.Changes():
		if len(f.Owned()) != 0 {
			t.Errorf("Changes after the lapse = %v, want the empty set", f.Owned())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Changes received nothing after Owned lapsed")
	}
	if err := m.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(m.Owned().Owned()); got != all {
		t.Fatalf("owns %d shards after a confirmed heartbeat, want %d", got, all)
	}

	// The reply held past the lease: the database renewed, the node
	// cannot know for how long.
	release := make(chan struct{})
	held := make(chan struct{})
	pgstore.SetReplyHook(m, func() { close(held); <-release })
	done := make(chan error, 1)
	go func() { done <- m.Heartbeat(ctx) }()
	<-held // the heartbeat was sent before this
	heldAt := time.Now()
	waitOwnedEmpty(t, m)
	var live int
	if err := adminPool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.shard_owners
		WHERE owner = 'a' AND lease_expires_at > now()`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	t.Logf("while the reply is held: Owned is empty, the database shows %d live leases of a", live)
	time.Sleep(time.Until(heldAt.Add(lease))) // hold the reply a full lease after it was sent
	close(release)
	if err := <-done; err == nil {
		t.Fatalf("a heartbeat whose reply came after the lease returned nil")
	}
	if got := m.Owned().Owned(); len(got) != 0 {
		t.Fatalf("owns %v after a reply later than the lease", got)
	}
	pgstore.SetReplyHook(m, nil)
	if err := m.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(m.Owned().Owned()); got != all {
		t.Fatalf("owns %d shards after the next confirmed heartbeat, want %d", got, all)
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitOwnedEmpty waits until m owns nothing; it fails the test if that
// takes a minute (a lease in these tests is under a second).
func waitOwnedEmpty(t *testing.T, m *pgstore.Membership) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); len(m.Owned().Owned()) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%s still owns %v a minute on", m.Node(), m.Owned().Owned())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMembershipChaosTrust: nodes heartbeat in the background while one
// node's heartbeat replies are held, at random, for up to twice the lease
// (committed on the server, late on the client), and another process tries
// to Join under that node's name every few heartbeats. Sampled all along:
// no two memberships would claim on one shard at one instant, and every
// shard one would claim on is, in the database, that node's under a live
// lease at that epoch (a sample that a hand-off between the two clock
// readings leaves undecided is counted, not judged). The held node must
// both lose its shards (a lapse) and reclaim them, and the duplicate name
// must be refused while its holder lives; once the holder lapsed, the
// duplicate may take the name (it then leaves after a few heartbeats).
func TestMembershipChaosTrust(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: several seconds")
	}
	ctx := t.Context()
	schema := testSchema(t)
	q := pgx.Identifier{schema}.Sanitize()
	const (
		claimLease = 200 * time.Millisecond
		lease      = time.Second
		heartbeat  = 200 * time.Millisecond
		run        = 6 * time.Second
	)
	newStore := func() *pgstore.Store {
		s, err := pgstore.New(ctx, newPool(t, nil, 4), pgstore.Options{Schema: schema, Lease: claimLease})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sa, sb, sc := newStore(), newStore(), newStore()
	opts := func(node string) pgstore.MembershipOptions {
		return pgstore.MembershipOptions{Node: node, Lease: lease, Heartbeat: heartbeat}
	}
	a, err := sa.Join(ctx, opts("n1"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := sc.Join(ctx, opts("n2"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := sb.Join(ctx, opts("n1")); !errors.Is(err, pgstore.ErrNodeNameInUse) {
		t.Fatalf("Join of n1 while a holds it = %v, %v; want ErrNodeNameInUse", b, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var rngMu sync.Mutex
	pgstore.SetReplyHook(a, func() {
		rngMu.Lock()
		d := []time.Duration{0, 0, 0, lease / 2, 2 * lease}[rng.IntN(5)]
		rngMu.Unlock()
		time.Sleep(d) // the held reply
	})

	var (
		mu      sync.Mutex
		members = []*pgstore.Membership{a, c}
		dupOK   int // Joins of n1 by b that succeeded (only once a lapsed)
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // b tries a's name every few heartbeats
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * heartbeat):
			}
			mu.Lock()
			joined := len(members) == 3
			mu.Unlock()
			if joined {
				continue
			}
			b, err := sb.Join(ctx, opts("n1"))
			switch {
			case errors.Is(err, pgstore.ErrNodeNameInUse):
			case err != nil:
				t.Errorf("b: Join: %v", err)
				return
			default:
				// b holds the name a while, then leaves, so that a (whose
				// heartbeats fail with ErrNodeNameInUse meanwhile) can
				// take it back.
				mu.Lock()
				members = append(members, b)
				dupOK++
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-time.After(3 * heartbeat):
				}
				mu.Lock()
				members = members[:2]
				mu.Unlock()
				if err := b.Leave(ctx); err != nil {
					t.Errorf("b: Leave: %v", err)
					return
				}
			}
		}
	})

	var samples, undecided, aEmpty, aFullAfterEmpty int
	sawEmpty := false
	for deadline := time.Now().Add(run); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		ms := append([]*pgstore.Membership(nil), members...)
		mu.Unlock()
		var before time.Time
		if err := adminPool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		held := pgstore.HeldNow(ms...)
		type owner struct {
			node   *string
			epoch  int64
			expiry time.Time
		}
		cur := map[int32]owner{}
		rows, err := adminPool.Query(ctx, `SELECT shard, owner, epoch, lease_expires_at FROM `+q+`.shard_owners`)
		if err != nil {
			t.Fatal(err)
		}
		var (
			sh int32
			o  owner
		)
		if _, err := pgx.ForEachRow(rows, []any{&sh, &o.node, &o.epoch, &o.expiry}, func() error { cur[sh] = o; return nil }); err != nil {
			t.Fatal(err)
		}
		acquired := map[[2]int64]time.Time{}
		rows, err = adminPool.Query(ctx, `SELECT shard, epoch, acquired_at FROM `+q+`.shard_epochs`)
		if err != nil {
			t.Fatal(err)
		}
		var (
			ep int64
			at time.Time
		)
		if _, err := pgx.ForEachRow(rows, []any{&sh, &ep, &at}, func() error { acquired[[2]int64{int64(sh), ep}] = at; return nil }); err != nil {
			t.Fatal(err)
		}
		samples++
		claimedBy := map[int32]int{}
		for i, h := range held {
			for s, e := range h {
				if j, dup := claimedBy[s]; dup {
					t.Fatalf("sample %d: shard %d held by %s (#%d) and %s (#%d) at one instant", samples, s, ms[j].Node(), j, ms[i].Node(), i)
				}
				claimedBy[s] = i
				d := cur[s]
				switch {
				case d.epoch == e:
					if d.node != nil && *d.node != ms[i].Node() || !d.expiry.After(before) {
						t.Fatalf("sample %d: %s holds shard %d at epoch %d; the database shows owner %v, lease until %v, before the sample at %v",
							samples, ms[i].Node(), s, e, deref(d.node), d.expiry, before)
					}
				case d.epoch > e:
					next, ok := acquired[[2]int64{int64(s), e + 1}]
					if ok && !next.After(before) {
						t.Fatalf("sample %d: %s holds shard %d at epoch %d, taken at epoch %d at %v, before the sample at %v",
							samples, ms[i].Node(), s, e, e+1, next, before)
					}
					undecided++
				default:
					t.Fatalf("sample %d: %s holds shard %d at epoch %d, ahead of the database's %d", samples, ms[i].Node(), s, e, d.epoch)
				}
			}
		}
		switch n := len(held[0]); {
		case n == 0:
			aEmpty++
			sawEmpty = true
		case sawEmpty:
			aFullAfterEmpty++
		}
	}
	close(stop)
	wg.Wait()
	pgstore.SetReplyHook(a, nil)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples (%d shard checks undecided by a hand-off between the clock readings); a owned nothing in %d, reclaimed in %d after; b joined as n1 %d times",
		samples, undecided, aEmpty, aFullAfterEmpty, dupOK)
	if aEmpty == 0 || aFullAfterEmpty == 0 {
		t.Errorf("a never lapsed (%d) or never reclaimed (%d): the held replies did not exercise the view", aEmpty, aFullAfterEmpty)
	}
	for _, m := range members { // b left already, or never joined
		if err := m.Leave(ctx); err != nil {
			t.Errorf("%s: Leave: %v", m.Node(), err)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return fmt.Sprintf("%q", *s)
}
