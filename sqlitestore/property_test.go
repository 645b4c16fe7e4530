package sqlitestore

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
	"pgregory.net/rapid"
)

// modelRow is the naive reference's view of one row.
type modelRow struct {
	id              int // enqueue order
	state           outbox.State
	attempts, limit int
	token           int64
	runAt, leaseEnd time.Time
	finishedAt      time.Time
	lastError       string
}

// TestLifecycleMatchesReference drives a store with random enqueues
// (schedules and attempt limits included), claims, batched completions
// with live, stale and expired leases, extensions, requeues, purges and
// clock steps, and checks after every step that every row and the Stats
// equal a naive reference's: a map of rows and the rules of outbox.Row's
// life written out one by one.
func TestLifecycleMatchesReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := storetest.NewClock()
		const lease = time.Second
		s, err := Open(t.Context(), ":memory:", Options{Now: clock.Now, Lease: lease, MaxAttempts: 3})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		ctx := t.Context()
		all, _ := backpressure.AllShards(s.ShardCount())
		model := map[string]*modelRow{}
		nextID := 0
		var leases []outbox.Lease // every lease ever handed out, live or not
		keyGen := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"})

		live := func(r *modelRow) bool { return r.state == outbox.StateClaimed && r.leaseEnd.After(clock.Now()) }
		claimable := func(r *modelRow) bool {
			now := clock.Now()
			return (r.state == outbox.StatePending && !r.runAt.After(now)) || (r.state == outbox.StateClaimed && !r.leaseEnd.After(now))
		}

		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for step := range steps {
			switch op := rapid.IntRange(0, 6).Draw(rt, "op"); op {
			case 0: // enqueue
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				var ms []outbox.Message
				for range n {
					m := outbox.Message{DispatchKey: keyGen.Draw(rt, "key"), Namespace: "n", TaskQueue: "q",
						MaxAttempts: rapid.IntRange(0, 2).Draw(rt, "max")}
					if rapid.Bool().Draw(rt, "scheduled") {
						m.RunAt = clock.Now().Add(time.Duration(rapid.IntRange(1, 3).Draw(rt, "runIn")) * time.Second)
					}
					ms = append(ms, m)
				}
				want := 0
				for _, m := range ms {
					if model[m.DispatchKey] != nil {
						continue
					}
					limit := m.MaxAttempts
					if limit == 0 {
						limit = 3
					}
					runAt := clock.Now()
					if m.RunAt.After(runAt) {
						runAt = m.RunAt
					}
					model[m.DispatchKey] = &modelRow{id: nextID, state: outbox.StatePending, limit: limit, runAt: runAt}
					nextID++
					want++
				}
				if got, err := s.Enqueue(ctx, ms); err != nil || got != want {
					rt.Fatalf("step %d: Enqueue = %d, %v; want %d", step, got, err, want)
				}
			case 1: // unscoped claim
				limit := rapid.IntRange(1, 4).Draw(rt, "limit")
				var want []string
				for k, r := range model {
					if claimable(r) {
						want = append(want, k)
					}
				}
				slices.SortFunc(want, func(a, b string) int { return model[a].id - model[b].id })
				want = want[:min(limit, len(want))]
				rows, err := claimerOf(s).ClaimOutboxRowsUnscoped(ctx, all, limit)
				if err != nil {
					rt.Fatalf("step %d: claim: %v", step, err)
				}
				var got []string
				for _, r := range rows {
					got = append(got, r.DispatchKey)
					m := model[r.DispatchKey]
					m.state, m.token, m.leaseEnd = outbox.StateClaimed, r.Token, clock.Now().Add(lease)
					m.attempts++
					leases = append(leases, r.Lease())
				}
				if !slices.Equal(got, want) {
					rt.Fatalf("step %d: claim(%d) = %v, want the oldest claimable %v", step, limit, got, want)
				}
			case 2: // batched completion of distinct known leases
				if len(leases) == 0 {
					continue
				}
				var cs []outbox.Completion
				seen := map[string]bool{}
				for range rapid.IntRange(1, 4).Draw(rt, "batch") {
					l := rapid.SampledFrom(leases).Draw(rt, "lease")
					if seen[l.DispatchKey] {
						continue
					}
					seen[l.DispatchKey] = true
					cs = append(cs, outbox.Completion{Lease: l, Outcome: outbox.Outcome(rapid.IntRange(1, 3).Draw(rt, "outcome")),
						Delay: time.Duration(rapid.IntRange(0, 2).Draw(rt, "delay")) * time.Second, Error: "e" + strconv.Itoa(step)})
				}
				res, err := s.Complete(ctx, cs)
				if err != nil {
					rt.Fatalf("step %d: Complete: %v", step, err)
				}
				for i, c := range cs {
					m := model[c.DispatchKey]
					if m == nil || !live(m) || m.token != c.Token {
						if !errors.Is(res[i].Err, outbox.ErrLeaseLost) {
							rt.Fatalf("step %d: Complete(%+v) = %+v, want lease lost", step, c, res[i])
						}
						continue
					}
					now := clock.Now()
					switch {
					case c.Outcome == outbox.Settle:
						m.state, m.finishedAt = outbox.StateSettled, now
					case c.Outcome == outbox.DeadLetter || m.attempts >= m.limit:
						m.state, m.finishedAt, m.lastError = outbox.StateDead, now, c.Error
					default:
						m.state, m.runAt, m.lastError = outbox.StatePending, now.Add(c.Delay), c.Error
					}
					if res[i].Err != nil || res[i].State != m.state {
						rt.Fatalf("step %d: Complete(%+v) = %+v, want state %s", step, c, res[i], m.state)
					}
				}
			case 3: // extend one known lease
				if len(leases) == 0 {
					continue
				}
				l := rapid.SampledFrom(leases).Draw(rt, "extend")
				res, err := s.ExtendLeases(ctx, []outbox.Lease{l})
				if err != nil {
					rt.Fatalf("step %d: ExtendLeases: %v", step, err)
				}
				m := model[l.DispatchKey]
				if m != nil && live(m) && m.token == l.Token {
					m.leaseEnd = clock.Now().Add(lease)
					if res[0].Err != nil {
						rt.Fatalf("step %d: extension of a live lease lost", step)
					}
				} else if !errors.Is(res[0].Err, outbox.ErrLeaseLost) {
					rt.Fatalf("step %d: extension of a lost lease = %+v", step, res[0])
				}
			case 4: // requeue
				k := keyGen.Draw(rt, "requeue")
				want := 0
				if m := model[k]; m != nil && m.state == outbox.StateDead {
					m.state, m.attempts, m.runAt, m.finishedAt = outbox.StatePending, 0, clock.Now(), time.Time{}
					want = 1
				}
				if n, err := s.Requeue(ctx, []string{k}); err != nil || n != want {
					rt.Fatalf("step %d: Requeue(%s) = %d, %v; want %d", step, k, n, err, want)
				}
			case 5: // purge settled or dead before now
				dead := rapid.Bool().Draw(rt, "dead")
				st := outbox.StateSettled
				purge := s.PurgeSettled
				if dead {
					st, purge = outbox.StateDead, s.PurgeDead
				}
				var due []string
				for k, r := range model {
					if r.state == st && r.finishedAt.Before(clock.Now()) {
						due = append(due, k)
					}
				}
				slices.SortFunc(due, func(a, b string) int {
					if c := model[a].finishedAt.Compare(model[b].finishedAt); c != 0 {
						return c
					}
					return model[a].id - model[b].id
				})
				limit := rapid.IntRange(1, 3).Draw(rt, "purge")
				due = due[:min(limit, len(due))]
				for _, k := range due {
					delete(model, k)
				}
				if n, err := purge(ctx, clock.Now(), limit); err != nil || n != len(due) {
					rt.Fatalf("step %d: purge %s = %d, %v; want %v", step, st, n, err, due)
				}
			case 6:
				clock.Advance(time.Duration(rapid.IntRange(1, 1500).Draw(rt, "ms")) * time.Millisecond)
			}
			verify(rt, s, model, step, live, claimable)
		}
	})
}

// verify checks every row and the Stats against the reference.
func verify(rt *rapid.T, s *Store, model map[string]*modelRow, step int, live, claimable func(*modelRow) bool) {
	ctx := rt.Context()
	var want outbox.Stats
	for k, m := range model {
		r, err := s.Get(ctx, k)
		if err != nil {
			rt.Fatalf("step %d: Get(%s): %v", step, k, err)
		}
		if r.State != m.state || r.Attempts != m.attempts || r.MaxAttempts != m.limit || r.LastError != m.lastError ||
			!r.FinishedAt.Equal(m.finishedAt) || (m.state == outbox.StatePending && !r.RunAt.Equal(m.runAt)) ||
			(m.attempts > 0 && (r.Token != m.token || !r.LeaseExpiresAt.Equal(m.leaseEnd))) {
			rt.Fatalf("step %d: row %s = %+v, want %+v", step, k, r, *m)
		}
		switch {
		case m.state == outbox.StateSettled:
			want.Settled++
		case m.state == outbox.StateDead:
			want.Dead++
		case live(m):
			want.Claimed++
		case m.state == outbox.StateClaimed:
			want.Expired++
		case claimable(m):
			want.Pending++
		default:
			want.Scheduled++
		}
		want.Total++
	}
	if got, err := s.Stats(ctx); err != nil || got != want {
		rt.Fatalf("step %d: Stats = %+v, %v; want %+v", step, got, err, want)
	}
}
