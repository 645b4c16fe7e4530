package keptcount

import (
	"maps"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Ticket is taken before a read of the database and handed back with its
// result: the read is kept only if nothing changed, began or was forgotten
// in between (the read may or may not have seen such a change).
type Ticket struct {
	gen  uint64
	busy bool
	at   time.Time
	seq  uint64 // the next notice's number
}

// Ticket returns the ticket of a read that starts now (the store's clock,
// taken before the read is sent).
func (c *Counts) Ticket(now time.Time) Ticket {
	if c == nil {
		return Ticket{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Ticket{gen: c.gen, busy: c.busy > 0, at: now, seq: c.seq}
}

// kept reports whether a read with ticket t may be kept; c.mu held.
func (c *Counts) kept(t Ticket) bool { return t.gen == c.gen && !t.busy }

// RouteRead is one route in a read handed to Refreshed: its claimable rows
// on the owned shards, capped at the read's cap (0 for a route with
// unsettled rows and none claimable), and Due, the earliest instant after
// the read at which one of its rows not claimable then becomes claimable
// (a delayed row's run-at, a lease's end; zero: none).
type RouteRead struct {
	Route outbox.Route
	Count int
	Due   time.Time
}

// Refreshed hands back a read made with ticket t on shards under snapshot
// snap (the zero Snapshot when unknown): the claimed
// counts on shards, and the routes of namespaces (nil: every namespace;
// then each route with unsettled rows) read at capPerRoute. It keeps them,
// with the notices heard since t that snap did not see added,
// and returns the pending counts a full count at capPerRoute gives, and
// true, when the read may be kept (nothing changed since t) and the other
// namespaces' kept counts are known to that depth; else false, and it
// keeps nothing. A full read is always valid to answer with by itself; a
// read of some namespaces answers only through Refreshed.
func (c *Counts) Refreshed(t Ticket, snap Snapshot, shards outbox.OwnedShardFraction, claimed map[string]int, namespaces []string, routes []RouteRead, capPerRoute int) ([]outbox.RouteCount, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.kept(t) || !c.remembers(t) {
		return nil, false
	}
	if namespaces == nil {
		c.shards, c.set = shards, true
		c.pending, c.stale = map[outbox.Route]value{}, nil
		c.until = t.at.Add(c.interval)
		c.prune(t.at)
		c.readSnap, c.nsSnap, c.claimSnaps, c.claimBlind = snap, nil, nil, false
	} else if !c.freshPending(shards, t.at) || c.claimed == nil {
		return nil, false
	}
	c.gen++
	c.claimed = maps.Clone(claimed)
	c.listeningOrNot()
	for _, n := range namespaces {
		delete(c.stale, n)
	}
	in := make(map[string]bool, len(namespaces))
	for _, n := range namespaces {
		in[n] = true
	}
	for r := range c.pending {
		if in[r.Namespace] {
			delete(c.pending, r)
		}
	}
	for _, r := range routes {
		if !r.Due.IsZero() {
			c.before(r.Due)
		}
		if r.Count > 0 && c.pending != nil {
			c.pending[r.Route] = value{n: r.Count, atLeast: r.Count >= capPerRoute}
		}
	}
	if namespaces == nil {
		in = nil
	} else {
		if c.nsSnap == nil {
			c.nsSnap = map[string]Snapshot{}
		}
		for _, n := range namespaces {
			c.nsSnap[n] = snap
		}
	}
	c.replay(t, snap, in)
	// A namespace touched since the caller's Stale (a notification between
	// its Stale and its Ticket) is not in this read: its kept routes are
	// from before, so nothing answers until it is read too.
	if c.pending == nil || len(c.stale) > 0 {
		return nil, false
	}
	return c.capped(capPerRoute, func(string) bool { return true })
}

// listeningOrNot drops the pending counts just read when the store does
// not hear notifications: they would go stale unseen. c.mu held.
func (c *Counts) listeningOrNot() {
	if !c.listening {
		c.pending, c.stale = nil, nil
	}
}

// RefreshedClaimed hands back a read of the claimed counts alone on shards,
// made with ticket t; it keeps them when nothing changed since t and the
// kept values count shards.
func (c *Counts) RefreshedClaimed(t Ticket, shards outbox.OwnedShardFraction, claimed map[string]int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept(t) && c.fresh(shards, t.at) {
		c.gen++
		c.claimed = maps.Clone(claimed)
	}
}

// prune drops the leases that ended well before now: no completion of
// theirs can take effect any more. c.mu held.
func (c *Counts) prune(now time.Time) {
	for l, v := range c.leases {
		if v.expires.Before(now.Add(-time.Minute)) {
			delete(c.leases, l)
		}
	}
}
