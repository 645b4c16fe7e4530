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
// SweepAhead may start beside it. Neither makes the claim wait: a sweep
// that plans from full counts read ahead for an earlier sweep may pass
// them on and start no read-ahead, and its claim cannot tell.
const (
	orderFree       = iota // as the scheduler has it
	orderAheadFirst        // the read-ahead reads the outbox as it was before the claim, whenever it runs (an MVCC snapshot taken before the claim committed): it misses the claim
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
	readOrder int // the order the last read-ahead's count ran under

	failAhead   error           // when set, every read-ahead's count fails with it
	failClaim   error           // when set, the next claim fails with it
	beforeClaim func(*memStore) // when set, runs (under the lock) before every claim

	// Set by setOrder before each sweep (orderFree until then).
	order     int
	claimDone chan struct{}   // closed by the sweep's claim
	claimRan  bool            // claimDone is closed
	aheadRan  bool            // a read-ahead has counted since setOrder
	preClaim  *memWindowStore // orderAheadFirst: the outbox just before the sweep's claim, for a read-ahead that comes after it
}

func newAheadStore(shards int) *aheadStore {
	return &aheadStore{memWindowStore: &memWindowStore{memStore: newMemStore(shards)}}
}

// isReadAhead reports whether a call comes from a read-ahead (see aheadStore).
func isReadAhead(ctx context.Context) bool { return ctx.Done() != nil }

// setOrder sets the order of the next sweep's claim and the read-ahead it
// may start; it must be called before every sweep that is to run in an
// order other than orderFree (and before the next sweep after one that
// did). It never makes anything wait for a read-ahead that does not come:
// with orderAheadFirst the claim keeps a copy of the outbox as it was, for
// a read-ahead that comes after it; with orderClaimFirst a read-ahead
// waits for the claim, which a sweep always makes once it has started one.
func (s *aheadStore) setOrder(order int) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.order = order
	s.claimDone, s.claimRan, s.aheadRan, s.preClaim = make(chan struct{}), false, false, nil
}

// calls returns the count calls made so far: the sweeps' own, and read-aheads'.
func (s *aheadStore) calls() (own, ahead int) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.own, s.ahead
}

// lastReadOrder returns the order the last read-ahead's count ran under.
func (s *aheadStore) lastReadOrder() int {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.readOrder
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
		s.readOrder = s.order
	} else {
		s.own++
	}
}

// snapshot returns a copy of the outbox as it is now, to count on later.
func (s *aheadStore) snapshot() *memWindowStore { // under s.lock
	rows := copyRows(s.memStore)
	m := &memStore{shards: s.shards, now: s.now, lease: s.lease, rows: make([]*memRow, len(rows))}
	for i := range rows {
		m.rows[i] = &rows[i]
	}
	return &memWindowStore{memStore: m}
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
		order, claimDone := s.order, s.claimDone
		s.lock.Unlock()
		if order == orderClaimFirst {
			// A sweep starts a read-ahead just before its claim, so the
			// claim comes; a read-ahead dropped stops waiting.
			select {
			case <-claimDone:
			case <-ctx.Done():
			case <-time.After(time.Minute):
				panic("aheadStore: hang guard: a read-ahead waited a minute for its sweep's claim")
			}
		}
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	s.countCall(ctx)
	src := s.memWindowStore
	if ahead {
		s.aheadRan = true
		if s.order == orderAheadFirst && s.preClaim != nil {
			// The claim came first: count the outbox as it was before.
			src, s.preClaim = s.preClaim, nil
		}
		if s.failAhead != nil {
			return nil, nil, s.failAhead
		}
	}
	var claimed map[string]int
	if p.Claimed {
		var err error
		if claimed, err = src.memStore.CountClaimedOutboxRows(ctx, f); err != nil {
			return nil, nil, err
		}
	}
	pending, err := src.pending(ctx, f, p)
	if err != nil {
		return nil, nil, err
	}
	return claimed, pending, nil
}

func (s *aheadStore) ClaimOutboxRowsScoped(ctx context.Context, f backpressure.OwnedShardFraction, claims []backpressure.ScopedClaim) ([]memRow, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	switch {
	case s.order == orderAheadFirst && !s.aheadRan:
		// Keep the outbox as it is before the claim, for a read-ahead
		// this sweep may have started and that has not counted yet.
		s.preClaim = s.snapshot()
	case s.order == orderClaimFirst && !s.claimRan:
		s.claimRan = true
		defer close(s.claimDone)
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
// rows. And counts read ahead serve as SweepAhead says: a SweepAhead reads
// ahead at most once, a SweepN never; a full SweepAhead leaves counts for
// the next one, and any other sweep none; one that reads none passes on
// full counts read for at most three sweeps before it (so that they serve
// at most four), and a windowed one always reads.
func TestSweepAheadStateful(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	var used, usedAheadFirst, usedClaimFirst, usedWindowed, usedPassedOn, passedOn, aheadSweeps int
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
				DefaultQuota: rapid.SampledFrom([]int{backpressure.Unlimited, 1, 2, 4, 40}).Draw(t, prefix+"defaultQuota"),
			}
			// Now and then no small quota, so that full counts can be
			// passed on (every finite ceiling keeps a budget's headroom).
			if rapid.IntRange(0, 2).Draw(t, prefix+"quotaOverride") > 0 {
				cfg.Quotas = map[string]int{nsName(prefix + "quotaNS"): rapid.IntRange(0, 3).Draw(t, prefix+"quota")}
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
		// Sweeps (with n > 0) since the last read-ahead: the one that
		// started it is 0.
		sinceRead := 0
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
			store.setOrder(order)
			own, aheadCalls := store.calls()
			readOrder := store.lastReadOrder()
			sweep := backpressure.SweepN[memRow]
			if ahead {
				sweep = backpressure.SweepAhead[memRow]
			}
			rows, plan, err := sweep(context.Background(), b, store, n)
			backpressure.WaitAhead(b)
			if err != nil {
				t.Fatalf("step %d: sweep (ahead %v, n %d): %v", step, ahead, n, err)
			}
			own2, aheadCalls2 := store.calls()
			if n <= 0 {
				if rows != nil || plan.Claims != nil || plan.Namespaces != nil || own2 != own || aheadCalls2 != aheadCalls {
					t.Fatalf("step %d: sweep(%d) = %v, %+v after %d store calls, want nothing and no call", step, n, rows, plan, own2-own+aheadCalls2-aheadCalls)
				}
				return
			}
			full := len(rows) == min(n, batch)
			read := aheadCalls2 - aheadCalls
			if pending := backpressure.AheadPending(b); pending != (ahead && full) {
				t.Fatalf("step %d: counts read ahead pending %v after a sweep (ahead %v) that claimed %d rows of min(%d, %d)", step, pending, ahead, len(rows), n, batch)
			}
			if ahead {
				aheadSweeps++
				if read > 1 {
					t.Fatalf("step %d: a SweepAhead read ahead %d times", step, read)
				}
				if own2 == own {
					// Planned from the counts read ahead alone.
					used++
					switch readOrder {
					case orderAheadFirst:
						usedAheadFirst++
					case orderClaimFirst:
						usedClaimFirst++
					}
					if plan.Windowed {
						usedWindowed++
						if sinceRead != 0 {
							t.Fatalf("step %d: a window read ahead %d sweeps before served", step, sinceRead+1)
						}
					}
					if sinceRead > 0 {
						usedPassedOn++
					}
				}
				if full && read == 0 {
					// Passed on the full counts it planned from.
					passedOn++
					if plan.Windowed || sinceRead >= 3 {
						t.Fatalf("step %d: a full SweepAhead (windowed %v) passed on counts read %d sweeps before it", step, plan.Windowed, sinceRead+1)
					}
				}
			} else if read != 0 {
				t.Fatalf("step %d: SweepN read ahead", step)
			}
			if read > 0 {
				sinceRead = 0
			} else {
				sinceRead++
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
					continue
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
				for burst := rapid.IntRange(1, 6).Draw(t, "burst"); burst > 0; burst-- {
					sweepAndCheck(step)
				}
			}
		}
	})
	t.Logf("%d SweepAheads, %d planned from counts read ahead alone (%d read before the claim, %d after, %d windowed, %d read for an earlier sweep); %d passed full counts on",
		aheadSweeps, used, usedAheadFirst, usedClaimFirst, usedWindowed, usedPassedOn, passedOn)
	if used == 0 || usedAheadFirst == 0 || usedClaimFirst == 0 || usedWindowed == 0 || usedPassedOn == 0 || passedOn == 0 {
		t.Fatalf("the generator must reach sweeps planned from counts read ahead, read before and after the claim, windowed, read for an earlier sweep, and sweeps passing counts on: %d, %d, %d, %d, %d, %d",
			used, usedAheadFirst, usedClaimFirst, usedWindowed, usedPassedOn, passedOn)
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
// after the first sweep every SweepAhead plans from counts read ahead
// alone, and it always leaves some for the next: SweepN waits for a count
// at every sweep, SweepAhead only at its first. With full counts (fewer
// namespaces than a window), a read serves four sweeps: the first sweep
// reads ahead, the next four plan from that read, and the fourth of them
// reads again, so the reads come at sweeps 0, 4, 8, …; with more
// namespaces than the batch, the plans are windowed, and every sweep reads
// ahead for the next.
func TestSweepAheadSameClaimsAsSweepN(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	const sweeps = 13
	for _, tc := range []struct {
		name                   string
		batch, nsCount, queues int
		weights                map[string]int
		windowed               bool
		readEvery              int // sweeps a read serves
	}{
		{name: "one route", batch: 4, nsCount: 1, queues: 1, readEvery: 4},
		{name: "few namespaces", batch: 5, nsCount: 3, queues: 2, readEvery: 4},
		{name: "weighted", batch: 6, nsCount: 3, queues: 2, weights: map[string]int{"n01": 3}, readEvery: 4},
		{name: "more namespaces than B", batch: 4, nsCount: 13, queues: 2, windowed: true, readEvery: 1},
		{name: "B of 1", batch: 1, nsCount: 5, queues: 3, windowed: true, readEvery: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			depth := 2 * (sweeps + 2) * tc.batch
			fresh, ahead := deepStore(tc.nsCount, tc.queues, depth), deepStore(tc.nsCount, tc.queues, depth)
			cfg := backpressure.Config{BatchSize: tc.batch, DefaultQuota: backpressure.Unlimited, Weights: tc.weights}
			bf, ba := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
			windowed, reads := 0, 0
			for i := 0; i < sweeps; i++ {
				// Reads come at every readEvery-th sweep: vary the order
				// from read to read.
				ahead.setOrder((i / tc.readEvery) % 3)
				own, aheadCalls := ahead.calls()
				r1, p1, err1 := backpressure.SweepN(context.Background(), bf, fresh, tc.batch)
				r2, p2, err2 := backpressure.SweepAhead(context.Background(), ba, ahead, tc.batch)
				backpressure.WaitAhead(ba)
				require.NoError(t, err1)
				require.NoError(t, err2)
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
				require.True(t, backpressure.AheadPending(ba), "sweep %d: a full SweepAhead left no counts for the next", i)
				own2, aheadCalls2 := ahead.calls()
				wantRead := 0
				if i%tc.readEvery == 0 {
					wantRead = 1
				}
				require.Equal(t, wantRead, aheadCalls2-aheadCalls, "sweep %d: read-aheads", i)
				reads += aheadCalls2 - aheadCalls
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
			// SweepN on a Counter serving Claimed counts once a sweep too;
			// SweepAhead counts once, at its first sweep, and reads ahead
			// once every readEvery sweeps.
			require.Equal(t, 1, own, "SweepAhead's own counts")
			require.Equal(t, (sweeps+tc.readEvery-1)/tc.readEvery, aheadCalls, "SweepAhead's reads")
			require.Equal(t, reads, aheadCalls)
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
// has left a read-ahead pending, and passed more full SweepAheads have
// planned from it and passed it on (so passed < 4 more may).
type aheadFixture struct {
	b *backpressure.Backpressure
	s *aheadStore
}

// passedOn are the fixtures' numbers of sweeps that planned from the
// counts read ahead and passed them on: the tests of whether the next
// sweep uses them run with counts as read, and with counts already served
// twice.
var passedOn = []int{0, 2}

func newAheadFixture(t *testing.T, passed int) aheadFixture {
	t.Helper()
	fx := aheadFixture{b: newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1), s: deepStore(3, 1, 100)}
	fx.sweepAhead(t, fx.s, 3)
	require.True(t, backpressure.AheadPending(fx.b), "a full SweepAhead left no read-ahead")
	for i := 0; i < passed; i++ {
		_, aheadCalls := fx.s.calls()
		require.Zero(t, fx.sweepAhead(t, fx.s, 3), "sweep %d after the read counted for itself", i+1)
		_, aheadCalls2 := fx.s.calls()
		require.Equal(t, aheadCalls, aheadCalls2, "sweep %d after the read read ahead", i+1)
		require.True(t, backpressure.AheadPending(fx.b), "sweep %d after the read passed nothing on", i+1)
	}
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
// which then counts nothing for itself; being full counts, it serves the
// next three too, the last of which reads ahead again. Unless something
// between them, or the next sweep itself, makes the counts unfit, whether
// read for the last sweep or passed on: the next sweep then counts as
// SweepN does. A read-ahead not used is cancelled.
func TestSweepAheadCarriedCountsNotUsed(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	ctx := context.Background()
	for passed := 0; passed < 4; passed++ {
		t.Run(fmt.Sprintf("used (passed on %d)", passed), func(t *testing.T) {
			fx := newAheadFixture(t, passed)
			_, aheadCalls := fx.s.calls()
			require.Zero(t, fx.sweepAhead(t, fx.s, 3))
			require.True(t, backpressure.AheadPending(fx.b))
			_, aheadCalls2 := fx.s.calls()
			// The fourth sweep to plan from a read reads again.
			require.Equal(t, passed == 3, aheadCalls2 > aheadCalls, "read ahead")
		})
	}
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
		for _, passed := range passedOn {
			t.Run(fmt.Sprintf("%s (passed on %d)", tc.name, passed), func(t *testing.T) {
				fx := newAheadFixture(t, passed)
				tc.between(t, fx)
				readAhead := fx.s.lastAheadCtx()
				require.NotZero(t, fx.sweepAhead(t, fx.s, tc.n), "the next sweep did not count for itself")
				require.Error(t, readAhead.Err(), "the read-ahead not used was not cancelled")
			})
		}
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
	// With 0 passed on, the short sweep plans from the counts read ahead
	// and would pass them on; with 3, they have served their last sweep,
	// which reads ahead anew, and that read-ahead is dropped.
	for _, passed := range []int{0, 3} {
		t.Run(fmt.Sprintf("previous claim came back short (passed on %d)", passed), func(t *testing.T) {
			fx := newAheadFixture(t, passed)
			_, aheadCalls := fx.s.calls()
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
			_, aheadCalls2 := fx.s.calls()
			require.Equal(t, passed == 3, aheadCalls2 > aheadCalls, "read ahead")
			require.Error(t, fx.s.lastAheadCtx().Err(), "the read-ahead dropped was not cancelled")
			fx.s.lock.Lock()
			fx.s.beforeClaim = nil
			fx.s.lock.Unlock()
			require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
		})
	}
	for _, name := range []string{"SweepN", "Sweep"} {
		for _, passed := range passedOn {
			t.Run(fmt.Sprintf("next is %s (passed on %d)", name, passed), func(t *testing.T) {
				fx := newAheadFixture(t, passed)
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
	}
	for _, passed := range passedOn {
		t.Run(fmt.Sprintf("different store (passed on %d)", passed), func(t *testing.T) {
			fx := newAheadFixture(t, passed)
			twin := deepStore(3, 1, 100)
			readAhead := fx.s.lastAheadCtx()
			require.NotZero(t, fx.sweepAhead(t, twin, 3), "a sweep on another store used the first one's read-ahead")
			require.Error(t, readAhead.Err())
			// And back: the read-ahead is now twin's.
			require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
		})
		t.Run(fmt.Sprintf("next store not a Counter (passed on %d)", passed), func(t *testing.T) {
			fx := newAheadFixture(t, passed)
			readAhead := fx.s.lastAheadCtx()
			plain := newMemStore(1)
			plain.enqueue("a", "q", 5)
			_, _, err := backpressure.SweepAhead(ctx, fx.b, plain, 3)
			backpressure.WaitAhead(fx.b)
			require.NoError(t, err)
			require.False(t, backpressure.AheadPending(fx.b))
			require.Error(t, readAhead.Err(), "the read-ahead not used was not cancelled")
		})
	}
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
	// As for a short claim: counts passed on, or a new read-ahead, dropped.
	for _, passed := range []int{0, 3} {
		t.Run(fmt.Sprintf("claim fails (passed on %d)", passed), func(t *testing.T) {
			fx := newAheadFixture(t, passed)
			_, aheadCalls := fx.s.calls()
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
			_, aheadCalls2 := fx.s.calls()
			require.Equal(t, passed == 3, aheadCalls2 > aheadCalls, "read ahead")
			require.Error(t, fx.s.lastAheadCtx().Err(), "the failed sweep's read-ahead was not cancelled")
			require.NotZero(t, fx.sweepAhead(t, fx.s, 3))
		})
	}
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

// The corrections, seen in the reports of the sweeps that plan from one
// read: three namespaces of six rows, B = 3, unlimited quotas. The first
// sweep claims one row of each; its read-ahead counts either before the
// claim (6 claimable rows of each, none claimed) or after it (5 and 1),
// at cap 3 + 4·1 = 7, so every route is counted exactly. The next four
// sweeps plan from that read, corrected by every grant since it, K + Σg
// and min(P − Σg, c), c the sweep's own cap: 3 for the first (its grants
// grew, from none: 2·1 + 1), 2 for the others (steady at 1: 1 + 1). The
// h-th after it has seen h grants of one row per namespace, so its reports
// say h claimed and min(6 − h, c) pending when the read came before the
// claim (exact, but for the cap), and h + 1 and min(5 − h, c) when it came
// after (conservative by the first grant).
// Either way each sweep claims one row of each, the first three pass the
// counts on without reading, and the fourth reads again.
func TestSweepAheadCorrections(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	for _, tc := range []struct {
		name      string
		order     int
		seenClaim int // 1 if the read saw the first sweep's claim
	}{
		{"read before the claim", orderAheadFirst, 0},
		{"read after the claim", orderClaimFirst, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := deepStore(3, 1, 6)
			b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: backpressure.Unlimited}, 1)
			fx := aheadFixture{b: b, s: s}
			s.setOrder(tc.order)
			fx.sweepAhead(t, s, 3)
			for h := 1; h <= 4; h++ {
				s.setOrder(orderFree)
				own, aheadCalls := s.calls()
				rows, plan, err := backpressure.SweepAhead(context.Background(), b, s, 3)
				backpressure.WaitAhead(b)
				require.NoError(t, err)
				own2, aheadCalls2 := s.calls()
				require.Zero(t, own2-own, "sweep %d: the counts read ahead were not used", h)
				wantRead := 0
				if h == 4 {
					wantRead = 1
				}
				require.Equal(t, wantRead, aheadCalls2-aheadCalls, "sweep %d: read-aheads", h)
				require.True(t, backpressure.AheadPending(b), "sweep %d", h)
				require.Len(t, rows, 3, "sweep %d", h)
				for _, ns := range []string{"n00", "n01", "n02"} {
					r, ok := plan.Namespace(ns)
					require.True(t, ok, ns)
					require.Equal(t, h+tc.seenClaim, r.Claimed, "sweep %d, %s: %+v", h, ns, r)
					c := 2
					if h == 1 {
						c = 3
					}
					require.Equal(t, min(6-h-tc.seenClaim, c), r.Pending, "sweep %d, %s: %+v", h, ns, r)
					require.Equal(t, c, plan.CountCap(), "sweep %d", h)
					require.Equal(t, 1, r.Granted, "sweep %d, %s: %+v", h, ns, r)
				}
			}
		})
	}
}

// A plan's slices are the caller's (see Plan): changing the Claims of the
// plans SweepAhead returned must not change how the next sweeps correct
// the counts read ahead. On one shard, three namespaces of ten rows, B = 3,
// every read-ahead counting before its sweep's claim, and a caller that
// zeroes and truncates the Claims of every plan it gets: with quota 1, a
// ceiling of 1 per namespace, which the first sweep fills, so the next
// must claim nothing; with quota 5, the second sweep plans from the first
// one's read (1 claimed of each, 1 granted) and passes it on (headroom
// 5 − 2 ≥ 3), so the third corrects it by both earlier grants (2
// claimed); every report's Claimed is at least the live claimed rows, and
// no namespace ever holds more than its ceiling.
func TestSweepAheadPlanIsTheCallers(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	for _, quota := range []int{1, 5} {
		t.Run(fmt.Sprint("quota ", quota), func(t *testing.T) {
			s := deepStore(3, 1, 10)
			b := newTestBP(t, backpressure.Config{BatchSize: 3, DefaultQuota: quota}, 1)
			for i := 0; ; i++ {
				require.Less(t, i, 10, "the sweeps never stopped claiming")
				trueClaimed, _ := liveCounts(copyRows(s.memStore), s.now, b.OwnedShards())
				_, aheadCalls := s.calls()
				s.setOrder(orderAheadFirst)
				rows, plan, err := backpressure.SweepAhead(context.Background(), b, s, 3)
				backpressure.WaitAhead(b)
				require.NoError(t, err)
				for _, r := range plan.Namespaces {
					require.GreaterOrEqual(t, r.Claimed, trueClaimed[r.Namespace], "sweep %d: %+v", i, r)
				}
				live, _ := liveCounts(copyRows(s.memStore), s.now, b.OwnedShards())
				for ns, k := range live {
					require.LessOrEqual(t, k, quota, "sweep %d: namespace %s", i, ns)
				}
				_, aheadCalls2 := s.calls()
				switch {
				case quota == 1 && i == 1:
					require.Empty(t, rows, "every namespace is at its ceiling of 1; plan %+v", plan.Namespaces)
				case quota == 5 && i == 1:
					require.Len(t, rows, 3)
					require.Zero(t, aheadCalls2-aheadCalls, "the second sweep did not pass the counts on")
				case quota == 5 && i == 2:
					for _, r := range plan.Namespaces {
						require.Equal(t, 2, r.Claimed, "%+v", r)
					}
				}
				if len(rows) == 0 {
					break
				}
				for i := range plan.Claims {
					plan.Claims[i].Limit = 0
				}
				plan.Claims = slices.Delete(plan.Claims, 0, len(plan.Claims))
			}
		})
	}
}

// How often SweepAhead reads full counts ahead, on a deep backlog of few
// namespaces on one shard, against a twin outbox drained by SweepN, which
// claims the same rows at every sweep: every sweep fills its budget and
// leaves counts for the next, and the reads come as passOn allows, at
// most one every four sweeps.
func TestSweepAheadFullCountsPassedOn(t *testing.T) {
	defer backpressure.SetAheadNoExpiry()()
	ctx := context.Background()
	// sweep runs SweepN on fresh and SweepAhead on ahead with budget n,
	// checks that they claimed the same n rows, and returns whether the
	// SweepAhead read ahead.
	sweep := func(t *testing.T, i int, bf, ba *backpressure.Backpressure, fresh, ahead *aheadStore, n int) bool {
		t.Helper()
		_, aheadCalls := ahead.calls()
		r1, p1, err1 := backpressure.SweepN(ctx, bf, fresh, n)
		r2, p2, err2 := backpressure.SweepAhead(ctx, ba, ahead, n)
		backpressure.WaitAhead(ba)
		require.NoError(t, err1)
		require.NoError(t, err2)
		require.Len(t, r1, n, "sweep %d", i)
		require.Equal(t, keys(r1), keys(r2), "sweep %d: SweepN claimed %v, SweepAhead %v", i, p1.Claims, p2.Claims)
		require.True(t, backpressure.AheadPending(ba), "sweep %d: a full SweepAhead left no counts for the next", i)
		_, aheadCalls2 := ahead.calls()
		require.LessOrEqual(t, aheadCalls2-aheadCalls, 1, "sweep %d", i)
		return aheadCalls2 > aheadCalls
	}
	// A finite quota: two namespaces of one route, B = 4, every claimed
	// row settled after each sweep, every read counting before its
	// sweep's claim, so none claimed. The h-th sweep after a read plans
	// from K′ = 2h claimed rows of each namespace and grants 2, and passes
	// the counts on only while the ceiling Q keeps a headroom of B,
	// Q − 2h − 2 ≥ 4: never with Q = 5 (a read at every sweep, as a
	// namespace near its ceiling needs), once with Q = 8, twice with Q =
	// 10, and with Q = 50 three times, as many as four sweeps allow.
	for _, tc := range []struct{ quota, readEvery int }{{5, 1}, {8, 2}, {10, 3}, {50, 4}} {
		t.Run(fmt.Sprintf("quota %d", tc.quota), func(t *testing.T) {
			fresh, ahead := deepStore(2, 1, 100), deepStore(2, 1, 100)
			cfg := backpressure.Config{BatchSize: 4, DefaultQuota: tc.quota}
			bf, ba := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
			for i := 0; i < 12; i++ {
				ahead.setOrder(orderAheadFirst)
				read := sweep(t, i, bf, ba, fresh, ahead, 4)
				require.Equal(t, i%tc.readEvery == 0, read, "sweep %d: read ahead", i)
				for _, s := range []*aheadStore{fresh, ahead} {
					s.settleNamespace("n00")
					s.settleNamespace("n01")
				}
			}
		})
	}
	// A route that would drop below the cap: B = 4, unlimited quotas, n00
	// deep on one route and n01 with 2 rows. The first sweep grants 2 of
	// each and reads at cap 4 + 4·2 = 12; the second plans from that read
	// (n00 counted to 12, less 2) and grants n00 4, which leaves 12 − 6 ≥ 4
	// counted: it passes them on. The third grants n00 4 again, and 12 −
	// 10 < 4: the read no longer shows n00 deep enough for the next sweep
	// to plan as fresh counts would, so the third sweep reads ahead, at
	// 4 + 4·4 = 20, which then serves four sweeps, n00's grants of 16
	// leaving it counted at 4.
	t.Run("deep route below the cap", func(t *testing.T) {
		fresh, ahead := newAheadStore(1), newAheadStore(1)
		for _, s := range []*aheadStore{fresh, ahead} {
			s.enqueue("n00", "q0", 100)
			s.enqueue("n01", "q0", 2)
		}
		cfg := backpressure.Config{BatchSize: 4, DefaultQuota: backpressure.Unlimited}
		bf, ba := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
		var reads []int
		for i := 0; i < 12; i++ {
			ahead.setOrder(i % 3)
			if sweep(t, i, bf, ba, fresh, ahead, 4) {
				reads = append(reads, i)
			}
		}
		require.Equal(t, []int{0, 2, 6, 10}, reads, "the sweeps that read ahead")
	})
}
