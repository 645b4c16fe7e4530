package pgstore_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"pgregory.net/rapid"
)

// modelRow is the naive reference's row.
type modelRow struct {
	key       string
	state     outbox.State
	attempts  int
	token     int64
	visibleAt time.Time
	leaseEnd  time.Time
	lastError string
}

func (m *modelRow) claimable(now time.Time) bool {
	return (m.state == outbox.StatePending && !m.visibleAt.After(now)) ||
		(m.state == outbox.StateClaimed && !m.leaseEnd.After(now))
}

// TestCompletionMatchesModel drives the store with random claims, batched
// completions (with live, stale and expired leases, repeated across
// calls), lease extensions, requeues and clock steps, and checks every
// result and every row against a naive in-memory reference: the fence
// (token, claimed, live lease) decides each entry alone, a retry past
// MaxAttempts is dead, and nothing else changes.
func TestCompletionMatchesModel(t *testing.T) {
	f := newFixture(t)
	const maxAttempts, rows = 3, 8
	lease := time.Second
	s, err := pgstore.New(f.ctx, f.pool, pgstore.Options{Schema: f.schema, Lease: lease, MaxAttempts: maxAttempts,
		Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{f.schema}.Sanitize() + ".outbox"
	rapid.Check(t, func(rt *rapid.T) {
		if _, err := adminPool.Exec(f.ctx, "TRUNCATE "+table); err != nil {
			rt.Fatal(err)
		}
		model := make([]*modelRow, rows)
		msgs := make([]outbox.Message, rows)
		for i := range model {
			model[i] = &modelRow{key: fmt.Sprintf("k%d", i), state: outbox.StatePending, visibleAt: f.now}
			msgs[i] = message("a", "q", model[i].key)
		}
		if _, err := s.Enqueue(f.ctx, msgs); err != nil {
			rt.Fatal(err)
		}
		byKey := func(k string) *modelRow {
			for _, m := range model {
				if m.key == k {
					return m
				}
			}
			return nil
		}
		var leases []outbox.Lease // every lease ever claimed, live or not
		for step := 0; step < 25; step++ {
			switch rapid.IntRange(0, 4).Draw(rt, "action") {
			case 0: // claim, oldest first
				n := rapid.IntRange(1, rows).Draw(rt, "n")
				got, err := claimerOf(s).ClaimOutboxRowsUnscoped(f.ctx, f.all, n)
				if err != nil {
					rt.Fatal(err)
				}
				var want []string
				for _, m := range model {
					if len(want) < n && m.claimable(f.now) {
						want = append(want, m.key)
					}
				}
				var keys []string
				for _, r := range got {
					keys = append(keys, r.DispatchKey)
					m := byKey(r.DispatchKey)
					m.state, m.attempts, m.token, m.leaseEnd = outbox.StateClaimed, m.attempts+1, r.Token, f.now.Add(lease)
					leases = append(leases, r.Lease())
				}
				if !slices.Equal(keys, want) {
					rt.Fatalf("step %d: claim(%d) = %v, want %v", step, n, keys, want)
				}
			case 1, 2: // complete a batch of distinct keys, any lease
				if len(leases) == 0 {
					continue
				}
				var batch []outbox.Completion
				seen := map[string]bool{}
				for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(leases)-1), 1, 6).Draw(rt, "leases") {
					l := leases[i]
					if seen[l.DispatchKey] {
						continue
					}
					seen[l.DispatchKey] = true
					c := outbox.Completion{Lease: l, Outcome: outbox.Outcome(rapid.IntRange(1, 3).Draw(rt, "outcome")),
						Delay: time.Duration(rapid.IntRange(0, 2000).Draw(rt, "delayMs")) * time.Millisecond}
					if c.Outcome != outbox.Settle {
						c.Error = fmt.Sprintf("e%d", step)
					}
					batch = append(batch, c)
				}
				results, err := s.Complete(f.ctx, batch)
				if err != nil {
					rt.Fatal(err)
				}
				for i, c := range batch {
					m := byKey(c.DispatchKey)
					live := m.state == outbox.StateClaimed && m.token == c.Token && m.leaseEnd.After(f.now)
					var want outbox.State
					if live {
						switch {
						case c.Outcome == outbox.Settle:
							want = outbox.StateSettled
						case c.Outcome == outbox.DeadLetter || m.attempts >= maxAttempts:
							want = outbox.StateDead
						default:
							want, m.visibleAt = outbox.StatePending, f.now.Add(c.Delay)
						}
						m.state = want
						if c.Outcome != outbox.Settle {
							m.lastError = c.Error
						}
					}
					if got := results[i]; got.State != want || (got.Err == nil) != live || (got.Err != nil && !errors.Is(got.Err, outbox.ErrLeaseLost)) {
						rt.Fatalf("step %d: Complete %s of %s (token %d): %+v, want state %q (live %v)", step, c.Outcome, c.DispatchKey, c.Token, got, want, live)
					}
				}
			case 3: // extend every lease ever claimed, one per key, the newest
				var batch []outbox.Lease
				seen := map[string]bool{}
				for i := len(leases) - 1; i >= 0; i-- {
					if !seen[leases[i].DispatchKey] && rapid.Bool().Draw(rt, "extend") {
						seen[leases[i].DispatchKey] = true
						batch = append(batch, leases[i])
					}
				}
				if len(batch) == 0 {
					continue
				}
				results, err := s.ExtendLeases(f.ctx, batch)
				if err != nil {
					rt.Fatal(err)
				}
				for i, l := range batch {
					m := byKey(l.DispatchKey)
					live := m.state == outbox.StateClaimed && m.token == l.Token && m.leaseEnd.After(f.now)
					if live {
						m.leaseEnd = f.now.Add(lease)
					}
					if got := results[i]; (got.Err == nil) != live || (live && !got.LeaseExpiresAt.Equal(m.leaseEnd)) {
						rt.Fatalf("step %d: ExtendLeases %s (token %d): %+v, want live %v", step, l.DispatchKey, l.Token, got, live)
					}
				}
			case 4: // time passes; now and then a dead row is requeued
				f.now = f.now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(rt, "advanceMs")) * time.Millisecond)
				m := model[rapid.IntRange(0, rows-1).Draw(rt, "requeue")]
				n, err := s.Requeue(f.ctx, []string{m.key})
				if err != nil {
					rt.Fatal(err)
				}
				if (n == 1) != (m.state == outbox.StateDead) {
					rt.Fatalf("step %d: Requeue(%s) in state %s moved %d", step, m.key, m.state, n)
				}
				if n == 1 {
					m.state, m.attempts, m.visibleAt = outbox.StatePending, 0, f.now
				}
			}
			for _, m := range model {
				r, err := s.Get(f.ctx, m.key)
				if err != nil {
					rt.Fatal(err)
				}
				if r.State != m.state || r.Attempts != m.attempts || r.Token != m.token || r.LastError != m.lastError ||
					(m.state == outbox.StatePending && !r.RunAt.Equal(m.visibleAt)) ||
					(m.state == outbox.StateClaimed && !r.LeaseExpiresAt.Equal(m.leaseEnd)) {
					rt.Fatalf("step %d: row %+v, want %+v", step, r, *m)
				}
			}
		}
	})
}
