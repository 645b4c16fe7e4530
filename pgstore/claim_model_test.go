package pgstore_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
	"pgregory.net/rapid"
)

// claimModelRow is TestScopedClaimMatchesModel's reference row: its route,
// priority, enqueue rank (the claims' age order), state and times.
type claimModelRow struct {
	key, ns, tq string
	priority    int
	rank        int
	state       outbox.State
	token       int64
	visibleAt   time.Time
	leaseEnd    time.Time
}

// TestScopedClaimMatchesModel drives the store with random enqueues (two
// namespaces × two task queues, priorities, run-ats), scoped claims over
// random routes and limits, completions (settle, or retry with a delay)
// and clock steps across lease ends, and checks every claim against a
// naive reference: per route, the claimable rows — pending and due, or
// claimed under an expired lease — highest priority first, then oldest,
// the first limit of them. Since version 13 the claims find the two kinds
// in two indexes (pending rows in outbox_route_oldest_idx, expired leases
// in outbox_live_lease_idx) and merge them; the reference has one list.
func TestScopedClaimMatchesModel(t *testing.T) {
	f := newFixture(t)
	lease := time.Second
	s, err := pgstore.New(f.ctx, f.pool, pgstore.Options{Schema: f.schema, Lease: lease, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{f.schema}.Sanitize() + ".outbox"
	routes := [][2]string{{"a", "q0"}, {"a", "q1"}, {"b", "q0"}, {"b", "q1"}}
	rapid.Check(t, func(rt *rapid.T) {
		if _, err := adminPool.Exec(f.ctx, "TRUNCATE "+table); err != nil {
			rt.Fatal(err)
		}
		var model []*claimModelRow
		byKey := map[string]*claimModelRow{}
		for step := range 30 {
			switch rapid.IntRange(0, 4).Draw(rt, "action") {
			case 0: // enqueue a batch
				var batch []outbox.Message
				for range rapid.IntRange(1, 4).Draw(rt, "n") {
					r := routes[rapid.IntRange(0, len(routes)-1).Draw(rt, "route")]
					m := &claimModelRow{key: fmt.Sprintf("k%d", len(model)), ns: r[0], tq: r[1], rank: len(model),
						priority: rapid.IntRange(-1, 1).Draw(rt, "priority"), state: outbox.StatePending, visibleAt: f.now}
					msg := message(m.ns, m.tq, m.key)
					msg.Priority = m.priority
					if rapid.Bool().Draw(rt, "later") {
						m.visibleAt = f.now.Add(500 * time.Millisecond)
						msg.RunAt = m.visibleAt
					}
					model, byKey[m.key] = append(model, m), m
					batch = append(batch, msg)
				}
				if _, err := s.Enqueue(f.ctx, batch); err != nil {
					rt.Fatal(err)
				}
			case 1: // a scoped claim over distinct routes
				claimScopedStep(rt, f, s, model, byKey, routes, lease, step)
			case 2: // settle or retry some claimed rows, live or not
				completeStep(rt, f, s, model)
			default: // time passes: leases end, run-ats come
				f.now = f.now.Add(time.Duration(rapid.SampledFrom([]int{100, 600, 1100}).Draw(rt, "ms")) * time.Millisecond)
			}
		}
	})
}

// claimScopedStep is one claim of TestScopedClaimMatchesModel, checked
// against the reference and applied to it.
func claimScopedStep(rt *rapid.T, f *fixture, s *pgstore.Store, model []*claimModelRow, byKey map[string]*claimModelRow, routes [][2]string, lease time.Duration, step int) {
	var scopes []backpressure.ScopedClaim
	want := map[string]bool{}
	for i, r := range routes {
		if !rapid.Bool().Draw(rt, fmt.Sprint("scope", i)) {
			continue
		}
		limit := rapid.IntRange(1, 3).Draw(rt, "limit")
		scopes = append(scopes, claim(r[0], r[1], limit))
		var due []*claimModelRow
		for _, m := range model {
			if m.ns == r[0] && m.tq == r[1] && ((m.state == outbox.StatePending && !m.visibleAt.After(f.now)) ||
				(m.state == outbox.StateClaimed && !m.leaseEnd.After(f.now))) {
				due = append(due, m)
			}
		}
		slices.SortFunc(due, func(a, b *claimModelRow) int {
			return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.rank, b.rank))
		})
		for _, m := range due[:min(limit, len(due))] {
			want[m.key] = true
		}
	}
	if len(scopes) == 0 {
		return
	}
	got, err := claimerOf(s).ClaimOutboxRowsScoped(f.ctx, f.all, scopes)
	if err != nil {
		rt.Fatal(err)
	}
	for _, r := range got {
		if !want[r.DispatchKey] {
			rt.Fatalf("step %d: claim %v took %s, not among %v", step, scopes, r.DispatchKey, want)
		}
		delete(want, r.DispatchKey)
		m := byKey[r.DispatchKey]
		m.state, m.token, m.leaseEnd = outbox.StateClaimed, r.Token, f.now.Add(lease)
	}
	if len(want) > 0 {
		rt.Fatalf("step %d: claim %v left %v", step, scopes, want)
	}
}

// completeStep settles or retries (with a delay) a random few of the rows
// the reference holds claimed, with their last tokens; an expired lease
// loses, as the reference says.
func completeStep(rt *rapid.T, f *fixture, s *pgstore.Store, model []*claimModelRow) {
	var batch []outbox.Completion
	var rows []*claimModelRow
	for _, m := range model {
		if m.state == outbox.StateClaimed && rapid.Bool().Draw(rt, "complete") {
			c := outbox.Completion{Lease: outbox.Lease{DispatchKey: m.key, Token: m.token}, Outcome: outbox.Settle}
			if rapid.Bool().Draw(rt, "retry") {
				c.Outcome, c.Delay, c.Error = outbox.Retry, time.Duration(rapid.SampledFrom([]int{0, 700}).Draw(rt, "delayMs"))*time.Millisecond, "e"
			}
			batch, rows = append(batch, c), append(rows, m)
		}
	}
	if len(batch) == 0 {
		return
	}
	res, err := s.Complete(f.ctx, batch)
	if err != nil {
		rt.Fatal(err)
	}
	for i, m := range rows {
		live := m.leaseEnd.After(f.now)
		switch {
		case !live && res[i].State != "":
			rt.Fatalf("Complete of %s under an expired lease = %q, want lost", m.key, res[i].State)
		case !live:
		case batch[i].Outcome == outbox.Settle:
			m.state = outbox.StateSettled
		default:
			m.state, m.visibleAt = outbox.StatePending, f.now.Add(batch[i].Delay)
		}
		if live && res[i].State != m.state {
			rt.Fatalf("Complete of %s = %q, want %q", m.key, res[i].State, m.state)
		}
	}
}
