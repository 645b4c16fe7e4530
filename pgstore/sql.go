package pgstore

import "strings"

// statements holds the store's SQL with the quoted schema filled in. Every
// statement takes the clock as $1: coalesce($1, now()) is the injected time,
// or the database's when the store has no clock.
type statements struct {
	enqueue, countClaimed, countPending, countPendingWindow string
	// The claims of a store with kept counts, which also return the
	// statement's snapshot on every row (see Store.claim).
	claimScopedSeen, claimUnscopedSeen                       string
	sweepCount, sweepCountWindow, claimScoped, claimUnscoped string
	complete, extend, get, stats, listDead, requeue          string
	purgeSettled, purgeDead                                  string
	capCount                                                 string // see enqueue.go
	enqueueTx, identity                                      string // see enqueue.go

	// The claims of a Membership's store (see fenced), and the
	// membership's own statements (see membership_sql.go).
	claimScopedFenced, claimUnscopedFenced string
	claimWindow, claimWindowFenced         string // see window_claim.go
	membership                             membershipStatements
}

// expand replaces {schema} in a statement template with the quoted schema
// identifier. The schema name is the only text ever pasted into SQL, and only
// after validateSchema accepted it; every value travels as a parameter.
func expand(quotedSchema, template string) string {
	return strings.ReplaceAll(template, "{schema}", quotedSchema)
}

// prepare is the statement table: every entry of statements, its template
// named (lifecycle_sql.go, claim_sql.go, count_sql.go, window_claim.go,
// enqueue.go, membership_sql.go), with the quoted schema filled in.
func prepare(quotedSchema string) statements {
	x := func(s string) string { return expand(quotedSchema, s) }
	return statements{
		enqueue: x(enqueueSQL),

		// $2: owned shards, $3: all shards owned.
		countClaimed:       x(claimedCounts("$3::bool")),
		countPending:       x(pendingCounts.with + pendingCounts.sel + pendingCounts.order),
		countPendingWindow: x(windowCounts.with + windowCounts.sel + windowCounts.order),
		// countPending's and countPendingWindow's parameters and counts,
		// and countClaimed's counts, in one statement (see sweepCounts).
		sweepCount:       x(sweepCounts(pendingCounts, "$4::bool")),
		sweepCountWindow: x(sweepCounts(windowCounts, "$6::bool")),

		claimScoped:       x(claimScopedSQL),
		claimUnscoped:     x(claimUnscopedSQL),
		claimScopedSeen:   x(claimScopedSQL + claimSnapshot),
		claimUnscopedSeen: x(claimUnscopedSQL + claimSnapshot),
		complete:          x(completeSQL),
		extend:            x(extendSQL),
		get:               x(getSQL),
		stats:             x(statsSQL),
		listDead:          x(listDeadSQL),
		requeue:           x(requeueSQL),
		purgeSettled:      x(purge("settled")), // served by outbox_settled_idx
		purgeDead:         x(purge("dead")),    // served by outbox_finished_dead_idx
		capCount:          x(capCountSQL),
		enqueueTx:         x(enqueueTxSQL),
		identity:          x(identitySQL),

		// $8 (scoped) or $6 (unscoped): the epochs of the shards in $3,
		// then the node.
		claimScopedFenced:   x(fenced(claimScopedSQL, "$8", "$9")),
		claimUnscopedFenced: x(fenced(claimUnscopedSQL, "$6", "$7")),
		claimWindow:         x(windowClaimSQL(false)),
		claimWindowFenced:   x(windowClaimSQL(true)),
		membership:          prepareMembership(x),
	}
}
