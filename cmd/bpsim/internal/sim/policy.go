package sim

import (
	"slices"

	"github.com/outboxkit/backpressure"
)

// Policy is how a node chooses what to claim in a sweep.
type Policy string

// The three policies bpsim compares.
const (
	// Unscoped claims one batch of the oldest claimable rows on the node's
	// shards, whoever they belong to: what most dispatchers do today.
	Unscoped Policy = "unscoped"
	// RoundRobin splits the batch into equal shares per task queue (route)
	// with pending rows, in rotating order, ignoring quotas: fair per queue,
	// not per tenant, so a tenant with many queues takes most of the batch.
	RoundRobin Policy = "round-robin"
	// Backpressure runs each node as a dispatch.Dispatcher over
	// backpressure.SweepN: weighted shares per tenant first, then per queue
	// within a tenant, each tenant capped at its per-node ceiling of
	// concurrently claimed rows.
	Backpressure Policy = "backpressure"
)

// Policies lists the policies in the order bpsim runs and reports them.
var Policies = []Policy{Unscoped, RoundRobin, Backpressure}

// Describe says in one line what the policy does.
func (p Policy) Describe() string {
	switch p {
	case Unscoped:
		return "one oldest-first batch per sweep, whoever owns the rows"
	case RoundRobin:
		return "an equal share of the batch per task queue, quotas ignored"
	case Backpressure:
		return "dispatch.Dispatcher: weighted share per tenant, capped at its ceiling"
	}
	return string(p)
}

// routeRobin is the per-route round-robin planner: the design the library
// rejects, kept here to be measured against. It is not safe for concurrent
// use; each node has its own.
type routeRobin struct {
	cursor backpressure.Route // last route that got a unit
	set    bool
}

// plan shares budget over the routes with pending rows, one unit at a time
// in rotating order starting after the cursor, each route capped by its
// pending count. The shares differ by at most one between routes that are
// not capped, and the cursor carries the remainder to the next sweep.
func (rr *routeRobin) plan(pending []backpressure.RouteCount, budget int) []backpressure.ScopedClaim {
	routes := slices.Clone(pending)
	routes = slices.DeleteFunc(routes, func(r backpressure.RouteCount) bool { return r.Count <= 0 })
	if len(routes) == 0 || budget <= 0 {
		return nil
	}
	slices.SortFunc(routes, func(a, b backpressure.RouteCount) int { return a.Route.Compare(b.Route) })
	start := 0
	if rr.set {
		start, _ = slices.BinarySearchFunc(routes, rr.cursor, func(r backpressure.RouteCount, c backpressure.Route) int {
			return r.Route.Compare(c)
		})
		if start < len(routes) && routes[start].Route == rr.cursor {
			start++
		}
	}
	limits := make([]int, len(routes))
	left := budget
	for left > 0 {
		gave := false
		for k := range routes {
			i := (start + k) % len(routes)
			if left == 0 {
				break
			}
			if limits[i] < routes[i].Count {
				limits[i]++
				left--
				gave = true
				rr.cursor, rr.set = routes[i].Route, true
			}
		}
		if !gave {
			break
		}
	}
	var claims []backpressure.ScopedClaim
	for i, r := range routes {
		if limits[i] > 0 {
			claims = append(claims, backpressure.ScopedClaim{Route: r.Route, Limit: limits[i]})
		}
	}
	return claims
}
