package keptcount

import (
	"maps"
	"slices"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// Claimed returns the kept claimed counts on shards at now, as
// CountClaimedOutboxRows would (a fresh map, namespaces with none left
// out), and true; false when they are not known.
func (c *Counts) Claimed(shards outbox.OwnedShardFraction, now time.Time) (map[string]int, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fresh(shards, now) || c.claimed == nil {
		return nil, false
	}
	return maps.Clone(c.claimed), true
}

// Pending returns the kept pending counts on shards at now, each capped at
// capPerRoute, as CountPendingOutboxRows would, and true; false when one
// of them is not known (to that depth).
func (c *Counts) Pending(shards outbox.OwnedShardFraction, now time.Time, capPerRoute int) ([]outbox.RouteCount, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.freshPending(shards, now) || len(c.stale) > 0 {
		return nil, false
	}
	return c.capped(capPerRoute, func(string) bool { return true })
}

// Window returns the kept pending counts of the window p describes
// (p.Namespaces ≥ 1: the first p.Namespaces namespaces with claimable
// rows in the cyclic order after p.After, all their routes, each capped
// at p.CapPerRoute), as a Counter's CountOutboxRows would, and true;
// false when they are not known.
func (c *Counts) Window(shards outbox.OwnedShardFraction, now time.Time, p outbox.CountParams) ([]outbox.RouteCount, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.freshPending(shards, now) || len(c.stale) > 0 {
		return nil, false
	}
	var names []string
	for r := range c.pending {
		names = append(names, r.Namespace)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	// Cyclic order after p.After: those above it, then the rest.
	i, _ := slices.BinarySearch(names, p.After)
	if i < len(names) && names[i] == p.After {
		i++
	}
	names = slices.Concat(names[i:], names[:i])
	in := make(map[string]bool, min(len(names), p.Namespaces)) // p.Namespaces may be huge: a window of every namespace
	for _, n := range names[:min(len(names), p.Namespaces)] {
		in[n] = true
	}
	return c.capped(p.CapPerRoute, func(n string) bool { return in[n] })
}

// Stale returns, when the kept pending counts on shards at now are known
// but for some namespaces, those namespaces (sorted): the ones notified or
// touched since, and those with a route known only to a depth below
// capPerRoute. A read of their pending counts at capPerRoute, handed to
// Refreshed, then completes them. false: a full read is needed.
func (c *Counts) Stale(shards outbox.OwnedShardFraction, now time.Time, capPerRoute int) ([]string, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.freshPending(shards, now) || c.claimed == nil {
		return nil, false
	}
	names := slices.Collect(maps.Keys(c.stale))
	for r, v := range c.pending {
		if v.atLeast && v.n < capPerRoute && !c.stale[r.Namespace] {
			names = append(names, r.Namespace)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), true
}

// freshPending reports whether kept pending counts for shards may answer
// at now; c.mu held.
func (c *Counts) freshPending(shards outbox.OwnedShardFraction, now time.Time) bool {
	return c.fresh(shards, now) && c.listening && c.pending != nil
}

// capped returns the kept routes of the namespaces in takes, capped at
// capPerRoute, in Route.Compare order; false if one is known only to a
// depth below the cap. c.mu held.
func (c *Counts) capped(capPerRoute int, takes func(string) bool) ([]outbox.RouteCount, bool) {
	out := []outbox.RouteCount{}
	for r, v := range c.pending {
		if !takes(r.Namespace) {
			continue
		}
		if v.atLeast && v.n < capPerRoute {
			return nil, false
		}
		out = append(out, outbox.RouteCount{Route: r, Count: min(v.n, capPerRoute)})
	}
	slices.SortFunc(out, func(a, b outbox.RouteCount) int { return a.Route.Compare(b.Route) })
	return out, true
}
