package backpressure_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// memWindowStore adds a naive Counter to memStore, as an in-process store
// would have one: windows and full counts, but not the claimed counts
// (ErrNotSupported); a window is the full counts filtered to the window's
// namespaces.
type memWindowStore struct {
	*memStore
	windows     int // window counts served
	unsupported int // requests answered with ErrNotSupported
}

func (s *memWindowStore) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	if p.Claimed {
		s.unsupported++
		return nil, nil, backpressure.ErrNotSupported
	}
	pending, err := s.pending(ctx, f, p)
	return nil, pending, err
}

// pending returns the pending counts p describes.
func (s *memWindowStore) pending(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) ([]backpressure.RouteCount, error) {
	if p.CapPerRoute < 1 || p.Namespaces < 0 {
		return nil, fmt.Errorf("invalid params %+v", p)
	}
	all, err := s.CountPendingOutboxRows(ctx, f, p.CapPerRoute)
	if err != nil || p.Namespaces == 0 {
		return all, err
	}
	s.windows++
	var names []string // sorted, since all is
	for _, rc := range all {
		if len(names) == 0 || names[len(names)-1] != rc.Route.Namespace {
			names = append(names, rc.Route.Namespace)
		}
	}
	start, _ := slices.BinarySearch(names, p.After)
	if start < len(names) && names[start] == p.After {
		start++
	}
	keep := map[string]bool{}
	for k := 0; k < len(names) && k < p.Namespaces; k++ {
		keep[names[(start+k)%len(names)]] = true
	}
	return slices.DeleteFunc(all, func(rc backpressure.RouteCount) bool { return !keep[rc.Route.Namespace] }), nil
}

// memFullCounter is memWindowStore serving every CountParams, as a store
// over a network would: the claimed counts too, by the separate calls.
type memFullCounter struct {
	*memWindowStore
	combined, combinedWindows int // counts with Claimed, and of them windows
}

func (s *memFullCounter) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	if !p.Claimed {
		return s.memWindowStore.CountOutboxRows(ctx, f, p)
	}
	s.combined++
	claimed, err := s.CountClaimedOutboxRows(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	if p.Namespaces > 0 {
		s.combinedWindows++
		s.windows-- // counted below, but not a window of its own
	}
	pending, err := s.pending(ctx, f, p)
	return claimed, pending, err
}

// memClaimedCounter is a Counter that serves only full counts with the
// claimed counts: every other request is ErrNotSupported, so Sweep must
// fall back from a window to full counts, and count claimed rows itself
// when it asks for a window alone.
type memClaimedCounter struct {
	*memWindowStore
}

func (s *memClaimedCounter) CountOutboxRows(ctx context.Context, f backpressure.OwnedShardFraction, p backpressure.CountParams) (map[string]int, []backpressure.RouteCount, error) {
	if !p.Claimed || p.Namespaces > 0 {
		s.unsupported++
		return nil, nil, backpressure.ErrNotSupported
	}
	claimed, err := s.CountClaimedOutboxRows(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	pending, err := s.pending(ctx, f, p)
	return claimed, pending, err
}

// referenceSweep is the naive sweep SweepN must match claim for claim:
// uncapped full counts, Backpressure.Plan with the budget, one claim.
func referenceSweep(b *backpressure.Backpressure, s *memStore, budget int) ([]memRow, backpressure.Plan, error) {
	ctx := context.Background()
	claimed, err := s.CountClaimedOutboxRows(ctx, b.OwnedShards())
	if err != nil {
		return nil, backpressure.Plan{}, err
	}
	pending, err := s.CountPendingOutboxRows(ctx, b.OwnedShards(), math.MaxInt)
	if err != nil {
		return nil, backpressure.Plan{}, err
	}
	p, err := b.Plan(backpressure.Snapshot{Claimed: claimed, Pending: pending, Budget: budget})
	if err != nil || len(p.Claims) == 0 {
		return nil, p, err
	}
	rows, err := s.ClaimOutboxRowsScoped(ctx, b.OwnedShards(), p.Claims)
	return rows, p, err
}

// TestSweepSameClaimsAsReference runs five outboxes in lockstep: one
// swept by referenceSweep, one by Sweep with full counts only, one by Sweep
// on a store that counts windows (a Counter without Claimed), one on a
// store that also reads both counts in one call (a Counter serving every
// CountParams), and one whose Counter serves only full counts with Claimed
// (every window request is ErrNotSupported). Over random enqueues, settles, lease
// expiries, claims by another claimer, shards moving to and from the node,
// config changes (SetConfig: batch size, quotas, weights) and quotas that
// hold some namespaces at their ceiling, each sweep with a
// random budget (SweepN's n, often the batch size), every sweep must claim
// exactly the same rows in all five, whatever shallow counts, windows and
// guessed window sizes Sweep used to get there.
func TestSweepSameClaimsAsReference(t *testing.T) {
	windowCalls, windowedPlans, shallowPlans, reconfigured := 0, 0, 0, 0
	budgeted, windowedBudgeted := 0, 0 // sweeps with a budget below B, and of them windowed
	combinedWindows, recounts, combinedWindowed := 0, 0, 0
	refused := 0 // windows the claimed-only counter refused
	rapid.Check(t, func(t *rapid.T) {
		nShards := rapid.IntRange(1, 8).Draw(t, "shards")
		ref := newMemStore(nShards)
		plain, win := newMemStore(nShards), &memWindowStore{memStore: newMemStore(nShards)}
		comb := &memFullCounter{memWindowStore: &memWindowStore{memStore: newMemStore(nShards)}}
		only := &memClaimedCounter{memWindowStore: &memWindowStore{memStore: newMemStore(nShards)}}
		stores := []*memStore{ref, plain, win.memStore, comb.memStore, only.memStore}
		var owned []int
		for s := 0; s < nShards; s++ {
			if rapid.IntRange(0, 3).Draw(t, "own") > 0 {
				owned = append(owned, s)
			}
		}
		f, err := backpressure.NewOwnedShardFraction(owned, nShards)
		if err != nil {
			t.Fatal(err)
		}
		cfg := backpressure.Config{
			BatchSize:    rapid.IntRange(1, 5).Draw(t, "batch"),
			DefaultQuota: rapid.SampledFrom([]int{backpressure.Unlimited, 1, 2, 4}).Draw(t, "defaultQuota"),
			Quotas:       map[string]int{"n03": rapid.IntRange(0, 3).Draw(t, "q3"), "n07": 0},
		}
		cfg.Apportionment = rapid.SampledFrom([]backpressure.Apportionment{backpressure.ApportionCeil, backpressure.ApportionShares}).Draw(t, "apportionment")
		bp, err1 := backpressure.New(cfg, f)
		bw, err2 := backpressure.New(cfg, f)
		br, err3 := backpressure.New(cfg, f)
		bc, err4 := backpressure.New(cfg, f)
		bo, err5 := backpressure.New(cfg, f)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
			t.Fatal(err1, err2, err3, err4, err5)
		}
		nNS := rapid.IntRange(1, 14).Draw(t, "namespaces")
		for step := 0; step < 30; step++ {
			switch rapid.IntRange(0, 7).Draw(t, "action") {
			case 0, 1:
				ns := fmt.Sprintf("n%02d", rapid.IntRange(0, nNS-1).Draw(t, "ns"))
				tq := fmt.Sprint("q", rapid.IntRange(0, 2).Draw(t, "tq"))
				switch rapid.IntRange(0, 19).Draw(t, "oddRoute") {
				case 0:
					tq = "" // the default task queue: valid
				case 1:
					ns = "" // invalid: held, never claimed
				case 2:
					tq = "\xff" // invalid
				}
				n := rapid.IntRange(1, 4).Draw(t, "n")
				for _, s := range stores {
					s.enqueue(ns, tq, n)
				}
			case 2:
				ns := fmt.Sprintf("n%02d", rapid.IntRange(0, nNS-1).Draw(t, "settleNS"))
				for _, s := range stores {
					s.settleNamespace(ns)
				}
			case 3:
				d := time.Duration(rapid.IntRange(0, 90).Draw(t, "secs")) * time.Second
				for _, s := range stores {
					s.now = s.now.Add(d)
				}
			case 4:
				// Another claimer takes rows the Backpressures do not know
				// of: the combined counter's guessed window may fall short.
				claim := []backpressure.ScopedClaim{{
					Route: backpressure.Route{Namespace: fmt.Sprintf("n%02d", rapid.IntRange(0, nNS-1).Draw(t, "otherNS")), TaskQueue: fmt.Sprint("q", rapid.IntRange(0, 2).Draw(t, "otherTQ"))},
					Limit: rapid.IntRange(1, 3).Draw(t, "otherN"),
				}}
				for _, s := range stores {
					if _, err := s.ClaimOutboxRowsScoped(context.Background(), f, claim); err != nil {
						t.Fatal(err)
					}
				}
			case 6:
				// The membership system moves shards: every Backpressure
				// gets the same new fraction.
				var moved []int
				for s := 0; s < nShards; s++ {
					if rapid.IntRange(0, 3).Draw(t, "ownNow") > 0 {
						moved = append(moved, s)
					}
				}
				if f, err = backpressure.NewOwnedShardFraction(moved, nShards); err != nil {
					t.Fatal(err)
				}
				for _, b := range []*backpressure.Backpressure{bp, bw, br, bc, bo} {
					if err := b.SetOwnedShards(f); err != nil {
						t.Fatal(err)
					}
				}
			case 7:
				// Live reconfiguration: every Backpressure gets the same
				// new config, weights now and then (a weighted config
				// counts no window).
				cfg = backpressure.Config{
					BatchSize:    rapid.IntRange(1, 5).Draw(t, "newBatch"),
					DefaultQuota: rapid.SampledFrom([]int{backpressure.Unlimited, 1, 2, 4}).Draw(t, "newDefaultQuota"),
					Quotas:       map[string]int{"n03": rapid.IntRange(0, 3).Draw(t, "newQ3"), fmt.Sprintf("n%02d", rapid.IntRange(0, nNS-1).Draw(t, "pausedNS")): 0},
				}
				if rapid.Bool().Draw(t, "weights") {
					cfg.Weights = map[string]int{fmt.Sprintf("n%02d", rapid.IntRange(0, nNS-1).Draw(t, "heavyNS")): rapid.IntRange(1, 4).Draw(t, "weight")}
				}
				for _, b := range []*backpressure.Backpressure{bp, bw, br, bc, bo} {
					if err := b.SetConfig(cfg); err != nil {
						t.Fatal(err)
					}
				}
				reconfigured++
			case 5:
				n := cfg.BatchSize
				if rapid.Bool().Draw(t, "smallerBudget") {
					n = rapid.IntRange(1, cfg.BatchSize).Draw(t, "budget")
					budgeted++
				}
				r0, p0, err0 := referenceSweep(br, ref, n)
				r1, p1, err1 := backpressure.SweepN(context.Background(), bp, plain, n)
				r2, p2, err2 := backpressure.SweepN(context.Background(), bw, win, n)
				windowsBefore := comb.windows
				r3, p3, err3 := backpressure.SweepN(context.Background(), bc, comb, n)
				r4, p4, err4 := backpressure.SweepN(context.Background(), bo, only, n)
				if err0 != nil || err1 != nil || err2 != nil || err3 != nil || err4 != nil {
					t.Fatalf("step %d: %v, %v, %v, %v, %v", step, err0, err1, err2, err3, err4)
				}
				if !slices.Equal(p0.Claims, p1.Claims) || !slices.Equal(p0.Claims, p2.Claims) || !slices.Equal(p0.Claims, p3.Claims) || !slices.Equal(p0.Claims, p4.Claims) {
					t.Fatalf("step %d: claims differ:\nreference %v\nfull      %v (count cap %d)\nwindowed  %v (windowed=%v, count cap %d)\ncombined  %v (windowed=%v, count cap %d)\nclaimed   %v (count cap %d)",
						step, p0.Claims, p1.Claims, p1.CountCap(), p2.Claims, p2.Windowed, p2.CountCap(), p3.Claims, p3.Windowed, p3.CountCap(), p4.Claims, p4.CountCap())
				}
				// Falling back from every window, the claimed-only
				// counter reads what full counts with claimed read: the
				// full-count sweep's plan, reports and all.
				if !reflect.DeepEqual(p1, p4) {
					t.Fatalf("step %d: plans differ:\nfull    %+v\nclaimed %+v", step, p1, p4)
				}
				if p3.Windowed {
					combinedWindowed++
					// The same window as the window store's, however
					// large a window the combined count read.
					if p2.Windowed && !slices.Equal(p2.Namespaces, p3.Namespaces) {
						t.Fatalf("step %d: reports differ:\nwindow store %+v\ncombined     %+v", step, p2.Namespaces, p3.Namespaces)
					}
				}
				if comb.windows > windowsBefore {
					recounts++
				}
				for _, r := range [][]memRow{r1, r2, r3, r4} {
					if len(r) != len(r0) {
						t.Fatalf("step %d: claimed %d rows, reference %d", step, len(r), len(r0))
					}
					for i := range r {
						if r[i].Key != r0[i].Key {
							t.Fatalf("step %d: row %d: %s, reference %s", step, i, r[i].Key, r0[i].Key)
						}
					}
				}
				// The full-count sweep's reports: exact unless Capped, and
				// then lower bounds.
				for _, r := range p1.Namespaces {
					want, _ := p0.Namespace(r.Namespace)
					if r.Pending > want.Pending || (!r.Capped && r.Pending != want.Pending) || r.Granted != want.Granted {
						t.Fatalf("step %d: report %+v, reference %+v", step, r, want)
					}
				}
				if p2.Windowed {
					windowedPlans++
					if n < cfg.BatchSize {
						windowedBudgeted++
					}
				}
				for _, p := range []backpressure.Plan{p0, p1, p2, p3} {
					if p.Budget != n || p.Granted() > n {
						t.Fatalf("step %d: SweepN(%d) planned budget %d, granted %d", step, n, p.Budget, p.Granted())
					}
				}
				if p1.CountCap() < bp.PendingCountCap() && len(p1.Claims) > 0 {
					shallowPlans++
				}
				if p1.Windowed {
					t.Fatalf("step %d: a store without windows made a windowed plan", step)
				}
			}
		}
		windowCalls += win.windows
		combinedWindows += comb.combinedWindows
		if only.windows != 0 {
			t.Fatalf("the claimed-only counter served %d windows", only.windows)
		}
		refused += only.unsupported
	})
	// The generator must reach the case that matters: sweeps that counted
	// a window with more namespaces beyond it.
	if windowCalls == 0 || windowedPlans == 0 {
		t.Fatalf("no sweep counted a window (%d window counts, %d windowed plans)", windowCalls, windowedPlans)
	}
	if shallowPlans == 0 {
		t.Fatal("no sweep claimed from a shallow count")
	}
	if reconfigured == 0 {
		t.Fatal("no run changed its config")
	}
	// Windowed sweeps with a smaller budget are rare here (about one run
	// in twenty has none); TestSweepWindowedSmallerBudget makes them.
	t.Logf("%d sweeps with a budget below B, %d of them windowed", budgeted, windowedBudgeted)
	if budgeted == 0 {
		t.Fatal("no sweep had a budget below B")
	}
	// And for the combined counter: windows read with the claimed counts
	// and windowed plans from them. (Windows counted again when the guess
	// fell short are rarer: TestCombinedCountGuessFallsShort makes one.)
	t.Logf("combined counts: %d windows, %d windowed plans, %d windows counted again", combinedWindows, combinedWindowed, recounts)
	if combinedWindows == 0 || combinedWindowed == 0 {
		t.Fatalf("combined counts: %d windows, %d windowed plans", combinedWindows, combinedWindowed)
	}
	if refused == 0 {
		t.Fatal("the claimed-only counter never refused a window")
	}
}

// TestSweepWindowedSmallerBudget: with more namespaces than a window holds,
// sweeps asked for fewer rows than B count a window sized for their own
// budget and claim exactly what the naive reference sweep claims from
// uncapped counts, sweep after sweep, budgets varying.
func TestSweepWindowedSmallerBudget(t *testing.T) {
	ref, win := newMemStore(1), &memWindowStore{memStore: newMemStore(1)}
	for i := 0; i < 12; i++ {
		for _, tq := range []string{"a", "b"} {
			ref.enqueue(fmt.Sprintf("n%02d", i), tq, 6)
			win.enqueue(fmt.Sprintf("n%02d", i), tq, 6)
		}
	}
	cfg := backpressure.Config{BatchSize: 5, DefaultQuota: backpressure.Unlimited}
	br, bw := newTestBP(t, cfg, 1), newTestBP(t, cfg, 1)
	windowed := 0
	for i, n := range []int{5, 2, 3, 1, 4, 2, 2, 3, 1, 5, 3, 2} {
		r0, p0, err0 := referenceSweep(br, ref, n)
		r1, p1, err1 := backpressure.SweepN(context.Background(), bw, win, n)
		require.NoError(t, err0)
		require.NoError(t, err1)
		require.Equal(t, p0.Claims, p1.Claims, "sweep %d (budget %d)", i, n)
		require.Equal(t, keys(r0), keys(r1), "sweep %d (budget %d)", i, n)
		if p1.Windowed && n < cfg.BatchSize {
			windowed++
		}
	}
	require.Positive(t, windowed, "no sweep with a budget below B was windowed")
}

// TestSweepWindowedKeepsRouteCursors: with more namespaces than the route
// cursors' pruning threshold, a windowed sweep must not forget the route
// cursors of namespaces beyond its window. 100 namespaces of two task
// queues, B = 1, every claim settled at once: after one full rotation the
// windowed and the full-count sweeps must still pick the same queue.
func TestSweepWindowedKeepsRouteCursors(t *testing.T) {
	plain, win := newMemStore(1), &memWindowStore{memStore: newMemStore(1)}
	for i := 0; i < 100; i++ {
		for _, tq := range []string{"a", "b"} {
			plain.enqueue(fmt.Sprintf("n%03d", i), tq, 5)
			win.enqueue(fmt.Sprintf("n%03d", i), tq, 5)
		}
	}
	all, _ := backpressure.AllShards(1)
	cfg := backpressure.Config{BatchSize: 1, DefaultQuota: backpressure.Unlimited}
	bp, _ := backpressure.New(cfg, all)
	bw, _ := backpressure.New(cfg, all)
	windowed := 0
	for step := 0; step < 450; step++ {
		r1, p1, err1 := backpressure.Sweep(context.Background(), bp, plain)
		r2, p2, err2 := backpressure.Sweep(context.Background(), bw, win)
		if err1 != nil || err2 != nil {
			t.Fatalf("step %d: %v, %v", step, err1, err2)
		}
		if !slices.Equal(p1.Claims, p2.Claims) {
			t.Fatalf("step %d: full %v, windowed %v (windowed=%v)", step, p1.Claims, p2.Claims, p2.Windowed)
		}
		if p2.Windowed {
			windowed++
		}
		for _, r := range r1 {
			plain.settleNamespace(r.Namespace)
		}
		for _, r := range r2 {
			win.settleNamespace(r.Namespace)
		}
	}
	if windowed < 400 {
		t.Fatalf("only %d of 450 sweeps were windowed", windowed)
	}
}

// TestCombinedCountGuessFallsShort: a window counted with the claimed
// counts (CountParams.Claimed) is sized before the sweep knows its claimed
// counts. When another claimer has taken rows
// the Backpressure does not know of, more namespaces are at their ceiling
// than the window allowed for: the sweep must count its window again and
// still claim what a sweep on a plain window store claims. Otherwise the
// one CountOutboxRows is the sweep's only count.
func TestCombinedCountGuessFallsShort(t *testing.T) {
	win := &memWindowStore{memStore: newMemStore(1)}
	comb := &memFullCounter{memWindowStore: &memWindowStore{memStore: newMemStore(1)}}
	for i := 0; i < 50; i++ {
		win.enqueue(fmt.Sprintf("n%02d", i), "q", 5)
		comb.enqueue(fmt.Sprintf("n%02d", i), "q", 5)
	}
	all, _ := backpressure.AllShards(1)
	cfg := backpressure.Config{BatchSize: 5, DefaultQuota: 2}
	bw, _ := backpressure.New(cfg, all)
	bc, _ := backpressure.New(cfg, all)
	ctx := context.Background()
	sweep := func(step int) backpressure.Plan {
		t.Helper()
		_, p1, err1 := backpressure.Sweep(ctx, bw, win)
		_, p2, err2 := backpressure.Sweep(ctx, bc, comb)
		if err1 != nil || err2 != nil {
			t.Fatalf("step %d: %v, %v", step, err1, err2)
		}
		if !slices.Equal(p1.Claims, p2.Claims) {
			t.Fatalf("step %d: window store %v, combined %v", step, p1.Claims, p2.Claims)
		}
		return p2
	}
	sweep(0) // a full count: no namespace seen yet
	for step := 1; step <= 3; step++ {
		calls, windows := comb.combined, comb.windows
		if p := sweep(step); !p.Windowed {
			t.Fatalf("step %d: not windowed", step)
		}
		if comb.combined != calls+1 || comb.windows != windows {
			t.Fatalf("step %d: %d combined counts and %d more windows, want 1 and none", step, comb.combined-calls, comb.windows-windows)
		}
	}
	// Another claimer fills ten namespaces to their ceiling of 2.
	for i := 30; i < 40; i++ {
		claim := []backpressure.ScopedClaim{{Route: backpressure.Route{Namespace: fmt.Sprintf("n%02d", i), TaskQueue: "q"}, Limit: 2}}
		for _, s := range []*memStore{win.memStore, comb.memStore} {
			if _, err := s.ClaimOutboxRowsScoped(ctx, all, claim); err != nil {
				t.Fatal(err)
			}
		}
	}
	windows := comb.windows
	if p := sweep(4); !p.Windowed {
		t.Fatal("step 4: not windowed")
	}
	if comb.windows != windows+1 {
		t.Fatalf("step 4: %d more windows counted, want 1: the guessed window was too small", comb.windows-windows)
	}
}

// TestCombinedCountWindowsWithPausedNamespace: a paused namespace (quota 0)
// is counted once in the k a combined count's window is sized for, as in
// the window store's: counted twice, the guessed window outgrew the
// namespaces seen, and the combined sweeps never windowed while the window
// store's did.
func TestCombinedCountWindowsWithPausedNamespace(t *testing.T) {
	win := &memWindowStore{memStore: newMemStore(1)}
	comb := &memFullCounter{memWindowStore: &memWindowStore{memStore: newMemStore(1)}}
	for _, ns := range []string{"a", "b", "p"} {
		win.enqueue(ns, "q", 50)
		comb.enqueue(ns, "q", 50)
	}
	all, _ := backpressure.AllShards(1)
	cfg := backpressure.Config{BatchSize: 1, DefaultQuota: backpressure.Unlimited, Quotas: map[string]int{"p": 0}}
	bw, _ := backpressure.New(cfg, all)
	bc, _ := backpressure.New(cfg, all)
	for i := 0; i < 6; i++ {
		_, p1, err1 := backpressure.Sweep(context.Background(), bw, win)
		_, p2, err2 := backpressure.Sweep(context.Background(), bc, comb)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !slices.Equal(p1.Claims, p2.Claims) || p1.Windowed != p2.Windowed {
			t.Fatalf("sweep %d: window store %v (windowed %v), combined %v (windowed %v)", i, p1.Claims, p1.Windowed, p2.Claims, p2.Windowed)
		}
		if i > 0 && !p2.Windowed {
			t.Fatalf("sweep %d: not windowed", i)
		}
	}
}
