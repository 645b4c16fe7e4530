// Package keptcount keeps a store's claimed and pending counts from what its
// own statements already tell it, so that a count nothing can have changed
// is answered without reading the database.
//
// A [Counts] is one store instance's (one node's) bookkeeping. The store
// asks it first ([Counts.Claimed], [Counts.Pending], [Counts.Window]); on
// a miss it reads the database, of the namespaces [Counts.Stale] names or
// of all, under a [Counts.Ticket], and hands the read back
// ([Counts.Refreshed], [Counts.RefreshedClaimed]). Every statement that
// changes counts is a [Change] ([Counts.Begin]) that reports its outcome:
// a claim the rows it took ([Change.Claimed]), a completion what it
// settled, retried or dead-lettered ([Change.Completed]), and one whose
// outcome is unknown makes everything unknown ([Change.Failed]). An
// enqueue or a notification names the namespaces it added rows to
// ([Counts.Touched]); a change the store cannot see forgets everything
// ([Counts.Forget]).
//
// A kept value answers only while it is exact: an answer equals what a
// full count would return at that instant (one taken while a change is in
// flight equals a count read just before that change), except that rows
// the node cannot see being added — another process's enqueue before its
// notification arrives — may be missing from the pending counts until then.
// The mechanism, and why each rule is conservative, is in docs/pgstore.md,
// "Kept counts".
package keptcount

import (
	"sync"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Margin is how long before an instant at which a kept value may change
// the value stops answering: it absorbs the difference between the
// store's clock and the database's, and the time a read takes.
const Margin = 20 * time.Millisecond

// value is a route's kept pending count: exactly n, or at least n when the
// read that found it was capped at n.
type value struct {
	n       int
	atLeast bool
}

// lease is what the node knows of a row it claimed: its route and when its
// lease ends.
type lease struct {
	route   outbox.Route
	shard   int
	expires time.Time
}

// Counts is the kept counts of one store instance. The nil *Counts keeps
// nothing: every question misses and every report is ignored, which is how
// a store turns kept counts off. A non-nil Counts is safe for concurrent
// use.
//
// Invariants, under mu: when claimed is non-nil, claimed[n] is the rows of
// namespace n on shards with a live lease; when pending is non-nil, for
// every namespace n not in stale, the routes of n in pending are exactly
// those with claimable rows and their counts (exact, or a lower bound when
// atLeast); both hold until until, and pending only while listening.
type Counts struct {
	interval time.Duration // the longest between two full reads

	mu        sync.Mutex
	shards    outbox.OwnedShardFraction // what the values count; set means known
	set       bool
	gen       uint64 // bumped when a change begins or ends, or knowledge is lost
	busy      int    // changes begun and not yet ended
	listening bool   // the store hears every enqueue's notification
	claimed   map[string]int
	pending   map[outbox.Route]value
	stale     map[string]bool // namespaces whose pending counts must be read
	until     time.Time       // no value answers from here on
	leases    map[outbox.Lease]lease

	// What the notices (Notified) need: the snapshots of the reads that
	// set the pending counts (the last full read's; a later partial
	// read's, per namespace), the claims' since the last full read, whether a claim that
	// reported none ran since the last full read, the notices heard
	// (numbered by seq, for the reads in flight) and those waiting for
	// the changes in flight to end.
	readSnap   Snapshot
	nsSnap     map[string]Snapshot
	claimSnaps []Snapshot // since the last full read, none seeing all another saw
	claimBlind bool
	seq        uint64
	log        []logged
	deferred   []Notice
}

// New returns kept counts that a full read serves for at most interval
// (> 0), after which every count reads the database again.
func New(interval time.Duration) *Counts {
	return &Counts{interval: interval, leases: map[outbox.Lease]lease{}}
}

// Listening tells c whether the store hears every enqueue's notification
// from now on. Pending counts are kept only while it does; a change either
// way forgets them (notifications may have been missed).
func (c *Counts) Listening(on bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.listening = on
	c.pending, c.stale = nil, nil
}

// Touched says rows may have been added to the pending rows of namespaces
// (an enqueue that committed, a notification naming them); nil or empty
// namespaces means any namespace. Their pending counts are read again
// before they answer.
func (c *Counts) Touched(namespaces []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(namespaces) == 0 || c.pending == nil {
		c.pending, c.stale = nil, nil
		return
	}
	if c.stale == nil {
		c.stale = map[string]bool{}
	}
	for _, n := range namespaces {
		c.stale[n] = true
	}
}

// Forget makes every kept value unknown: something changed rows in a way
// the store could not observe (a statement whose outcome is unknown, an
// operator's change, a lost connection).
func (c *Counts) Forget() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forget()
}

func (c *Counts) forget() {
	c.gen++
	c.claimed, c.pending, c.stale = nil, nil, nil
}

// fresh reports whether values for shards may answer at now; c.mu held.
// Other shards than those the values count forget them.
func (c *Counts) fresh(shards outbox.OwnedShardFraction, now time.Time) bool {
	if !c.set || !c.shards.Equal(shards) {
		if c.set {
			c.forget()
		}
		return false
	}
	return now.Before(c.until)
}

// counts reports whether the kept values count the rows of shard; c.mu
// held.
func (c *Counts) counts(shard int) bool { return c.set && c.shards.Owns(shard) }

// before makes at an instant from which the kept values may change; c.mu
// held.
func (c *Counts) before(at time.Time) {
	if t := at.Add(-Margin); t.Before(c.until) {
		c.until = t
	}
}

// addPending adds d to route's kept pending count; c.mu held. A count that
// can no longer be known exactly (a lower bound below 1, or below 0) makes
// its namespace stale.
func (c *Counts) addPending(route outbox.Route, d int) {
	if c.pending == nil || c.stale[route.Namespace] {
		return
	}
	v := c.pending[route]
	v.n += d
	switch {
	case v.n < 0, v.atLeast && v.n < 1:
		if c.stale == nil {
			c.stale = map[string]bool{}
		}
		c.stale[route.Namespace] = true
	case v.n == 0:
		delete(c.pending, route)
	default:
		c.pending[route] = v
	}
}
