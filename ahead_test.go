package backpressure_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The order in which an aheadStore runs a sweep's claim and the read-ahead
// SweepAhead starts beside it.
const (
	orderFree       = iota // as the scheduler has it
	orderAheadFirst        // the claim waits until the read-ahead has counted: its snapshot misses the claim
	orderClaimFirst        // the read-ahead waits until the claim has run: its snapshot sees the claim
)

// aheadStore is memStore with a Counter serving every CountParams, the
// claimed counts too (as memFullCounter), for SweepAhead: one lock
// serialises every call, so a read-ahead running beside a claim reads one
// state of the outbox, before or after the claim, and can be made to read
// either (order). It tells a read-ahead's count from a sweep's own by its
// context: the tests sweep with context.Background(), whose Done is nil,
// while a read-ahead runs on a context of its own, which can be cancelled.
//
// The test may touch the memStore's rows directly only when no read-ahead
// is running (after backpressure.WaitAhead).
type aheadStore struct {
	*memWindowStore

	lock      sync.Mutex // serialises every call; guards the fields below
	own       int        // count calls made by sweeps themselves, of every kind
	ahead     int        // count calls made by read-aheads
	claims    int        // ClaimOutboxRowsScoped calls
	aheadCtxs []context.Context

	failAhead   error           // when set, every read-ahead's count fails with it
	failClaim   error           // when set, the next claim fails with it
	beforeClaim func(*memStore) // when set, runs (under the lock) before every claim

	order       int           // orderFree, orderAheadFirst or orderClaimFirst
	gate        chan struct{} // closed by the first of the two, for the other
	gateClosed  bool
	aheadBudget int  // with orderAheadFirst: a claim whose limits sum to it waits for the read-ahead
	stuck       bool // such a claim waited in vain: no read-ahead came
}

func newAheadStore(shards int) *aheadStore {
	return &aheadStore{memWindowStore: &memWindowStore{memStore: newMemStore(shards)}}
}

// isReadAhead reports whether a call comes from a read-ahead (see aheadStore).
func isReadAhead(ctx context.Context) bool { return ctx.Done() != nil }

// setOrder sets the order of the next sweep's claim and read-ahead; budget
// is the sweep's min(n, B) when it is a SweepAhead (which starts a
// read-ahead when its plan fills that budget), else 0.
func (s *aheadStore) setOrder(order, budget int) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.order, s.aheadBudget = order, budget
	s.gate, s.gateClosed = make(chan struct{}), false
}

func (s *aheadStore) openGate() { // under s.lock
	if !s.gateClosed {
		s.gateClosed = true
		close(s.gate)
	}
}

// calls returns the count calls made so far: the sweeps' own, and read-aheads'.
func (s *aheadStore) calls() (own, ahead int) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.own, s.ahead
}

// lastAheadCtx returns the context of the last read-ahead's count.
func (s *aheadStore) lastAheadCtx() context.Context {
	s.lock.Lock()
	defer s.lock.Unlock()
	if len(s.aheadCtxs) == 0 {
		return nil
	}
	return s.aheadCtxs[len(s.aheadCtxs)-1]
}

func (s *aheadStore) countCall(ctx context.Context) { // under s.lock
	if isReadAhead(ctx) {
		s.ahead++
		s.aheadCtxs = append(s.aheadCtxs, ctx)
	} else {
		s.own++
	}
}

func (s *aheadStore) CountClaimedOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction) (map[string]int, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.countCall(ctx)
	return s.memStore.CountClaimedOutboxRows(ctx, f)
}

func (s *aheadStore) CountPendingOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, c int) ([]backpressure.RouteCount, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.countCall(ctx)
	return s.memStore.CountPendingOutboxRows(ctx, f, c)
}

func (s *aheadStore) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	ahead := isReadAhead(ctx)
	if ahead {
		s.lock.Lock()
		order, gate := s.order, s.gate
		s.lock.Unlock()
		if order == orderClaimFirst {
			<-gate // the claim always follows the read-ahead's start
		}
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	s.countCall(ctx)
	if ahead && s.order == orderAheadFirst {
		defer s.openGate()
	}
	if ahead && s.failAhead != nil {
		return nil, nil, s.failAhead
	}
	var claimed map[string]int
	if p.Claimed {
		var err error
		if claimed, err = s.memStore.CountClaimedOutboxRows(ctx, f); err != nil {
			return nil, nil, err
		}
	}
	pending, err := s.pending(ctx, f, p)
	if err != nil {
		return nil, nil, err
	}
	return claimed, pending, nil
}

func (s *aheadStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]memRow, error) {
	sum := 0
	for _, c := range claims {
		sum += c.Limit
	}
	s.lock.Lock()
	order, gate, budget := s.order, s.gate, s.aheadBudget
	s.lock.Unlock()
	if order == orderAheadFirst && budget > 0 && sum == budget {
		// A full SweepAhead has started its read-ahead before its claim.
		// (The timeout only guards against a hang if it has not.)
		select {
		case <-gate:
		case <-time.After(10 * time.Second):
			s.lock.Lock()
			s.stuck = true
			s.lock.Unlock()
		}
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.order == orderClaimFirst {
		defer s.openGate()
	}
	s.claims++
	if err := s.failClaim; err != nil {
		s.failClaim = nil
		return nil, err
	}
	if s.beforeClaim != nil {
		s.beforeClaim(s.memStore)
	}
	return s.memStore.ClaimOutboxRowsScoped(ctx, f, claims)
}

// aheadTxStore is an aheadStore that is also a TxSweeper: its transaction
// view is the aheadStore itself, a Counter.
type aheadTxStore struct {
	*aheadStore
	txs int
}

func (s *aheadTxStore) InSweepTx(ctx context.Context, fn func(tx backpressure.OutboxStore[memRow]) error) error {
	s.txs++
	return fn(s.aheadStore)
}

// liveCounts returns, from rows at now, the live claimed rows of each
// namespace on f's shards, and the claimable rows of each (every route,
// valid or not): the truth Sweep's counts approximate.
func liveCounts(rows []memRow, now time.Time, f backpressure.OwnedShardFraction) (claimed, pending map[string]int) {
	claimed, pending = map[string]int{}, map[string]int{}
	for _, r := range rows {
		if r.Settled || !f.Owns(r.Shard) {
			continue
		}
		if now.Before(r.LeaseUntil) {
			claimed[r.Namespace]++
		} else {
			pending[r.Namespace]++
		}
	}
	return claimed, pending
}

func copyRows(s *memStore) []memRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]memRow, len(s.rows))
	for i, r := range s.rows {
		out[i] = *r
	}
	return out
}

// TestSweepAheadStateful: a stateful property like TestSweepStateful, for
// sweeps that are mostly SweepAhead (with read-aheads always used when
// they may be: SetAheadNoExpiry), some SweepN, over a Counter serving the
// claimed counts, with random enqueues (now and then on invalid routes),
// settles, lease expiries, configs (SetConfig: batch size, quotas, weights
// now and then) and owned shards (SetOwnedShards), and each read-ahead
// reading before, after or beside its sweep's claim. After every sweep:
// each namespace the sweep granted rows has at most its ceiling of live
// claimed rows, and no other's grew; the sweep claimed at most min(n, B)
// rows, each of them claimable before it and within its route's limit;
// every other row is unchanged; and every report is conservative against
// the outbox just before the sweep (counted here, row by row): Claimed at
// least the namespace's live claimed rows, Pending at most its claimable
// rows.
func TestSweepAheadStateful(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	var used, usedAheadFirst, usedClaimFirst, usedWindowed, aheadSweeps int
	rapid.Check(t, func(t *rapid.T) {
		nShards := rapid.IntRange(1, 8).Draw(t, "shards")
		store := newAheadStore(nShards)
		drawShards := func(label string) backpressure.OwnedShardFraction {
			var owned []int
			for s := 0; s < nShards; s++ {
				if rapid.IntRange(0, 3).Draw(t, label) > 0 {
					owned = append(owned, s)
				}
			}
			f, err := backpressure.NewOwnedShardFraction(owned, nShards)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		nNS := rapid.IntRange(1, 12).Draw(t, "namespaces")
		nsName := func(label string) string { return fmt.Sprintf("n%02d", rapid.IntRange(0, nNS-1).Draw(t, label)) }
		drawConfig := func(prefix string) backpressure.Config {
			cfg := backpressure.Config{
				BatchSize:    rapid.IntRange(1, 6).Draw(t, prefix+"batch"),
				DefaultQuota: rapid.SampledFrom([]int{backpressure.Unlimited, 1, 2, 4}).Draw(t, prefix+"defaultQuota"),
				Quotas:       map[string]int{nsName(prefix + "quotaNS"): rapid.IntRange(0, 3).Draw(t, prefix+"quota")},
			}
			cfg.Apportionment = rapid.SampledFrom([]backpressure.Apportionment{backpressure.ApportionCeil, backpressure.ApportionShares}).Draw(t, prefix+"apportionment")
			if rapid.IntRange(0, 4).Draw(t, prefix+"weighted") == 0 {
				cfg.Weights = map[string]int{nsName(prefix + "heavyNS"): rapid.IntRange(2, 4).Draw(t, prefix+"weight")}
			}
			return cfg
		}
		b, err := backpressure.New(drawConfig(""), drawShards("own"))
		if err != nil {
			t.Fatal(err)
		}
		// A backlog to start with, so that sweeps fill their budget.
		for i := 0; i < nNS; i++ {
			store.enqueue(fmt.Sprintf("n%02d", i), fmt.Sprint("q", rapid.IntRange(0, 2).Draw(t, "backlogTQ")), rapid.IntRange(0, 30).Draw(t, "backlog"))
		}
		// sweepAndCheck runs one sweep and checks it.
		sweepAndCheck := func(step int) {
			f, batch := b.OwnedShards(), b.BatchSize()
			before := copyRows(store.memStore)
			trueClaimed, truePending := liveCounts(before, store.now, f)
			n := batch // as a dispatcher with every worker idle asks
			if rapid.Bool().Draw(t, "otherBudget") {
				n = rapid.IntRange(-1, batch+2).Draw(t, "budget")
			}
			ahead := rapid.IntRange(0, 4).Draw(t, "sweepAhead") > 0
			order := rapid.IntRange(orderFree, orderClaimFirst).Draw(t, "order")
			budget := 0
			if ahead {
				budget = max(0, min(n, batch))
			}
			store.setOrder(order, budget)
			own, aheadCalls := store.calls()
			sweep := backpressure.SweepN[memRow]
			if ahead {
				sweep = backpressure.SweepAhead[memRow]
			}
			rows, plan, err := sweep(context.Background(), b, store, n)
			backpressure.WaitAhead(b)
			if err != nil {
				t.Fatalf("step %d: sweep (ahead %v, n %d): %v", step, ahead, n, err)
			}
			if store.stuck {
				t.Fatalf("step %d: a full SweepAhead's claim waited for a read-ahead that never came", step)
			}
			own2, aheadCalls2 := store.calls()
			if n <= 0 {
				if rows != nil || plan.Claims != nil || plan.Namespaces != nil || own2 != own || aheadCalls2 != aheadCalls {
					t.Fatalf("step %d: sweep(%d) = %v, %+v after %d store calls, want nothing and no call", step, n, rows, plan, own2-own+aheadCalls2-aheadCalls)
				}
				return
			}
			if ahead {
				aheadSweeps++
				if own2 == own {
					// Planned from the counts read ahead alone.
					used++
					switch order {
					case orderAheadFirst:
						usedAheadFirst++
					case orderClaimFirst:
						usedClaimFirst++
					}
					if plan.Windowed {
						usedWindowed++
					}
				}
			} else if aheadCalls2 != aheadCalls {
				t.Fatalf("step %d: SweepN read ahead", step)
			}
			if len(rows) > min(n, batch) || len(rows) != plan.Granted() {
				t.Fatalf("step %d: sweep(%d) claimed %d rows, plan granted %d, batch %d", step, n, len(rows), plan.Granted(), batch)
			}
			claimedKeys := map[string]bool{}
			perRoute := map[backpressure.Route]int{}
			grantedNS := map[string]bool{}
			for _, r := range rows {
				claimedKeys[r.Key] = true
				perRoute[backpressure.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}]++
				grantedNS[r.Namespace] = true
			}
			limits := map[backpressure.Route]int{}
			for _, c := range plan.Claims {
				limits[c.Route] = c.Limit
			}
			for rt, k := range perRoute {
				if k > limits[rt] {
					t.Fatalf("step %d: claimed %d rows of %v, plan's limit %d", step, k, rt, limits[rt])
				}
			}
			after := copyRows(store.memStore)
			for i, r := range after {
				old := before[i]
				if claimedKeys[r.Key] {
					if old.Settled || !f.Owns(old.Shard) || store.now.Before(old.LeaseUntil) {
						t.Fatalf("step %d: claimed a row that was not claimable: %+v", step, old)
					}
				} else if r != old {
					t.Fatalf("step %d: unclaimed row changed: %+v -> %+v", step, old, r)
				}
			}
			liveAfter, _ := liveCounts(after, store.now, f)
			for ns, k := range liveAfter {
				c := b.Ceiling(ns)
				if c == backpressure.Unlimited {
					return
				}
				if grantedNS[ns] && k > c {
					t.Fatalf("step %d: namespace %q has %d claimed rows > ceiling %d after a sweep granted it %d (plan %+v)", step, ns, k, c, len(rows), plan.Namespaces)
				}
				if k > max(c, trueClaimed[ns]) {
					t.Fatalf("step %d: namespace %q went from %d to %d claimed rows, ceiling %d", step, ns, trueClaimed[ns], k, c)
				}
			}
			for _, r := range plan.Namespaces {
				if r.Claimed < trueClaimed[r.Namespace] || r.Pending > truePending[r.Namespace] {
					t.Fatalf("step %d: report %+v not conservative: %d live claimed, %d claimable before the sweep (ahead %v, order %d)",
						step, r, trueClaimed[r.Namespace], truePending[r.Namespace], ahead, order)
				}
			}
		}
		for step := 0; step < 50; step++ {
			switch rapid.IntRange(0, 11).Draw(t, "action") {
			case 0, 1:
				ns, tq := nsName("ns"), fmt.Sprint("q", rapid.IntRange(0, 2).Draw(t, "tq"))
				switch rapid.IntRange(0, 19).Draw(t, "oddRoute") {
				case 0:
					ns = "" // invalid: held, never claimed
				case 1:
					tq = "\xff" // invalid
				}
				store.enqueue(ns, tq, rapid.IntRange(1, 10).Draw(t, "n"))
			case 2:
				store.settleNamespace(nsName("settleNS"))
			case 3:
				store.now = store.now.Add(time.Duration(rapid.IntRange(0, 90).Draw(t, "secs")) * time.Second)
			case 4:
				if err := b.SetConfig(drawConfig("new")); err != nil {
					t.Fatal(err)
				}
			case 5:
				if err := b.SetOwnedShards(drawShards("ownNow")); err != nil {
					t.Fatal(err)
				}
			default:
				// A burst of sweeps, as a dispatcher sweeps again at once
				// after a full one.
				for burst := rapid.IntRange(1, 4).Draw(t, "burst"); burst > 0; burst-- {
					sweepAndCheck(step)
				}
			}
		}
	})
	t.Logf("%d SweepAheads, %d planned from counts read ahead alone (%d read before the claim, %d after, %d windowed)",
		aheadSweeps, used, usedAheadFirst, usedClaimFirst, usedWindowed)
	if used == 0 || usedAheadFirst == 0 || usedClaimFirst == 0 || usedWindowed == 0 {
		t.Fatalf("the generator must reach sweeps planned from counts read ahead, read before and after the claim, and windowed: %d, %d, %d, %d",
			used, usedAheadFirst, usedClaimFirst, usedWindowed)
	}
}

// deepStore returns an aheadStore on one shard holding rows rows on each
// of nsCount namespaces (n00, n01, …) × queues task queues (q0, q1, …).
func deepStore(nsCount, queues, rows int) *aheadStore {
	s := newAheadStore(1)
	for q := 0; q < queues; q++ {
		for ns := 0; ns < nsCount; ns++ {
			s.enqueue(fmt.Sprintf("n%02d", ns), fmt.Sprint("q", q), rows)
		}
	}
	return s
}

// TestSweepAheadSameClaimsAsSweepN: over a backlog deeper on every route
// than the sweeps can drain, with unlimited quotas, counts read ahead and
// corrected give exactly the plans fresh counts give. Two identical
// outboxes, one drained by SweepN and one by SweepAhead, claim the same
// rows sweep after sweep, whichever of claim and read-ahead runs first;
// after the first sweep every SweepAhead plans from its read-ahead alone,
// so its only count is the next read-ahead, one per sweep, and it always
// leaves one pending: SweepN waits for a count at every sweep, SweepAhead
// only at its first. With more namespaces than the batch, the plans are
// windowed.
func TestSweepAheadSameClaimsAsSweepN(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	const sweeps = 12
	for _, tc := range []struct {
		name                   string
		batch, nsCount, queues int
		weights                map[string]int
		windowed               bool
	}{
		{name: "one route", batch: 4, nsCount: 1, queues: 1},
		{name: "few namespaces", batch: 5, nsCount: 3, queues: 2},
		{name: "weighted", batch: 6, nsCount: 3, queues: 2, weights: map[string]int{"n01": 3}},
		{name: "more namespaces than B", batch: 4, nsCount: 13, queues: 2, windowed: true},
		{name: "B of 1", batch: 1, nsCount: 5, queues: 3, windowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			depth := 2 * (sweeps + 2) * tc.batch
			fresh, ahead := deepStore(tc.nsCount, tc.queues, depth), deepStore(tc.nsCount, tc.queues, depth)
			cfg := backpressure.Config{BatchSize: tc.batch, DefaultQuota: backpressure.Unlimited, Weights: tc.weights}
			bf, ba := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
			windowed := 0
			for i := 0; i < sweeps; i++ {
				ahead.setOrder(i%3, tc.batch)
				own, aheadCalls := ahead.calls()
				r1, p1, err1 := backpressure.SweepN(context.Background(), bf, fresh, tc.batch)
				r2, p2, err2 := backpressure.SweepAhead(context.Background(), ba, ahead, tc.batch)
				backpressure.WaitAhead(ba)
				require.NoError(t, err1)
				require.NoError(t, err2)
				require.False(t, ahead.stuck, "sweep %d", i)
				require.Len(t, r1, tc.batch, "sweep %d", i)
				require.Equal(t, keys(r1), keys(r2), "sweep %d: SweepN claimed %v, SweepAhead %v", i, p1.Claims, p2.Claims)
				require.Equal(t, p1.Claims, p2.Claims, "sweep %d", i)
				// And the same reports, counted as deep, but for the
				// claimed rows, which the corrected counts may overstate.
				require.Equal(t, p1.Windowed, p2.Windowed, "sweep %d", i)
				require.Equal(t, p1.CountCap(), p2.CountCap(), "sweep %d", i)
				require.Len(t, p2.Namespaces, len(p1.Namespaces), "sweep %d", i)
				for j, r1 := range p1.Namespaces {
					r2 := p2.Namespaces[j]
					require.GreaterOrEqual(t, r2.Claimed, r1.Claimed, "sweep %d: %+v, SweepN's %+v", i, r2, r1)
					r2.Claimed = r1.Claimed
					require.Equal(t, r1, r2, "sweep %d", i)
				}
				require.True(t, backpressure.AheadPending(ba), "sweep %d: a full SweepAhead left no read-ahead", i)
				own2, aheadCalls2 := ahead.calls()
				require.Equal(t, 1, aheadCalls2-aheadCalls, "sweep %d: read-aheads", i)
				if i > 0 {
					require.Zero(t, own2-own, "sweep %d: SweepAhead counted for itself", i)
				}
				if p2.Windowed {
					windowed++
				}
			}
			freshOwn, _ := fresh.calls()
			own, aheadCalls := ahead.calls()
			t.Logf("SweepN: %d counts; SweepAhead: %d own, %d read ahead; %d windowed plans", freshOwn, own, aheadCalls, windowed)
			// SweepN on a Counter serving Claimed counts once a sweep too,
			// so in all SweepAhead counts once more (the last read-ahead);
			// but only its first sweep waited for a count.
			require.Equal(t, 1, own, "SweepAhead's own counts")
			require.GreaterOrEqual(t, freshOwn, sweeps, "SweepN's counts")
			require.LessOrEqual(t, own+aheadCalls, freshOwn+1)
			if tc.windowed {
				require.NotZero(t, windowed, "no windowed plan")
			}
		})
	}
}

func keys(rows []memRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key
	}
	return out
}

// aheadFixture is a Backpressure of batch 3 and unlimited quotas, over a
// deep outbox of three namespaces on one shard, after one full SweepAhead
// has left a read-ahead pending.
type aheadFixture struct {
	b *backpressure.Backpressure
	s *aheadStore
}

func newAheadFixture(t *testing.T) aheadFixture {
	t.Helper()
	fx := aheadFixture{b: newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1), s: deepStore(3, 1, 100)}
	fx.sweepAhead(t, fx.s, 3)
	require.True(t, backpressure.AheadPending(fx.b), "a full SweepAhead left no read-ahead")
	return fx
}

// sweepAhead runs SweepAhead(n) on store, waits for its read-ahead, and
// returns how many counts the sweep made for itself on store.
func (fx aheadFixture) sweepAhead(t *testing.T, store *aheadStore, n int) int {
	t.Helper()
	own, _ := store.calls()
	rows, _, err := backpressure.SweepAhead(context.Background(), fx.b, store, n)
	backpressure.WaitAhead(fx.b)
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	own2, _ := store.calls()
	return own2 - own
}

// The read-ahead a full SweepAhead leaves is used by the next SweepAhead,
// which then counts nothing for itself, unless something between them, or
// the next sweep itself, makes it unfit: the next sweep then counts as
// SweepN does. A read-ahead not used is cancelled.
func TestSweepAheadCarriedCountsNotUsed(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	ctx := context.Background()
	t.Run("used", func(t *testing.T) {
		fx := newAheadFixture(t)
		require.Zero(t, fx.sweepAhead(t, fx.s, 3))
		require.True(t, backpressure.AheadPending(fx.b))
	})
	t.Run("smaller budget", func(t *testing.T) {
		// One namespace of three queues: full counts, never a window; a
		// read-ahead for budget 3, at cap 3, covers budget 2's cap of 2.
		s := deepStore(1, 3, 100)
		fx := aheadFixture{b: newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1), s: s}
		fx.sweepAhead(t, s, 3)
		require.Zero(t, fx.sweepAhead(t, s, 2), "a read-ahead for budget 3 did not cover budget 2")
	})
	for _, tc := range []struct {
		name    string
		between func(t *testing.T, fx aheadFixture)
		n       int
	}{
		{"SetConfig", func(t *testing.T, fx aheadFixture) { require.NoError(t, fx.b.SetConfig(fx.b.Config())) }, 3},
		{"SetOwnedShards", func(t *testing.T, fx aheadFixture) { require.NoError(t, fx.b.SetOwnedShards(fx.b.OwnedShards())) }, 3},
		{"larger budget", func(t *testing.T, fx aheadFixture) {
			require.NoError(t, fx.b.SetConfig(backpressure.Config{BatchSize: 6, DefaultQuota: backpressure.Unlimited}))
			fx.sweepAhead(t, fx.s, 2) // a full sweep of budget 2
			require.True(t, backpressure.AheadPending(fx.b))
		}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newAheadFixture(t)
			tc.between(t, fx)
			readAhead := fx.s.lastAheadCtx()
			require.NotZero(t, fx.sweepAhead(t, fx.s, tc.n), "the next sweep did not count for itself")
			require.Error(t, readAhead.Err(), "the read-ahead not used was not cancelled")
		})
	}
	t.Run("Plan between", func(t *testing.T) {
		// Backpressure.Plan moves the rotation, so a window read ahead
		// no longer starts where the next sweep's does.
		cfg := backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}
		b, bt := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
		s, twin := deepStore(10, 1, 100), deepStore(10, 1, 100)
		fx := aheadFixture{b: b, s: s}
		for i := 0; i < 3; i++ {
			own := fx.sweepAhead(t, s, 3)
			_, _, err := backpressure.SweepN(ctx, bt, twin, 3)
			require.NoError(t, err)
			if i > 0 {
				require.Zero(t, own, "sweep %d", i)
			}
		}
		// Two namespaces for one row: one gets a remainder unit, and the
		// rotation cursor moves to it.
		snap := backpressure.Snapshot{Pending: []backpressure.RouteCount{
			{Route: backpressure.Route{Namespace: "n04", TaskQueue: "q0"}, Count: 5},
			{Route: backpressure.Route{Namespace: "n05", TaskQueue: "q0"}, Count: 5},
		}, Budget: 1}
		for _, bp := range []*backpressure.Backpressure{b, bt} {
			_, err := bp.Plan(snap)
			require.NoError(t, err)
		}
		own, _ := s.calls()
		r1, p1, err := backpressure.SweepAhead(ctx, b, s, 3)
		backpressure.WaitAhead(b)
		require.NoError(t, err)
		r2, p2, err := backpressure.SweepN(ctx, bt, twin, 3)
		require.NoError(t, err)
		require.True(t, p2.Windowed)
		require.Equal(t, keys(r2), keys(r1), "SweepN planned %v, SweepAhead %v", p2.Claims, p1.Claims)
		own2, _ := s.calls()
		require.NotZero(t, own2-own, "a window read ahead from another start was used")
	})
	t.Run("previous sweep not full", func(t *testing.T) {
		s := newAheadStore(1)
		s.enqueue("a", "q", 1)
		s.enqueue("b", "q", 1)
		b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1)
		fx := aheadFixture{b: b, s: s}
		fx.sweepAhead(t, s, 3) // claims 2 of a budget of 3
		_, aheadCalls := s.calls()
		require.Zero(t, aheadCalls, "a sweep whose plan fell short of its budget read ahead")
		require.False(t, backpressure.AheadPending(b))
		s.enqueue("c", "q", 5)
		require.NotZero(t, fx.sweepAhead(t, s, 3))
	})
	t.Run("previous claim came back short", func(t *testing.T) {
		fx := newAheadFixture(t)
		// Another claimer takes a route's rows between the sweep's count
		// and its claim: the plan is full, the claim is not.
		fx.s.lock.Lock()
		fx.s.beforeClaim = func(m *memStore) {
			for _, r := range m.rows {
				if r.Namespace == "n01" {
					r.Settled = true
				}
			}
		}
		fx.s.lock.Unlock()
		rows, plan, err := backpressure.SweepAhead(ctx, fx.b, fx.s, 3)
		backpressure.WaitAhead(fx.b)
		require.NoError(t, err)
		require.Equal(t, 3, plan.Granted())
		require.Len(t, rows, 2)
		require.False(t, backpressure.AheadPending(fx.b), "a short claim left a read-ahead")
		require.Error(t, fx.s.lastAheadCtx().Err(), "the read-ahead dropped was not cancelled")
		fx.s.lock.Lock()
		fx.s.beforeClaim = nil
		fx.s.lock.Unlock()
		require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
	})
	for _, name := range []string{"SweepN", "Sweep"} {
		t.Run("next is "+name, func(t *testing.T) {
			fx := newAheadFixture(t)
			readAhead := fx.s.lastAheadCtx()
			var err error
			if name == "Sweep" {
				_, _, err = backpressure.Sweep(ctx, fx.b, fx.s)
			} else {
				_, _, err = backpressure.SweepN(ctx, fx.b, fx.s, 3)
			}
			require.NoError(t, err)
			backpressure.WaitAhead(fx.b)
			require.False(t, backpressure.AheadPending(fx.b), "%s kept a read-ahead", name)
			require.Error(t, readAhead.Err(), "%s did not cancel the read-ahead", name)
			_, aheadCalls := fx.s.calls()
			require.Equal(t, 1, aheadCalls, "%s read ahead", name)
			require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
		})
	}
	t.Run("different store", func(t *testing.T) {
		fx := newAheadFixture(t)
		twin := deepStore(3, 1, 100)
		readAhead := fx.s.lastAheadCtx()
		require.NotZero(t, fx.sweepAhead(t, twin, 3), "a sweep on another store used the first one's read-ahead")
		require.Error(t, readAhead.Err())
		// And back: the read-ahead is now twin's.
		require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
	})
	t.Run("next store not a Counter", func(t *testing.T) {
		fx := newAheadFixture(t)
		readAhead := fx.s.lastAheadCtx()
		plain := newMemStore(1)
		plain.enqueue("a", "q", 5)
		_, _, err := backpressure.SweepAhead(ctx, fx.b, plain, 3)
		backpressure.WaitAhead(fx.b)
		require.NoError(t, err)
		require.False(t, backpressure.AheadPending(fx.b))
		require.Error(t, readAhead.Err(), "the read-ahead not used was not cancelled")
	})
	t.Run("store of a type that is not comparable", func(t *testing.T) {
		b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1)
		s := deepStore(3, 1, 100)
		store := sliceStore{aheadStore: s, tags: []string{"x"}}
		for i := 0; i < 3; i++ {
			own, _ := s.calls()
			_, _, err := backpressure.SweepAhead[memRow](ctx, b, store, 3)
			backpressure.WaitAhead(b)
			require.NoError(t, err)
			own2, _ := s.calls()
			require.NotZero(t, own2-own, "sweep %d: counts read ahead on a store that cannot be compared were used", i)
		}
	})
	t.Run("store of a comparable type holding an uncomparable value", func(t *testing.T) {
		// A struct with an interface field is a comparable type, but ==
		// panics when the field holds a slice: such a store is not
		// compared either.
		b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1)
		s := deepStore(3, 1, 100)
		store := taggedStore{aheadStore: s, tag: []string{"x"}}
		for i := 0; i < 3; i++ {
			own, _ := s.calls()
			_, _, err := backpressure.SweepAhead[memRow](ctx, b, store, 3)
			backpressure.WaitAhead(b)
			require.NoError(t, err)
			own2, _ := s.calls()
			if i > 0 {
				require.NotZero(t, own2-own, "sweep %d: counts read ahead on a store that cannot be compared were used", i)
			}
		}
		// With a comparable tag, the store compares and the read-ahead
		// serves.
		store.tag = "x"
		_, _, err := backpressure.SweepAhead[memRow](ctx, b, store, 3)
		backpressure.WaitAhead(b)
		require.NoError(t, err)
		own, _ := s.calls()
		_, _, err = backpressure.SweepAhead[memRow](ctx, b, store, 3)
		backpressure.WaitAhead(b)
		require.NoError(t, err)
		own2, _ := s.calls()
		require.Zero(t, own2-own)
	})
	t.Run("read-ahead fails", func(t *testing.T) {
		cfg := backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}
		b, bt := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
		s, twin := deepStore(3, 1, 100), deepStore(3, 1, 100)
		s.lock.Lock()
		s.failAhead = errors.New("replica gone")
		s.lock.Unlock()
		for i := 0; i < 4; i++ {
			own, aheadCalls := s.calls()
			r1, _, err1 := backpressure.SweepAhead(ctx, b, s, 3)
			backpressure.WaitAhead(b)
			r2, _, err2 := backpressure.SweepN(ctx, bt, twin, 3)
			require.NoError(t, err1, "sweep %d", i)
			require.NoError(t, err2, "sweep %d", i)
			require.Equal(t, keys(r2), keys(r1), "sweep %d", i)
			own2, aheadCalls2 := s.calls()
			require.Equal(t, 1, aheadCalls2-aheadCalls, "sweep %d: read-aheads", i)
			require.NotZero(t, own2-own, "sweep %d: the last read-ahead failed, yet the sweep did not count", i)
		}
		// Without failures, read-aheads serve again.
		s.lock.Lock()
		s.failAhead = nil
		s.lock.Unlock()
		fx := aheadFixture{b: b, s: s}
		require.NotZero(t, fx.sweepAhead(t, s, 3), "the last read-ahead failed")
		require.Zero(t, fx.sweepAhead(t, s, 3))
	})
	t.Run("claim fails", func(t *testing.T) {
		fx := newAheadFixture(t)
		boom := errors.New("deadlock detected")
		fx.s.lock.Lock()
		fx.s.failClaim = boom
		fx.s.lock.Unlock()
		rows, plan, err := backpressure.SweepAhead(ctx, fx.b, fx.s, 3)
		backpressure.WaitAhead(fx.b)
		var se *backpressure.StoreError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "ClaimOutboxRowsScoped", se.Op)
		require.ErrorIs(t, err, boom)
		require.Nil(t, rows)
		require.Nil(t, plan.Claims)
		require.False(t, backpressure.AheadPending(fx.b), "a failed sweep left a read-ahead")
		require.Error(t, fx.s.lastAheadCtx().Err(), "the failed sweep's read-ahead was not cancelled")
		require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
	})
}

// sliceStore is an aheadStore behind a value of a type == cannot compare.
type sliceStore struct {
	*aheadStore
	tags []string
}

// taggedStore is an aheadStore behind a value of a comparable type whose
// == may still panic, when tag holds an uncomparable value.
type taggedStore struct {
	*aheadStore
	tag any
}

// A TxSweeper's sweeps run in its transaction, and never read ahead, even
// when its view is a Counter.
func TestSweepAheadTxSweeperNeverReadsAhead(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	store := &aheadTxStore{aheadStore: deepStore(3, 2, 100)}
	twin := deepStore(3, 2, 100)
	cfg := backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}
	b, bt := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
	for i := 0; i < 4; i++ {
		r1, _, err1 := backpressure.SweepAhead(context.Background(), b, store, 4)
		r2, _, err2 := backpressure.SweepN(context.Background(), bt, twin, 4)
		backpressure.WaitAhead(b)
		require.NoError(t, err1)
		require.NoError(t, err2)
		require.Equal(t, keys(r2), keys(r1), "sweep %d", i)
		require.False(t, backpressure.AheadPending(b), "sweep %d", i)
	}
	require.Equal(t, 4, store.txs)
	own, aheadCalls := store.calls()
	require.Zero(t, aheadCalls, "a TxSweeper was read ahead")
	require.NotZero(t, own)
}

// The corrections, seen in the next sweep's reports: three namespaces of
// three rows, B = 3. The first sweep claims one row of each; its
// read-ahead counts either before the claim (2 claimable rows of each
// counted as 3, none claimed) or after it (2 and 1). Corrected by the
// grants, K + g and P − g: before, the next sweep's reports are exact (1
// claimed, 2 pending); after, they are conservative by the grant (2
// claimed, 1 pending). Either way the next sweep claims one row of each.
func TestSweepAheadCorrections(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	for _, tc := range []struct {
		name             string
		order            int
		claimed, pending int
	}{
		{"read before the claim", orderAheadFirst, 1, 2},
		{"read after the claim", orderClaimFirst, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := deepStore(3, 1, 3)
			b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1)
			fx := aheadFixture{b: b, s: s}
			s.setOrder(tc.order, 3)
			fx.sweepAhead(t, s, 3)
			require.False(t, s.stuck)
			s.setOrder(orderFree, 0)
			own, _ := s.calls()
			rows, plan, err := backpressure.SweepAhead(context.Background(), b, s, 3)
			backpressure.WaitAhead(b)
			require.NoError(t, err)
			own2, _ := s.calls()
			require.Zero(t, own2-own, "the read-ahead was not used")
			require.Len(t, rows, 3)
			for _, ns := range []string{"n00", "n01", "n02"} {
				r, ok := plan.Namespace(ns)
				require.True(t, ok, ns)
				require.Equal(t, tc.claimed, r.Claimed, "%s: %+v", ns, r)
				require.Equal(t, tc.pending, r.Pending, "%s: %+v", ns, r)
				require.Equal(t, 1, r.Granted, "%s: %+v", ns, r)
			}
		})
	}
}

// A plan's slices are the caller's (see Plan): changing the Claims of the
// plan a SweepAhead returned must not change how the next sweep corrects
// the counts read ahead. Quota 1 on one shard: a ceiling of 1 per
// namespace, which the first sweep fills; its read-ahead counts before the
// claim (no row claimed yet). A caller that then zeroes its plan's limits
// must not make the next sweep believe the namespaces have headroom.
func TestSweepAheadPlanIsTheCallers(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	s := deepStore(3, 1, 10)
	b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: 1}, 1)
	s.setOrder(orderAheadFirst, 3)
	rows, plan, err := backpressure.SweepAhead(context.Background(), b, s, 3)
	backpressure.WaitAhead(b)
	require.NoError(t, err)
	require.False(t, s.stuck)
	require.Len(t, rows, 3)
	for i := range plan.Claims {
		plan.Claims[i].Limit = 0
	}
	plan.Claims = slices.Delete(plan.Claims, 0, len(plan.Claims))
	s.setOrder(orderFree, 0)
	rows, plan, err = backpressure.SweepAhead(context.Background(), b, s, 3)
	backpressure.WaitAhead(b)
	require.NoError(t, err)
	require.Empty(t, rows, "every namespace is at its ceiling of 1; plan %+v", plan.Namespaces)
	live, _ := liveCounts(copyRows(s.memStore), s.now, b.OwnedShards())
	for ns, k := range live {
		require.LessOrEqual(t, k, 1, "namespace %s", ns)
	}
}
