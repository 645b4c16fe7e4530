package pgstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/internal/keptcount"
	"github.com/outboxkit/backpressure/outbox"
)

// Kept counts (docs/pgstore.md, "Kept counts"): the store answers the
// planner's counts from internal/keptcount when nothing can have changed
// them, and otherwise reads them with kept_sql.go's statements, which also
// say when each route's counts change next by themselves. The claims and
// Complete report what they did; Enqueue, the notifications the store
// hears (their payload names the namespaces) and Requeue make namespaces
// stale; a lost connection, a failed claim or completion, forgets
// everything. A Membership's fenced view keeps nothing (kept is nil): its
// shards may change under it between two statements.

// keptStatements are kept_sql.go's statements, expanded for a schema.
type keptStatements struct{ all, namespaces string }

func prepareKept(quoted string) keptStatements {
	return keptStatements{all: expand(quoted, keptAllSQL), namespaces: expand(quoted, keptNamespacesSQL)}
}

// newKept returns the kept counts Options.RecountInterval asks for: nil
// (none) unless it is positive.
func newKept(interval time.Duration) *keptcount.Counts {
	if interval <= 0 {
		return nil
	}
	return keptcount.New(interval)
}

// keptNow is the instant kept counts are judged at: the injected clock's,
// else the process's.
func (s *Store) keptNow() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// maxStaleRead is the most namespaces a read of stale namespaces names;
// with more, the store reads every namespace.
const maxStaleRead = 1000

// countKept returns the counts p asks for (its parameters checked) from
// the kept counts, reading and keeping what they lack; ok false (and no
// error) for a window they do not hold, which the caller reads as before.
func (s *Store) countKept(ctx context.Context, op string, shards backpressure.OwnedShardFraction, p backpressure.CountParams) (claimed map[string]int, pending []backpressure.RouteCount, ok bool, err error) {
	k, now := s.kept, s.keptNow()
	if p.Claimed {
		if claimed, ok = k.Claimed(shards, now); !ok && p.Namespaces > 0 {
			return nil, nil, false, nil
		}
	}
	if p.Namespaces > 0 {
		pending, ok = k.Window(shards, now, p)
		return claimed, pending, ok, nil
	}
	if pending, ok = k.Pending(shards, now, p.CapPerRoute); ok && (claimed != nil || !p.Claimed) {
		return claimed, pending, true, nil
	}
	claimed, pending, err = s.readKept(ctx, op, shards, p.CapPerRoute, now)
	if !p.Claimed {
		claimed = nil
	}
	return claimed, pending, err == nil, err
}

// readKept reads the claimed counts and the pending counts at capPerRoute,
// of the stale namespaces when the kept counts know the others, else of
// all, and keeps what it read.
func (s *Store) readKept(ctx context.Context, op string, shards backpressure.OwnedShardFraction, capPerRoute int, now time.Time) (map[string]int, []backpressure.RouteCount, error) {
	k := s.kept
	owned, all, _, err := s.ownedShards(op, shards)
	if err != nil {
		return nil, nil, err
	}
	if names, ok := k.Stale(shards, now, capPerRoute); ok && len(names) <= maxStaleRead {
		t := k.Ticket(now)
		claimed, routes, snap, err := s.keptRead(ctx, s.keptSQL.namespaces, s.clock(), owned, int64(capPerRoute), all, names)
		if err != nil {
			return nil, nil, opError(op, err)
		}
		if pending, ok := k.Refreshed(t, snap, shards, claimed, names, routes, capPerRoute); ok {
			return claimed, pending, nil
		}
		now = s.keptNow()
	}
	t := k.Ticket(now)
	claimed, routes, snap, err := s.keptRead(ctx, s.keptSQL.all, s.clock(), owned, int64(capPerRoute), all)
	if err != nil {
		return nil, nil, opError(op, err)
	}
	k.Refreshed(t, snap, shards, claimed, nil, routes, capPerRoute)
	pending := []backpressure.RouteCount{}
	for _, r := range routes {
		if r.Count > 0 {
			pending = append(pending, backpressure.RouteCount{Route: r.Route, Count: r.Count})
		}
	}
	return claimed, pending, nil
}

// keptRead runs one of kept_sql.go's statements with args. A snapshot it
// cannot read is the zero Snapshot, which saw no notice.
func (s *Store) keptRead(ctx context.Context, sql string, args ...any) (map[string]int, []keptcount.RouteRead, keptcount.Snapshot, error) {
	var (
		claimed map[string]int
		routes  []keptcount.RouteRead
		snap    keptcount.Snapshot
		kind    int32
		r       keptcount.RouteRead
		n       int64
		due     *time.Time
	)
	err := s.queryNoJIT(ctx, anyLoss, sql, args, func(rows pgx.Rows) error {
		claimed, routes, snap = map[string]int{}, nil, keptcount.Snapshot{}
		_, err := pgx.ForEachRow(rows, []any{&kind, &r.Route.Namespace, &r.Route.TaskQueue, &n, &due}, func() error {
			switch kind {
			case 0:
				claimed[r.Route.Namespace] = int(n)
				return nil
			case 2:
				snap, _ = keptcount.ParseSnapshot(r.Route.Namespace)
				return nil
			}
			r.Count, r.Due = int(n), time.Time{}
			if due != nil {
				r.Due = *due
			}
			routes = append(routes, r)
			return nil
		})
		return err
	})
	return claimed, routes, snap, err
}

// countClaimedKept is CountClaimedOutboxRows from the kept counts, or a
// read of the claimed counts that it keeps.
func (s *Store) countClaimedKept(shards backpressure.OwnedShardFraction, read func() (map[string]int, error)) (map[string]int, error) {
	now := s.keptNow()
	if claimed, ok := s.kept.Claimed(shards, now); ok {
		return claimed, nil
	}
	t := s.kept.Ticket(now)
	claimed, err := read()
	if err == nil {
		s.kept.RefreshedClaimed(t, shards, claimed)
	}
	return claimed, err
}

// claimSnapshot is the column a kept store's claims add to their rows:
// the statement's snapshot, which tells the notices of rows the claim may
// have taken (it saw their transaction) from the others
// (keptcount.Change.ClaimedSeen).
const claimSnapshot = `, pg_current_snapshot()::text`

// seenClaim returns the form of claim statement sql that returns its
// snapshot, for a store with kept counts; "" for none (no kept counts, a
// Membership's fenced claim, the window claim).
func (s *Store) seenClaim(sql string) string {
	if s.kept == nil || s.fence != nil {
		return ""
	}
	switch sql {
	case s.sql.claimScoped:
		return s.sql.claimScopedSeen
	case s.sql.claimUnscoped:
		return s.sql.claimUnscopedSeen
	}
	return ""
}

// claimKeptSeen is keptcount.Counts.Claim for a claim statement that returns its
// snapshot on each row, into the string claim is given.
func (s *Store) claimKeptSeen(claim func(snap *string) ([]outbox.Row, error)) ([]outbox.Row, error) {
	ch := s.kept.Begin()
	var text string
	rows, err := claim(&text)
	if err != nil {
		ch.Failed()
		return rows, err
	}
	snap, _ := keptcount.ParseSnapshot(text) // unknown when no row came back: then it took none
	ch.ClaimedSeen(rows, snap)
	return rows, nil
}

// heard hands a notification's payload to the kept counts: an enqueue's
// transaction and rows per route and shard (notifyPayload) are added
// without a read (Counts.Notified); the JSON array of the namespaces it
// added rows to makes those stale; any other payload, as an older
// version's empty one, makes every namespace stale.
func heard(k *keptcount.Counts, payload string) {
	if k == nil {
		return
	}
	if n, ok := noticeOf(payload); ok {
		k.Notified(n)
		return
	}
	var names []string
	if json.Unmarshal([]byte(payload), &names) != nil {
		names = nil
	}
	k.Touched(names)
}

// noticeOf reads notifyPayload's object; false for any other payload.
func noticeOf(payload string) (keptcount.Notice, bool) {
	var p struct {
		X string              `json:"x"`
		R [][]json.RawMessage `json:"r"`
	}
	if len(payload) == 0 || payload[0] != '{' || json.Unmarshal([]byte(payload), &p) != nil {
		return keptcount.Notice{}, false
	}
	x, err := strconv.ParseUint(p.X, 10, 64)
	if err != nil || len(p.R) == 0 {
		return keptcount.Notice{}, false
	}
	n := keptcount.Notice{Xact: x, Rows: make([]keptcount.Added, len(p.R))}
	for i, r := range p.R {
		var due *time.Time
		a := &n.Rows[i]
		if len(r) != 5 || json.Unmarshal(r[0], &a.Route.Namespace) != nil || json.Unmarshal(r[1], &a.Route.TaskQueue) != nil ||
			json.Unmarshal(r[2], &a.Shard) != nil || json.Unmarshal(r[3], &a.Count) != nil || json.Unmarshal(r[4], &due) != nil {
			return keptcount.Notice{}, false
		}
		if due != nil {
			a.Due = *due
		}
	}
	return n, true
}

// namespacesOf returns the namespaces of msgs, each once.
func namespacesOf(msgs []outbox.Message) []string {
	seen := make(map[string]bool, len(msgs))
	names := []string{}
	for _, m := range msgs {
		if !seen[m.Namespace] {
			seen[m.Namespace] = true
			names = append(names, m.Namespace)
		}
	}
	return names
}
