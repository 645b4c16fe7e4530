package keptcount

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Snapshot is a PostgreSQL snapshot, as pg_current_snapshot() prints it
// (xmin:xmax:xip,…): which transactions a statement saw committed. The
// zero Snapshot saw none.
type Snapshot struct {
	known      bool
	xmin, xmax uint64
	xip        []uint64
}

// ParseSnapshot reads pg_current_snapshot()'s text; false if s is not one.
func ParseSnapshot(s string) (Snapshot, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Snapshot{}, false
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || xmin > xmax {
		return Snapshot{}, false
	}
	snap := Snapshot{known: true, xmin: xmin, xmax: xmax}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return Snapshot{}, false
			}
			snap.xip = append(snap.xip, x)
		}
	}
	return snap, true
}

// Sees reports whether a statement under snap saw transaction xact's
// effects, had it committed before (pg_visible_in_snapshot).
func (snap Snapshot) Sees(xact uint64) bool {
	if !snap.known {
		return false
	}
	return xact < snap.xmin || (xact < snap.xmax && !slices.Contains(snap.xip, xact))
}

// Notice is what a committed enqueue's notification says: its transaction
// (pg_current_xact_id) and, per route and shard, the rows it inserted.
type Notice struct {
	Xact uint64
	Rows []Added
}

// Added is an enqueue's rows of one route on one shard: Count claimable at
// once, and Due, the earliest run-at of the others (zero: none).
type Added struct {
	Route outbox.Route
	Shard int
	Count int
	Due   time.Time
}

// maxLogged is how many notices Counts remembers for the reads in flight
// (see Refreshed): a read that spans more is not kept.
const maxLogged = 1024

// logged is a notice heard, numbered in the order heard.
type logged struct {
	seq uint64
	n   Notice
}

// Notified hands c a notification that says which rows an enqueue's
// committed transaction added. The kept pending counts add them at once,
// without a read, unless the read that last set the namespace's counts
// already saw that transaction (its snapshot), or a claim since may have
// taken some of those rows (its snapshot saw the transaction, or a claim
// that did not report its snapshot ran since the last full read): then
// the namespace is stale. While a change is in flight the notice waits
// for it to end (a claim's snapshot decides). Each notice is also
// remembered for the reads in flight, which add it after they return if
// their snapshot did not see it. A delayed row's run-at is an instant from
// which the kept values may change.
func (c *Counts) Notified(n Notice) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, logged{seq: c.seq, n: n})
	c.seq++
	if len(c.log) > maxLogged {
		c.log = slices.Delete(c.log, 0, len(c.log)-maxLogged/2)
	}
	if c.busy > 0 {
		c.deferred = append(c.deferred, n)
		return
	}
	c.apply(n)
}

// apply adds notice n to the kept values; c.mu held.
func (c *Counts) apply(n Notice) {
	for _, a := range n.Rows {
		if !c.counts(a.Shard) {
			continue
		}
		if !a.Due.IsZero() {
			c.before(a.Due)
		}
		ns := a.Route.Namespace
		snap := c.snapOf(ns)
		if a.Count == 0 || c.pending == nil || c.stale[ns] || snap.Sees(n.Xact) {
			continue
		}
		if !snap.known || c.claimBlind || c.claimsSaw(n.Xact) {
			c.markStale(ns)
			continue
		}
		c.addPending(a.Route, a.Count)
	}
}

// flush applies the notices heard while changes were in flight, once none
// is; c.mu held.
func (c *Counts) flush() {
	if c.busy > 0 {
		return
	}
	for _, n := range c.deferred {
		c.apply(n)
	}
	c.deferred = nil
}

// snapOf is the snapshot of the read that last set namespace ns's pending
// counts; c.mu held.
func (c *Counts) snapOf(ns string) Snapshot {
	if s, ok := c.nsSnap[ns]; ok {
		return s
	}
	return c.readSnap
}

// markStale makes ns's pending counts unknown until read; c.mu held.
func (c *Counts) markStale(ns string) {
	if c.stale == nil {
		c.stale = map[string]bool{}
	}
	c.stale[ns] = true
}

// remembers reports whether c still holds every notice heard since t;
// c.mu held.
func (c *Counts) remembers(t Ticket) bool {
	return t.seq == c.seq || len(c.log) > 0 && c.log[0].seq <= t.seq
}

// replay adds, to the routes of the namespaces a read with ticket t and
// snapshot snap just set (in; nil: every namespace), the notices heard
// since t that snap did not see (c.remembers(t)); c.mu held. A notice
// heard before t is of a transaction that committed before the read
// began, which snap saw.
func (c *Counts) replay(t Ticket, snap Snapshot, in map[string]bool) {
	for _, l := range c.log {
		if l.seq < t.seq || snap.Sees(l.n.Xact) {
			continue
		}
		for _, a := range l.n.Rows {
			ns := a.Route.Namespace
			if !c.counts(a.Shard) || (in != nil && !in[ns]) {
				continue
			}
			if !a.Due.IsZero() {
				c.before(a.Due)
			}
			switch {
			case a.Count == 0 || c.pending == nil || c.stale[ns]:
			case !snap.known: // the read may or may not have seen it
				c.markStale(ns)
			default:
				c.addPending(a.Route, a.Count)
			}
		}
	}
}

// maxClaimSnaps is how many claims' snapshots Counts keeps apart; with
// more (claims running side by side), a claim counts as one that reported
// none.
const maxClaimSnaps = 8

// claimSeen records the snapshot of a claim that took rows; c.mu held. A
// snapshot whose xmin is at least another's xmax sees every transaction
// that one saw, which it then replaces.
func (c *Counts) claimSeen(snap Snapshot) {
	c.claimSnaps = slices.DeleteFunc(c.claimSnaps, func(old Snapshot) bool { return snap.xmin >= old.xmax })
	if len(c.claimSnaps) >= maxClaimSnaps {
		c.claimSnaps, c.claimBlind = nil, true
		return
	}
	c.claimSnaps = append(c.claimSnaps, snap)
}

// claimsSaw reports whether a claim since the last full read saw xact;
// c.mu held.
func (c *Counts) claimsSaw(xact uint64) bool {
	for _, s := range c.claimSnaps {
		if s.Sees(xact) {
			return true
		}
	}
	return false
}
