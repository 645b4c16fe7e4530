package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
)

// claimers is how many goroutines claim at once.
const claimers = 8

// testConcurrency checks that concurrent claimers never both hold a live
// lease on one row, and that concurrent enqueues dedup.
func testConcurrency[R any](t *testing.T, newHarness func(*testing.T) *Harness[R]) {
	t.Run("ClaimersNeverShareALease", func(t *testing.T) {
		e := setup(t, newHarness)
		var claims []backpressure.ScopedClaim
		total := 0
		for i := 0; i < 4; i++ {
			ns := "ns" + strconv.Itoa(i)
			e.enqueue(msgs(ns, "q", ns, 60)...)
			total += 60
			claims = append(claims, scope(ns, "q", 3))
		}

		// Phase 1: the clock stands still, so no lease expires and every
		// row must be claimed exactly once. Claimers settle even rows and
		// abandon odd ones.
		first := e.claimConcurrently(claims, total, func(row R) error {
			k := e.h.Key(row)
			if n, _ := strconv.Atoi(k[strings.LastIndexByte(k, '-')+1:]); n%2 == 0 {
				return e.h.Settle(e.ctx, row)
			}
			return nil
		})
		if len(first) != total {
			t.Fatalf("phase 1: %d distinct rows claimed, want %d", len(first), total)
		}

		// Phase 2: the abandoned rows' leases expire; each must be claimed
		// exactly once more, and the phase-1 tokens must no longer settle.
		e.h.Advance(e.h.Lease + time.Millisecond)
		second := e.claimConcurrently(claims, total/2, func(R) error { return nil })
		if len(second) != total/2 {
			t.Errorf("phase 2: %d rows re-claimed, want the %d abandoned ones", len(second), total/2)
		}
		for k := range second {
			if err := e.h.Settle(e.ctx, first[k]); !errors.Is(err, e.h.ErrLeaseLost) {
				t.Errorf("phase 2: Settle(%q) with its phase-1 token = %v, want %v", k, err, e.h.ErrLeaseLost)
			}
			if s := e.inspect(k); s.Attempts != 2 {
				t.Errorf("phase 2: row %q Attempts %d, want 2", k, s.Attempts)
			}
		}
	})

	t.Run("ConcurrentEnqueueDedups", func(t *testing.T) {
		e := setup(t, newHarness)
		var wg sync.WaitGroup
		inserted := make([]int, claimers)
		errs := make([]error, claimers)
		for g := 0; g < claimers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every goroutine enqueues the same 100 keys, in its own order.
				ms := msgs("a", "q", "k", 100)
				for i := range ms {
					j := (i + g*13) % len(ms)
					ms[i], ms[j] = ms[j], ms[i]
				}
				for lo := 0; lo < len(ms); lo += 25 {
					n, err := e.h.Enqueue(e.ctx, ms[lo:lo+25])
					if err != nil {
						errs[g] = err
						return
					}
					inserted[g] += n
				}
			}()
		}
		wg.Wait()
		sum := 0
		for g := range inserted {
			if errs[g] != nil {
				t.Fatalf("goroutine %d: Enqueue: %v", g, errs[g])
			}
			sum += inserted[g]
		}
		if sum != 100 {
			t.Errorf("%d goroutines enqueueing the same 100 keys inserted %d in all, want 100", claimers, sum)
		}
	})
}

// claimConcurrently runs claimers goroutines that claim with claims until
// a claim returns nothing, calling after on each claimed row. It fails the
// test if a row is claimed twice, or if claims return more than bound rows
// in all (a store that never runs dry), and returns every claimed row by
// dispatch key.
func (e *env[R]) claimConcurrently(claims []backpressure.ScopedClaim, bound int, after func(row R) error) map[string]R {
	e.t.Helper()
	var (
		mu   sync.Mutex
		got  = map[string]R{}
		errs []error
		wg   sync.WaitGroup
		seen int // rows returned by all claims, duplicates included
	)
	for g := 0; g < claimers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := e.h.Store.ClaimOutboxRowsScoped(e.ctx, e.all, claims)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("goroutine %d: ClaimOutboxRowsScoped: %w", g, err))
					mu.Unlock()
					return
				}
				if len(rows) == 0 {
					return
				}
				mu.Lock()
				if seen += len(rows); seen > bound {
					errs = append(errs, fmt.Errorf("goroutine %d: claims returned %d rows in all and still do not run dry; want at most %d", g, seen, bound))
					mu.Unlock()
					return
				}
				for _, r := range rows {
					k := e.h.Key(r)
					if _, dup := got[k]; dup {
						errs = append(errs, fmt.Errorf("goroutine %d: row %q claimed while another claim's lease on it is live", g, k))
					}
					got[k] = r
				}
				mu.Unlock()
				for _, r := range rows {
					if err := after(r); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("goroutine %d: row %q: %w", g, e.h.Key(r), err))
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		e.t.Error(err)
	}
	return got
}
