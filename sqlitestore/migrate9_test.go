package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/storetest"
)

// TestMigrateToStateIndexes opens a populated version 8 file (rows in every
// state over several namespaces: pending ready and scheduled, claimed live
// and expired, settled, dead) and checks that migration 9 keeps every row
// as it was, leaves outbox_namespace_state gone and the state indexes in
// place on a sound file, and that what Namespaces, NextDue and
// CountClaimedOutboxRows read from the new indexes equals a full count of
// the table taken before the migration.
func TestMigrateToStateIndexes(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v8.db")
	clock := storetest.NewClock()
	now := clock.Now().UnixNano()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	populateVersion8(t, db, now)
	before := dumpOutbox(t, db)
	want := fullCounts(t, db, now)
	var wantDue int64
	if err := db.QueryRowContext(ctx, `SELECT min(ready_at) FROM outbox WHERE state = 0 AND ready_at > ?1`, now).Scan(&wantDue); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	s := openT(t, path, Options{Now: clock.Now})
	if got := dumpOutbox(t, s.reader); !slices.Equal(got, before) {
		t.Errorf("rows after migration differ from before:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}
	var version int
	if err := s.reader.QueryRowContext(ctx, `SELECT value FROM outbox_meta WHERE key = 'schema_version'`).Scan(&version); err != nil || version != schemaVersion {
		t.Errorf("schema_version = %d, %v; want %d", version, err, schemaVersion)
	}
	for name, wantIt := range map[string]bool{"outbox_namespace_state": false, "outbox_pending": true, "outbox_leased": true, "outbox_settled": true, "outbox_dead": true} {
		var n int
		if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?1`, name).Scan(&n); err != nil || (n == 1) != wantIt {
			t.Errorf("index %s: %d of it (%v), want present = %v", name, n, err, wantIt)
		}
	}
	var check string
	if err := s.reader.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v", check, err)
	}

	for _, capN := range []int{outbox.MaxCountCap, 3} {
		got, err := s.Namespaces(ctx, outbox.NamespacesParams{Cap: capN})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("cap %d: Namespaces = %d namespaces, want %d", capN, len(got), len(want))
		}
		for _, g := range got {
			w := capped(want[g.Namespace], capN)
			if g != w {
				t.Errorf("cap %d: Namespaces[%s] = %+v,\nwant (a full count before migrating) %+v", capN, g.Namespace, g, w)
			}
		}
	}
	shards := allShards(t, s)
	due, ok, err := s.NextDue(ctx, shards)
	if err != nil || !ok || due != time.Duration(wantDue-now) {
		t.Errorf("NextDue = %v, %v, %v; want %v", due, ok, err, time.Duration(wantDue-now))
	}
	claimed, err := s.Claimer().CountClaimedOutboxRows(ctx, shards)
	if err != nil {
		t.Fatal(err)
	}
	wantClaimed := map[string]int{}
	for ns, st := range want {
		if st.Claimed > 0 {
			wantClaimed[ns] = st.Claimed
		}
	}
	if !maps.Equal(claimed, wantClaimed) {
		t.Errorf("CountClaimedOutboxRows = %v, want %v", claimed, wantClaimed)
	}
}

// populateVersion8 makes db a version 8 outbox (the migrations before 9,
// run by hand) holding rows of every kind in each of five namespaces: the
// rows cycle through pending, claimed twice, settled, dead and pending,
// with times spread from two minutes before now to two after, so that
// some pending rows are ready and some scheduled, some leases live and
// some expired.
func populateVersion8(t *testing.T, db *sql.DB, now int64) {
	t.Helper()
	ctx := t.Context()
	stmts := []string{`CREATE TABLE outbox_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT, WITHOUT ROWID`}
	stmts = append(stmts, migrations[:8]...)
	stmts = append(stmts, `INSERT INTO outbox_meta (key, value) VALUES ('schema_version', 8), ('shard_count', 8)`)
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	const insert = `INSERT INTO outbox (dispatch_key, namespace, task_queue, shard, payload, state, attempts, token,
		enqueued_at, run_at, claimed_at, lease_expires_at, finished_at, ready_at, claim_rank, snoozes)
		VALUES (?1, ?2, ?3, ?4, x'70', ?5, ?6, ?7, 1, ?8, ?9, ?10, ?11, ?12, ?13, ?14)`
	for i := range 240 {
		ns, tq := fmt.Sprintf("ns%d", i%5), fmt.Sprintf("q%d", i%3)
		at := now + int64(i-120)*int64(time.Second) // half before now, half after
		state, readyAt, claimedAt, leaseEnd, finished := 0, at, int64(0), int64(0), int64(0)
		switch i % 6 {
		case 1, 2: // claimed: a live lease or an expired one, as at says
			state, claimedAt, leaseEnd = 1, now-int64(time.Hour), at
		case 3:
			state, finished = 2, now-int64(time.Minute)
		case 4:
			state, finished = 3, now-int64(time.Minute)
		}
		if state == 1 {
			readyAt = leaseEnd
		}
		if state >= 2 {
			readyAt = at
		}
		if _, err := db.ExecContext(ctx, insert, fmt.Sprintf("k%d", i), ns, tq, i%8, state, i%3, i, at, claimedAt, leaseEnd, finished, readyAt, -(i % 2), i%2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO outbox_routes SELECT DISTINCT namespace, task_queue FROM outbox WHERE state < 2`); err != nil {
		t.Fatal(err)
	}
}

// dumpOutbox returns every row of outbox, every column, one string each,
// in ID order.
func dumpOutbox(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) []string {
	t.Helper()
	rows, err := q.QueryContext(t.Context(), `SELECT * FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%v", vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fullCounts counts each namespace's rows by state with a full scan of the
// table, no index: the reference Namespaces is checked against.
func fullCounts(t *testing.T, db *sql.DB, now int64) map[string]outbox.NamespaceState {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT namespace,
		sum(state < 2 AND ready_at <= ?1), sum(state = 0 AND ready_at > ?1), sum(state = 1 AND ready_at > ?1),
		sum(state = 3), sum(state = 2), coalesce(min(CASE WHEN state < 2 AND ready_at <= ?1 THEN ready_at END), 0)
		FROM outbox NOT INDEXED GROUP BY namespace`, now)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]outbox.NamespaceState{}
	for rows.Next() {
		var st outbox.NamespaceState
		var since int64
		if err := rows.Scan(&st.Namespace, &st.Ready, &st.Scheduled, &st.Claimed, &st.Dead, &st.Settled, &since); err != nil {
			t.Fatal(err)
		}
		st.ReadySince = fromNanos(since)
		out[st.Namespace] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// capped is st as Namespaces reports it under a cap of capN.
func capped(st outbox.NamespaceState, capN int) outbox.NamespaceState {
	for _, n := range []*int{&st.Ready, &st.Scheduled, &st.Claimed, &st.Dead, &st.Settled} {
		if *n >= capN {
			*n, st.Capped = capN, true
		}
	}
	return st
}
