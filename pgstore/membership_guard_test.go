package pgstore_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxkit/backpressure/pgstore"
)

// guardSetting is the session's own idle_in_transaction_session_timeout
// in the guard tests (ms): not the server's default, nor any heartbeat's
// guard, so a test sees which one a transaction runs under.
const guardSetting = "600000"

// guardStore is a store on schema over a pool of one connection whose
// session sets idle_in_transaction_session_timeout to guardSetting: every
// transaction of the store runs on that one session.
func guardStore(t *testing.T, schema string) *pgstore.Store {
	t.Helper()
	pool := newPool(t, nil, 1, "idle_in_transaction_session_timeout", guardSetting)
	s, err := pgstore.New(t.Context(), pool, pgstore.Options{Schema: schema, Lease: 30 * time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// guardOf is the guard a heartbeat of a member lease runs under, in ms:
// half the lease.
func guardOf(lease time.Duration) string {
	return strconv.FormatInt((lease / 2).Milliseconds(), 10)
}

// A heartbeat's transaction runs under idle_in_transaction_session_timeout
// of half the member lease, set for that transaction only: the next
// transaction on the same session runs under the session's own setting.
func TestHeartbeatGuardIsLocalToItsTransaction(t *testing.T) {
	ctx := t.Context()
	const lease = 6 * time.Second
	s := guardStore(t, testSchema(t))
	a, err := pgstore.JoinManual(ctx, s, pgstore.MembershipOptions{Node: "a", Lease: lease, Heartbeat: lease / 4})
	if err != nil {
		t.Fatalf("Join a: %v", err)
	}
	defer a.Leave(context.Background())
	const setting = `SELECT pg_backend_pid(), setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'`
	var (
		beatPID uint32
		inBeat  string
	)
	pgstore.SetLockedHook(a, func(ctx context.Context, tx pgx.Tx) {
		if err := tx.QueryRow(ctx, setting).Scan(&beatPID, &inBeat); err != nil {
			t.Errorf("in the heartbeat's transaction: %v", err)
		}
	})
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatalf("a: Heartbeat: %v", err)
	}
	if want := guardOf(lease); inBeat != want {
		t.Errorf("a heartbeat's transaction runs under idle_in_transaction_session_timeout = %q ms, want half the lease, %q", inBeat, want)
	}
	var (
		pid   uint32
		after string
	)
	if err := pgx.BeginFunc(ctx, pgstore.PoolOf(s), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, setting).Scan(&pid, &after)
	}); err != nil {
		t.Fatal(err)
	}
	if pid != beatPID {
		t.Fatalf("the transaction after the heartbeat ran in backend %d, the heartbeat in %d: want one session", pid, beatPID)
	}
	if after != guardSetting {
		t.Errorf("the transaction after a heartbeat, on its session, runs under idle_in_transaction_session_timeout = %q ms, want the session's %q", after, guardSetting)
	}
}

// A node frozen mid-heartbeat, between the statement that locks the
// ownership rows and the one that rebalances them, holds those locks only
// until its transaction's guard ends its session: another node's
// heartbeat, which needs them, then goes through, the frozen heartbeat
// fails when the node wakes, and ownership converges on the assignment.
// The events are awaited (a failsafe bounds each wait); nothing asserts
// how long they take.
func TestFrozenHeartbeatEndedByItsGuard(t *testing.T) {
	ctx := t.Context()
	const lease = 6 * time.Second
	schema := testSchema(t)
	opts := func(node string) pgstore.MembershipOptions {
		return pgstore.MembershipOptions{Node: node, Lease: lease, Heartbeat: lease / 4}
	}
	a, err := pgstore.JoinManual(ctx, guardStore(t, schema), opts("a"))
	if err != nil {
		t.Fatalf("Join a: %v", err)
	}
	defer a.Leave(context.Background())
	b, err := pgstore.JoinManual(ctx, dbClockStore(t, schema), opts("b"))
	if err != nil {
		t.Fatalf("Join b: %v", err)
	}
	defer b.Leave(context.Background())
	// a owns every shard (b joined after it, and a's leases are live), so
	// its heartbeat locks every ownership row, b's assigned ones included.
	stalled, release := make(chan uint32, 1), make(chan struct{})
	pgstore.SetLockedHook(a, func(ctx context.Context, tx pgx.Tx) {
		var pid uint32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Errorf("in a's heartbeat: %v", err)
		}
		stalled <- pid
		select { // frozen: nothing more is sent until the test lets it go
		case <-release:
		case <-ctx.Done():
		}
	})
	frozen := make(chan error, 1)
	go func() { frozen <- a.Heartbeat(ctx) }()
	var pid uint32
	select {
	case pid = <-stalled:
	case <-time.After(time.Minute): // a failsafe, not an assertion of speed
		t.Fatal("a's heartbeat never reached its lock statement's end")
	}
	defer close(release)
	if state := backendState(t, pid); state != "idle in transaction" && state != "" {
		t.Fatalf("a's stalled heartbeat's backend is %q, want idle in transaction (or already ended)", state)
	}
	waitHeartbeat(t, b, "b's heartbeat, waiting on the locks of a's frozen one")
	waitFor(t, "the end of a's frozen session", func() bool { return backendState(t, pid) == "" })
	release <- struct{}{}
	if err := <-frozen; err == nil {
		t.Fatal("a's frozen heartbeat succeeded after the server ended its session")
	} else if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code != "25P03" {
		t.Errorf("a's frozen heartbeat failed with %v, want the server's idle_in_transaction_session_timeout (25P03)", err)
	}
	pgstore.SetLockedHook(a, nil)
	want := mustAssign(t, []string{"a", "b"}, a.Store().ShardCount())
	waitFor(t, "ownership to converge on the assignment", func() bool {
		waitHeartbeat(t, a, "a's heartbeat")
		waitHeartbeat(t, b, "b's heartbeat")
		return ownsItsShare(a, want) && ownsItsShare(b, want)
	})
}

// backendState is the pg_stat_activity state of the backend pid, "" once
// it has ended.
func backendState(t *testing.T, pid uint32) string {
	t.Helper()
	var state string
	if err := adminPool.QueryRow(t.Context(), `SELECT coalesce((SELECT coalesce(state, '?') FROM pg_stat_activity WHERE pid = $1), '')`, int32(pid)).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

// waitHeartbeat runs m's Heartbeat, failing t if it fails or has not
// returned by a failsafe.
func waitHeartbeat(t *testing.T, m *pgstore.Membership, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a failsafe, not an assertion of speed
	defer cancel()
	if err := m.Heartbeat(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// ownsItsShare reports whether m owns exactly the shards want assigns it.
func ownsItsShare(m *pgstore.Membership, want []string) bool {
	var mine []int
	for s, o := range want {
		if o == m.Node() {
			mine = append(mine, s)
		}
	}
	return slices.Equal(m.Owned().Owned(), mine)
}
