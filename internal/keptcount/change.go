package keptcount

import (
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Change is one statement in flight that changes counts: a claim or a
// completion. Begin it before the statement is sent and end it exactly
// once, with the statement's outcome (Claimed, Completed) or with Failed
// when the outcome is unknown. While a change is in flight no read is kept
// (it may or may not have seen the change), but kept values still answer:
// as a read made just before the change would.
type Change struct{ c *Counts }

// Begin starts a change.
func (c *Counts) Begin() Change {
	if c != nil {
		c.mu.Lock()
		c.gen++
		c.busy++
		c.mu.Unlock()
	}
	return Change{c}
}

// Claim runs claim as one change of c: on success its rows are claimed
// (Change.Claimed); on an error, which may follow a commit, nothing is
// known any more (Change.Failed). It returns claim's results unchanged; a
// nil c (kept counts off) only runs claim.
func (c *Counts) Claim(claim func() ([]outbox.Row, error)) ([]outbox.Row, error) {
	ch := c.Begin()
	rows, err := claim()
	if err != nil {
		ch.Failed()
	} else {
		ch.Claimed(rows)
	}
	return rows, err
}

// end ends ch under c.mu, which it returns locked (nil: kept counts off).
func (ch Change) end() *Counts {
	c := ch.c
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.gen++
	c.busy--
	return c
}

// Failed ends a change whose outcome is unknown: every kept value is
// forgotten.
func (ch Change) Failed() {
	if c := ch.end(); c != nil {
		c.forget()
		c.flush()
		c.mu.Unlock()
	}
}

// Claimed ends a claim that took rows (each with its new lease): each is
// one more claimed row of its namespace and one less claimable row of its
// route, and its lease's end is an instant from which the kept values may
// change (the row turns claimable if it is not completed by then).
//
// The claim's snapshot is not known: until the next full read, a notice
// of rows this node has not read makes their namespace stale (the claim
// may have taken some of them). ClaimedSeen is a claim that says it.
func (ch Change) Claimed(rows []outbox.Row) {
	ch.claimed(rows, Snapshot{}, len(rows) > 0)
}

// ClaimedSeen is Claimed for a claim whose statement ran under snap: a
// notice of a transaction snap saw, heard after the claim, may be of rows
// it took, so it makes their namespace stale; any other notice is of rows
// the claim did not see, which the kept counts add.
func (ch Change) ClaimedSeen(rows []outbox.Row, snap Snapshot) {
	ch.claimed(rows, snap, len(rows) > 0 && !snap.known)
}

func (ch Change) claimed(rows []outbox.Row, snap Snapshot, blind bool) {
	c := ch.end()
	if c == nil {
		return
	}
	defer c.mu.Unlock()
	defer c.flush()
	if blind {
		c.claimBlind = true
	}
	if snap.known && len(rows) > 0 {
		c.claimSeen(snap)
	}
	for _, r := range rows {
		route := outbox.Route{Namespace: r.Namespace, TaskQueue: r.TaskQueue}
		c.leases[r.Lease()] = lease{route: route, shard: r.Shard, expires: r.LeaseExpiresAt}
		if !c.counts(r.Shard) {
			continue
		}
		c.before(r.LeaseExpiresAt)
		if c.claimed != nil {
			c.claimed[r.Namespace]++
		}
		c.addPending(route, -1)
	}
}

// Completed ends a completion: completions and their results, index by
// index, and at, an instant no later than the one the statement ran at. A
// completion that took effect is one claimed row less; one that put its
// row back to pending is, after its Delay, one claimable row more. A
// completion of a lease this node did not claim (or no longer knows)
// forgets every kept value.
func (ch Change) Completed(completions []outbox.Completion, results []outbox.Result, at time.Time) {
	c := ch.end()
	if c == nil {
		return
	}
	defer c.mu.Unlock()
	defer c.flush()
	for i, r := range results {
		l, known := c.leases[completions[i].Lease]
		delete(c.leases, completions[i].Lease)
		if r.Err != nil {
			continue
		}
		if !known {
			c.forget()
			return
		}
		if !c.counts(l.shard) {
			continue
		}
		if c.claimed != nil {
			switch c.claimed[l.route.Namespace]--; {
			case c.claimed[l.route.Namespace] < 0:
				c.forget()
				return
			case c.claimed[l.route.Namespace] == 0:
				delete(c.claimed, l.route.Namespace)
			}
		}
		if r.State != outbox.StatePending {
			continue
		}
		if d := completions[i].Delay; d > 0 {
			c.before(at.Add(d))
		} else {
			c.addPending(l.route, 1)
		}
	}
}
