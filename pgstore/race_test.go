package pgstore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// TestClaimRace makes claimers compete for the same rows: 3 nodes, each
// owning every shard, with 3 claimers each, scoped and unscoped claims
// mixed, on a shared manual clock that the claimers themselves push
// forward, so leases expire while their holders still work on the rows.
// Claimers settle, retry, abandon (as a crashed claimer does) or settle
// too late. Every claim any claimer got is recorded, and afterwards, per
// row in token order, each claim must have ended — by a successful retry,
// or by its lease expiring — before the next one began, no row may be
// claimed after it was settled, and every row must be settled exactly once.
func TestClaimRace(t *testing.T) {
	const (
		nodes, claimersPerNode = 3, 3
		routes, total          = 3, 600
		lease                  = 10 * time.Second
	)
	ctx := t.Context()
	schema := testSchema(t)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64 // nanoseconds after base; only ever moves forward
	now := func() time.Time { return base.Add(time.Duration(clock.Load())) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }

	stores := make([]*pgstore.Store, nodes)
	for i := range stores {
		pool := newPool(t, nil, claimersPerNode+1, "synchronous_commit", "off")
		s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: schema, Lease: lease, Now: now,
			MaxAttempts: 1 << 20}) // every lease runs out now and then here: no row may go dead
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	var msgs []outbox.Message
	for i := 0; i < total; i++ {
		msgs = append(msgs, message(fmt.Sprintf("ns%d", i%routes), "q", fmt.Sprintf("k%03d", i)))
	}
	if n, err := stores[0].Enqueue(ctx, msgs); err != nil || n != total {
		t.Fatalf("Enqueue = %d, %v", n, err)
	}
	all, _ := backpressure.AllShards(stores[0].ShardCount())
	var scopes []backpressure.ScopedClaim
	for r := 0; r < routes; r++ {
		scopes = append(scopes, claim(fmt.Sprintf("ns%d", r), "q", 4))
	}

	type claimed struct {
		key                string
		token              int64
		attempts           int
		claimedAt, expires time.Time
	}
	var (
		mu       sync.Mutex
		claims   []claimed
		ended    = map[int64]string{} // token → "settled" or "retried", when that call succeeded
		settles  = map[string]int{}
		failures []error
		settled  atomic.Int64
		lost     atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, err)
	}
	var wg sync.WaitGroup
	for n, s := range stores {
		for c := 0; c < claimersPerNode; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(n), uint64(c)))
				for settled.Load() < total && ctx.Err() == nil {
					var rows []outbox.Row
					var err error
					if rng.IntN(2) == 0 {
						rows, err = claimerOf(s).ClaimOutboxRowsScoped(ctx, all, scopes)
					} else {
						rows, err = claimerOf(s).ClaimOutboxRowsUnscoped(ctx, all, 8)
					}
					if err != nil {
						fail(fmt.Errorf("node %d claimer %d: claim: %w", n, c, err))
						return
					}
					if len(rows) == 0 { // all taken, delayed or leased: let time pass
						advance(lease / 4)
						continue
					}
					mu.Lock()
					for _, r := range rows {
						claims = append(claims, claimed{r.DispatchKey, r.Token, r.Attempts, r.ClaimedAt, r.LeaseExpiresAt})
					}
					mu.Unlock()
					for _, r := range rows {
						var what string
						switch k := rng.IntN(100); {
						case k < 70:
							what, err = "settled", s.Settle(ctx, r.Lease())
						case k < 88:
							what, err = "retried", s.Retry(ctx, r.Lease(), time.Duration(rng.IntN(2))*time.Second, nil)
						case k < 97: // crashed: the row comes back when its lease expires
							continue
						default: // too slow: the lease runs out first, for every claimer
							advance(lease)
							what, err = "settled", s.Settle(ctx, r.Lease())
						}
						switch {
						case errors.Is(err, outbox.ErrLeaseLost):
							lost.Add(1)
						case err != nil:
							fail(fmt.Errorf("node %d claimer %d: %s %q: %w", n, c, what, r.DispatchKey, err))
							return
						default:
							mu.Lock()
							ended[r.Token] = what
							if what == "settled" {
								settles[r.DispatchKey]++
							}
							mu.Unlock()
							if what == "settled" {
								settled.Add(1)
							}
						}
					}
					advance(lease / 100)
				}
			}()
		}
	}
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("test context ended with %d of %d rows settled", settled.Load(), total)
	}

	byKey := map[string][]claimed{}
	tokens := map[int64]bool{}
	for _, c := range claims {
		if tokens[c.token] {
			t.Errorf("token %d handed out twice", c.token)
		}
		tokens[c.token] = true
		byKey[c.key] = append(byKey[c.key], c)
	}
	overlaps := 0
	for key, cs := range byKey {
		slices.SortFunc(cs, func(a, b claimed) int { return int(a.token - b.token) })
		for i := 1; i < len(cs); i++ {
			prev, next := cs[i-1], cs[i]
			switch {
			case next.attempts != prev.attempts+1:
				t.Errorf("%s: claim %d has attempt %d after attempt %d", key, next.token, next.attempts, prev.attempts)
			case ended[prev.token] == "settled":
				t.Errorf("%s: claimed again (token %d) after it was settled with token %d", key, next.token, prev.token)
			case ended[prev.token] == "retried":
			case next.claimedAt.Before(prev.expires):
				overlaps++
				if overlaps <= 10 {
					t.Errorf("%s: claim %d at %v while claim %d held a live lease until %v", key, next.token, next.claimedAt, prev.token, prev.expires)
				}
			}
		}
	}
	if len(settles) != total {
		t.Errorf("%d distinct rows settled, want %d", len(settles), total)
	}
	for key, n := range settles {
		if n != 1 {
			t.Errorf("row %q settled %d times", key, n)
		}
	}
	var rows, settledRows int
	if err := adminPool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'settled') FROM `+pgx.Identifier{schema}.Sanitize()+`.outbox`).Scan(&rows, &settledRows); err != nil {
		t.Fatal(err)
	}
	if rows != total || settledRows != total {
		t.Errorf("outbox: %d rows, %d settled; want %d of each", rows, settledRows, total)
	}
	if len(claims) <= total || lost.Load() == 0 {
		t.Errorf("%d claims of %d rows and %d lost leases: the claimers did not compete", len(claims), total, lost.Load())
	}
	t.Logf("%d claims of %d rows, %d settles or retries too late, %d overlapping leases", len(claims), total, lost.Load(), overlaps)
}
