package storetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/validate"
	"github.com/outboxkit/backpressure/outbox"
	"pgregory.net/rapid"
)

// testWindowClaim checks a store's window claim (ClaimOutboxWindow): on random states
// (namespaces, routes, priorities, leases live and expired, delayed
// retries, ceilings reached, paused namespaces, part of the shards), a run
// of Sweeps through the capability claims, sweep by sweep, exactly the rows
// a run of Sweeps on an identical store without it claims (the counted
// plan, through the store's Counter if it has one), with the same plans;
// and a call with bad arguments, a cancelled context, or too few
// namespaces with demand claims nothing.
func testWindowClaim[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("MatchesCountedSweeps", func(t *testing.T) {
		via, wc := setupWith[validate.WindowClaimer[R]](t, newHarness)
		used := 0
		matchCounted(t, newHarness, via, withWindow(hideWindow(via.h.Store), countingWindow[R]{wc, &used}))
		if used == 0 {
			t.Errorf("no Sweep claimed a window through ClaimOutboxWindow: the check compared only counted sweeps")
		}
	})

	// A TxSweeper's view must serve the window claim as the store does:
	// whole Sweeps through the store as it is, in its sweep transactions.
	t.Run("MatchesCountedSweepsInTx", func(t *testing.T) {
		via, _ := setupWith[validate.WindowClaimer[R]](t, newHarness)
		if _, ok := via.h.Store.(backpressure.TxSweeper[R]); !ok {
			t.Skip("the store is no TxSweeper")
		}
		matchCounted(t, newHarness, via, via.h.Store)
	})

	t.Run("ClaimsNothing", func(t *testing.T) {
		e, wc := setupWith[validate.WindowClaimer[R]](t, newHarness)
		var keys []string
		for _, n := range []string{"a", "b", "c"} {
			ms := msgs(n, "q", n, 2)
			e.enqueue(ms...)
			keys = append(keys, messageKeys(ms)...)
		}
		before := e.snapshot(keys)
		cancelled, cancel := context.WithCancel(e.ctx)
		cancel()
		for _, c := range []struct {
			name  string
			ctx   context.Context
			n     int
			skip  []string
			fails bool
		}{
			{"Namespaces 0", e.ctx, 0, nil, true},
			{"skip out of order", e.ctx, 1, []string{"b", "a"}, true},
			{"skip twice", e.ctx, 1, []string{"a", "a"}, true},
			{"a cancelled context", cancelled, 1, nil, true},
			{"3 namespaces for 3", e.ctx, 3, nil, false},
			{"2 namespaces, 1 skipped", e.ctx, 2, []string{"b"}, false},
		} {
			rows, grants, err := wc.ClaimOutboxWindow(c.ctx, e.all, backpressure.CountParams{CapPerRoute: 1, Namespaces: c.n}, c.skip, nil)
			switch {
			case c.fails && err == nil:
				t.Errorf("%s: ClaimOutboxWindow returned no error", c.name)
			case c.fails && errors.Is(err, backpressure.ErrNotSupported):
				t.Errorf("%s: ClaimOutboxWindow = %v, want an argument or context error", c.name, err)
			case !c.fails && (err != nil || rows == nil || grants == nil || len(rows)+len(grants) > 0):
				t.Errorf("%s: ClaimOutboxWindow = %d rows, %v, %v; want empty, non-nil slices", c.name, len(rows), grants, err)
			}
		}
		e.unchanged("ClaimOutboxWindow that claims nothing", before, nil)

		rows, grants, err := wc.ClaimOutboxWindow(e.ctx, e.all, backpressure.CountParams{CapPerRoute: 1, After: "a", Namespaces: 2}, nil, map[string]string{})
		if err != nil || len(rows) != 2 || len(grants) != 2 || grants[0].Route != route("b", "q") || grants[1].Route != route("c", "q") {
			t.Fatalf("ClaimOutboxWindow(after a, 2) = %v, %v, %v; want b/q and c/q", e.keys(rows), grants, err)
		}
		if got := e.keys(rows); !slices.Equal(got, []string{"b-0", "c-0"}) {
			t.Errorf("ClaimOutboxWindow(after a, 2) claimed %v, want the oldest of each: [b-0 c-0]", got)
		}
	})
}

// matchCounted checks, on random states, that Sweeps through viaStore (via's
// store, with its window claim) claim what Sweeps on an identical fresh
// store without it claim, sweep by sweep.
func matchCounted[R any](t *testing.T, newHarness func(*testing.T) *Harness[R], via *env[R], viaStore backpressure.OutboxStore[R]) {
	plain := setup(t, newHarness)
	w := &windowTwins[R]{via: via, plain: plain, viaStore: viaStore, plainStore: hideWindow(plain.h.Store)}
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		w.prefix, w.keyN = "w"+strconv.Itoa(cases)+"-", 0
		w.nNS = rapid.IntRange(2, 9).Draw(rt, "namespaces")
		w.enqueue(rt, "messages")
		bv, bp := w.backpressures(rt)
		for step := range rapid.IntRange(1, 14).Draw(rt, "steps") {
			w.step(rt, step, bv, bp)
		}
		for _, e := range []*env[R]{via, plain} {
			e.drain(rt)
		}
	})
}

// windowTwins is matchCounted's two stores, kept identical: via's, swept
// through its window claim, and plain's, swept without it; and the
// messages of the case being checked.
type windowTwins[R any] struct {
	via, plain           *env[R]
	viaStore, plainStore backpressure.OutboxStore[R]
	prefix               string // the case's keys start with it
	keyN                 int    // the keys drawn in the case
	nNS                  int    // the case's namespaces
}

func (w *windowTwins[R]) ns(i int) string { return "n" + strconv.Itoa(i) }

// enqueue draws up to 30 messages (label names the draw) and enqueues them
// in both stores.
func (w *windowTwins[R]) enqueue(rt *rapid.T, label string) {
	tqs := []string{"", "a", "b", "c"}
	ms := make([]outbox.Message, rapid.IntRange(0, 30).Draw(rt, label))
	for i := range ms {
		w.keyN++
		m := msg(w.ns(rapid.IntRange(0, w.nNS-1).Draw(rt, "ns")), rapid.SampledFrom(tqs).Draw(rt, "tq"), w.prefix+strconv.Itoa(w.keyN))
		m.Priority = rapid.IntRange(0, 2).Draw(rt, "priority")
		ms[i] = m
	}
	for _, e := range []*env[R]{w.via, w.plain} {
		if _, err := e.h.Enqueue(e.ctx, ms); err != nil {
			rt.Fatalf("Enqueue: %v", err)
		}
	}
}

// backpressures draws a configuration and owned shards, and returns a
// Backpressure with them for each store.
func (w *windowTwins[R]) backpressures(rt *rapid.T) (*backpressure.Backpressure, *backpressure.Backpressure) {
	cfg := backpressure.Config{
		BatchSize:    rapid.IntRange(1, 4).Draw(rt, "batch size"),
		DefaultQuota: rapid.SampledFrom([]int{1, 2, 3, backpressure.Unlimited}).Draw(rt, "default quota"),
		Quotas:       map[string]int{},
	}
	for i := range w.nNS {
		if q := rapid.IntRange(-1, 3).Draw(rt, "quota"); q >= 0 {
			cfg.Quotas[w.ns(i)] = q
		}
	}
	shards := w.via.all
	if rapid.Bool().Draw(rt, "part of the shards") {
		shards = w.via.fraction(func(s int) bool { return s%2 == 0 })
	}
	bv, err1 := backpressure.New(cfg, shards)
	bp, err2 := backpressure.New(cfg, shards)
	if err1 != nil || err2 != nil {
		rt.Fatal(err1, err2)
	}
	return bv, bp
}

// step sweeps both stores, bv's through the window claim, and requires the
// same claims and rows in claim order; then it makes the same changes to
// both: it settles or retries some of the rows just claimed, moves time,
// and may enqueue more.
func (w *windowTwins[R]) step(rt *rapid.T, step int, bv, bp *backpressure.Backpressure) {
	via, plain := w.via, w.plain
	envs := []*env[R]{via, plain}
	rv, pv, err1 := backpressure.Sweep(via.ctx, bv, w.viaStore)
	rp, pp, err2 := backpressure.Sweep(plain.ctx, bp, w.plainStore)
	if err1 != nil || err2 != nil {
		rt.Fatalf("step %d: Sweep: %v, %v", step, err1, err2)
	}
	for i, rows := range [][]R{rv, rp} {
		if f := envs[i].claimOrderFault(nil, rows); f != "" {
			rt.Fatalf("step %d: the Sweep %s returned %v: %s", step, [...]string{"through the window claim", "counted"}[i], envs[i].keysInOrder(rows), f)
		}
	}
	kv, kp := via.keys(rv), plain.keys(rp)
	if !slices.Equal(pv.Claims, pp.Claims) || !slices.Equal(kv, kp) {
		rt.Fatalf("step %d: through the window claim %v %v; counted %v %v", step, pv.Claims, kv, pp.Claims, kp)
	}
	byKey := [2]map[string]R{{}, {}}
	for i, rows := range [][]R{rv, rp} {
		for _, r := range rows {
			byKey[i][envs[i].h.Key(r)] = r
		}
	}
	for _, k := range kv {
		switch rapid.IntRange(0, 3).Draw(rt, "settle "+k) {
		case 0:
			via.settle(byKey[0][k])
			plain.settle(byKey[1][k])
		case 1:
			d := time.Duration(rapid.IntRange(0, 2).Draw(rt, "delay")) * time.Second
			via.retry(byKey[0][k], d)
			plain.retry(byKey[1][k], d)
		}
	}
	if d := time.Duration(rapid.IntRange(0, 3).Draw(rt, "advance")) * via.h.Lease / 2; d > 0 {
		via.h.Advance(d)
		plain.h.Advance(d)
	}
	if rapid.IntRange(0, 3).Draw(rt, "enqueue more") == 0 {
		w.enqueue(rt, "more messages")
	}
}

// drain settles every row of e's store: it moves time past every lease
// and delay the MatchesCountedSweeps check sets, then claims and settles
// until nothing is claimable, a row at a time.
func (e *env[R]) drain(rt *rapid.T) {
	e.settleClaimable(rt, e.h.Lease+3*time.Second, func(rows []R) {
		for _, r := range rows {
			if err := e.h.Settle(e.ctx, r); err != nil {
				rt.Fatalf("Settle: %v", err)
			}
		}
	})
}

// settleClaimable moves e's clock on by advance, then claims every
// claimable row, route by route by name (not by Sweep, which may be under
// test), and hands each claim's rows to settle, until nothing is claimable.
func (e *env[R]) settleClaimable(rt *rapid.T, advance time.Duration, settle func(rows []R)) {
	e.h.Advance(advance)
	for round := 0; ; round++ {
		counts, err := e.h.Store.CountPendingOutboxRows(e.ctx, e.all, 1000)
		if err != nil {
			rt.Fatalf("CountPendingOutboxRows: %v", err)
		}
		if len(counts) == 0 {
			return
		}
		if round > 100 {
			rt.Fatalf("rows %v still claimable after 100 rounds of claiming and settling them", counts)
		}
		claims := make([]backpressure.ScopedClaim, len(counts))
		for i, c := range counts {
			claims[i] = backpressure.ScopedClaim{Route: c.Route, Limit: 1000}
		}
		rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, e.all, claims)
		if err != nil {
			rt.Fatalf("ClaimOutboxRowsScoped(%v): %v", claims, err)
		}
		settle(rows)
	}
}

// countingWindow counts the calls of a WindowClaimer that claimed rows.
type countingWindow[R any] struct {
	validate.WindowClaimer[R]
	used *int
}

func (c countingWindow[R]) ClaimOutboxWindow(ctx context.Context, shards backpressure.OwnedShardFraction, window backpressure.CountParams, skip []string, routeAfter map[string]string) ([]R, []backpressure.RouteCount, error) {
	rows, grants, err := c.WindowClaimer.ClaimOutboxWindow(ctx, shards, window, skip, routeAfter)
	if len(grants) > 0 {
		*c.used++
	}
	return rows, grants, err
}

// hideWindow returns s with its Counter, if it has one, and no other
// extension: no window claim (nor TxSweeper).
func hideWindow[R any](s backpressure.OutboxStore[R]) backpressure.OutboxStore[R] {
	return hideTx(s)
}

// withWindow returns s (as hideWindow left it) with wc as its
// window claim.
func withWindow[R any](s backpressure.OutboxStore[R], wc validate.WindowClaimer[R]) backpressure.OutboxStore[R] {
	if c, ok := s.(backpressure.Counter); ok {
		return struct {
			backpressure.OutboxStore[R]
			backpressure.Counter
			validate.WindowClaimer[R]
		}{s, c, wc}
	}
	return struct {
		backpressure.OutboxStore[R]
		validate.WindowClaimer[R]
	}{s, wc}
}
