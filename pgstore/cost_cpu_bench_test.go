package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/outbox"
)

// cpuArm is one outbox BenchmarkRowCPU measures: a costArm, the DDL that
// makes it a variant of this package's schema ({s}: the quoted schema),
// and the backend CPU its claims and Completes took (µs).
type cpuArm struct {
	costArm
	ddl  string
	cpu  [4]float64 // claim, Complete, enqueue, the move's keys
	keys bool       // the move's: an enqueue also inserts its keys into {s}.keys
}

// moveComplete is the settled-row move's prototype of a settle: the
// completed rows are deleted from the outbox and inserted, settled, into
// {s}.settled in the same statement (DELETE … RETURNING). It settles only
// (every entry's outcome is taken as 1); it prices the move's Complete,
// not its reads; its enqueue is priced apart (keysInsert).
const moveComplete = `
WITH done AS (
	DELETE FROM {s}.outbox o
	USING (SELECT * FROM unnest($2::text[], $3::int8[], $4::int4[], $5::int8[], $6::text[]) AS c (dispatch_key, token, outcome, delay_us, error)
		ORDER BY c.dispatch_key) c,
		(SELECT coalesce($1::timestamptz, now()) AS now) t
	WHERE o.dispatch_key = c.dispatch_key AND o.dispatch_key = ANY ($2::text[]) AND o.token = c.token
		AND CASE WHEN o.state = 'claimed' THEN o.lease_expires_at > t.now ELSE false END
	RETURNING o.*, t.now AS fin
)
INSERT INTO {s}.settled (id, dispatch_key, namespace, task_queue, shard, payload, state, attempts, token, enqueued_at,
	visible_at, claimed_at, lease_expires_at, finished_at, last_error, max_attempts, priority, headers, snoozes)
SELECT id, dispatch_key, namespace, task_queue, shard, payload, 'settled', attempts, token, enqueued_at,
	visible_at, claimed_at, lease_expires_at, fin, last_error, max_attempts, priority, headers, snoozes
FROM done
RETURNING dispatch_key, state`

// keysInsert is the settled-row move's addition to an enqueue: each key
// goes into {s}.keys, the one place its uniqueness is kept while its row
// moves from the outbox to the settled table.
const keysInsert = `INSERT INTO {s}.keys (dispatch_key, shard)
SELECT * FROM unnest($1::text[], $2::int4[]) ORDER BY 1
ON CONFLICT DO NOTHING`

// BenchmarkRowCPU measures the PostgreSQL CPU of a drained row's claim and
// Complete as the dispatcher sends them (a claim of 1,000 rows, 50 per
// route, then Completes of 100), and of the Enqueue of 1,000 more rows over
// the same routes (so the backlog stays as it was), on this package's schema and on variants
// of it, side by side in one run (in an order that rotates from iteration
// to iteration), each arm on its own outbox with the same backlog as
// BenchmarkRowCost's. The CPU is the backend's own
// (getrusage, which log_statement_stats reports per protocol message,
// received here as notices): what the backend spent parsing, planning and
// executing, whatever else the machine runs. The arms:
//
//   - store: this package's schema and statements;
//   - v13-complete: version 13's first Complete (testdata/v13), which put
//     the results in argument order in the database;
//   - claimable-pending: outbox_route_claimable_idx over pending rows only
//     (a claim then adds no entry to it; the counts would have to find
//     the expired leases elsewhere);
//   - move, move-keyidx: the settled-row move's prototype (moveComplete):
//     settled rows leave the outbox for a table with no index, or with an
//     index on the dispatch key (what Get would need), and the outbox
//     keeps no index of settled rows (outbox_settled_idx dropped,
//     outbox_namespace_state_idx over pending and dead rows); an enqueue
//     also inserts its
//     keys into a keys table (keysInsert, measured as keys-cpu-µs/row).
//
// It reports each arm's claim, complete and enqueue CPU per row (and the
// move's keys), and each arm's complete CPU over store's
// (…/store-complete).
//
//	cd pgstore && go test -run '^$' -bench RowCPU -benchtime 10x -count 5
func BenchmarkRowCPU(b *testing.B) {
	pool := newPool(b, nil, 4)
	settled := `CREATE TABLE {s}.settled (LIKE {s}.outbox INCLUDING DEFAULTS EXCLUDING GENERATED);
DROP INDEX {s}.outbox_settled_idx; DROP INDEX {s}.outbox_namespace_state_idx;
CREATE INDEX outbox_namespace_state_idx ON {s}.outbox (namespace, state, claimable_at) WHERE state IN ('pending', 'dead');
CREATE TABLE {s}.keys (dispatch_key text, shard integer, PRIMARY KEY (dispatch_key, shard));`
	arms := []*cpuArm{
		{costArm: costArm{name: "store"}},
		{costArm: costArm{name: "v13-complete", complete: "testdata/v13/complete.sql"}},
		{costArm: costArm{name: "claimable-pending"}, ddl: `DROP INDEX {s}.outbox_route_claimable_idx;
CREATE INDEX outbox_route_claimable_idx ON {s}.outbox (namespace, task_queue, claimable_at) INCLUDE (shard) WHERE state = 'pending';`},
		{costArm: costArm{name: "move", complete: moveComplete}, ddl: settled, keys: true},
		{costArm: costArm{name: "move-keyidx", complete: moveComplete}, ddl: settled + `CREATE INDEX ON {s}.settled (dispatch_key);`, keys: true},
	}
	for _, a := range arms {
		cpuArmSetup(b, pool, a)
	}
	meter := &cpuNotices{}
	conn := meter.connect(b)
	rows := 0
	for b.Loop() {
		for k := range arms { // in an order that rotates, so that no arm is always first
			a := arms[(rows/1000+k)%len(arms)]
			a.cpu[0] += meter.measure(func() { cpuClaim(b, conn, a.claim) })
			keys, tokens := costClaimed(b, a.table)
			if len(keys) != 1000 {
				b.Fatalf("%s: claimed %d rows, want 1000", a.name, len(keys))
			}
			a.cpu[1] += meter.measure(func() {
				for lo := 0; lo < len(keys); lo += 100 {
					cpuComplete(b, conn, a.complete, keys[lo:lo+100], tokens[lo:lo+100])
				}
			})
			cpuEnqueue(b, conn, meter, a, rows)
		}
		rows += 1000
	}
	for _, a := range arms {
		b.ReportMetric(a.cpu[0]/float64(rows), a.name+"-claim-cpu-µs/row")
		b.ReportMetric(a.cpu[1]/float64(rows), a.name+"-complete-cpu-µs/row")
		b.ReportMetric(a.cpu[2]/float64(rows), a.name+"-enqueue-cpu-µs/row")
		if a.keys {
			b.ReportMetric(a.cpu[3]/float64(rows), a.name+"-keys-cpu-µs/row")
		}
		if a != arms[0] {
			b.ReportMetric(a.cpu[1]/arms[0].cpu[1], a.name+"/store-complete")
		}
	}
}

// cpuArmSetup creates a's outbox at this package's version, applies its
// DDL, sets its statements (a.complete: a statement with {s}, a testdata
// path, or "" for the store's) and fills it as BenchmarkRowCost does.
func cpuArmSetup(b *testing.B, pool *pgxpool.Pool, a *cpuArm) {
	arm := costSchema(b, pool, a.name)
	q := strings.TrimSuffix(arm.table, ".outbox")
	if a.ddl != "" {
		if _, err := adminPool.Exec(b.Context(), strings.ReplaceAll(a.ddl, "{s}", q)); err != nil {
			b.Fatalf("%s: %v", a.name, err)
		}
	}
	switch {
	case strings.HasPrefix(a.complete, "testdata/"):
		arm.complete = costStatement(b, a.complete, q)
	case a.complete != "":
		arm.complete = strings.ReplaceAll(a.complete, "{s}", q)
	}
	arm.name = a.name
	a.costArm = *arm
	costFill(b, a.table, 10, 2, 1000)
}

// cpuEnqueue enqueues 1,000 new rows, keyed from first, into a's outbox
// with the store's Enqueue statement, 50 to each of BenchmarkRowCost's 20
// routes, and for the move's arms inserts their keys into {s}.keys; it
// adds the CPU of each to a.cpu.
func cpuEnqueue(b *testing.B, conn *pgx.Conn, meter *cpuNotices, a *cpuArm, first int) {
	const n = 1000
	keys, nss, tqs := make([]string, n), make([]string, n), make([]string, n)
	shards, prios, attempts := make([]int32, n), make([]int16, n), make([]int32, n)
	payloads, headers, runAts := make([][]byte, n), make([][]byte, n), make([]*time.Time, n)
	for i := range n {
		ns, q := i%10, (i/10)%2
		keys[i] = fmt.Sprintf("ns%02d/q%d/e%d", ns, q, first+i)
		nss[i], tqs[i] = fmt.Sprintf("ns%02d", ns), fmt.Sprint("q", q)
		shards[i], payloads[i] = int32(outbox.ShardFor(keys[i], 64)), []byte(keys[i])
	}
	a.cpu[2] += meter.measure(func() {
		if _, err := conn.Exec(b.Context(), a.enqueue, nil, keys, nss, tqs, shards, payloads, runAts, attempts, "bench_none", prios, headers); err != nil {
			b.Fatalf("%s: enqueue: %v", a.name, err)
		}
	})
	if !a.keys {
		return
	}
	q := strings.TrimSuffix(a.table, ".outbox")
	a.cpu[3] += meter.measure(func() {
		if _, err := conn.Exec(b.Context(), strings.ReplaceAll(keysInsert, "{s}", q), keys, shards); err != nil {
			b.Fatalf("%s: keys: %v", a.name, err)
		}
	})
}

// cpuClaim runs one scoped claim of 50 rows from each of BenchmarkRowCost's
// 20 routes on conn.
func cpuClaim(b *testing.B, conn *pgx.Conn, claim string) {
	shards := make([]int32, 64)
	for i := range shards {
		shards[i] = int32(i)
	}
	var nss, tqs []string
	var lims []int64
	for ns := range 10 {
		for q := range 2 {
			nss, tqs, lims = append(nss, fmt.Sprintf("ns%02d", ns)), append(tqs, fmt.Sprint("q", q)), append(lims, 50)
		}
	}
	if _, err := conn.Exec(b.Context(), claim, nil, int64(30_000_000), shards, nss, tqs, lims, true); err != nil {
		b.Fatal(err)
	}
}

// cpuComplete settles keys (claimed under tokens) with one Complete
// statement on conn and checks that every row was settled.
func cpuComplete(b *testing.B, conn *pgx.Conn, complete string, keys []string, tokens []int64) {
	outcomes, delays, errs := make([]int32, len(keys)), make([]int64, len(keys)), make([]string, len(keys))
	for i := range outcomes {
		outcomes[i] = 1
	}
	r, err := conn.Query(b.Context(), complete, nil, keys, tokens, outcomes, delays, errs)
	if err != nil {
		b.Fatal(err)
	}
	settled := 0
	for r.Next() {
		vals, err := r.Values()
		if err != nil {
			b.Fatal(err)
		}
		if st, ok := vals[len(vals)-1].(string); ok && st == "settled" {
			settled++
		}
	}
	if err := r.Err(); err != nil || settled != len(keys) {
		b.Fatalf("settled %d of %d rows: %v", settled, len(keys), err)
	}
}

// cpuNotices sums the backend CPU that log_statement_stats reports, per
// protocol message, to a connection made by connect.
type cpuNotices struct {
	mu  sync.Mutex
	sum float64 // µs
}

// usageLine is the line of log_statement_stats' report with the CPU times.
var usageLine = regexp.MustCompile(`([0-9.]+) s user, ([0-9.]+) s system`)

// connect opens a connection whose backend reports each message's
// resource use to the client, summed into m.
func (m *cpuNotices) connect(b *testing.B) *pgx.Conn {
	cfg, err := pgx.ParseConfig(databaseURL())
	if err != nil {
		b.Fatal(err)
	}
	cfg.RuntimeParams["log_statement_stats"] = "on"
	cfg.RuntimeParams["client_min_messages"] = "log"
	cfg.RuntimeParams["jit"] = "off"
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		x := usageLine.FindStringSubmatch(n.Detail)
		if x == nil {
			return
		}
		user, _ := strconv.ParseFloat(x[1], 64)
		system, _ := strconv.ParseFloat(x[2], 64)
		m.mu.Lock()
		m.sum += (user + system) * 1e6
		m.mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// measure returns the backend CPU (µs) reported while f ran.
func (m *cpuNotices) measure(f func()) float64 {
	m.mu.Lock()
	before := m.sum
	m.mu.Unlock()
	f()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sum - before
}

// BenchmarkCommitCPU measures what a commit costs the backend, which no
// statement's messages report (the commit runs at the protocol's Sync,
// after the statement's last message): one-row upserts, each its own
// transaction, with synchronous_commit on (the default: the commit waits
// for its WAL to be flushed, and the backend flushes it itself unless the
// WAL writer has) and off, side by side. It reports, per transaction, the
// backend's whole CPU from /proc/<pid>/stat (10 ms ticks, so it needs a
// few thousand transactions), the CPU its messages reported, and the
// difference: the commit and the protocol's loop. The drains' per-row
// figure carries one such commit per claim, per Complete and per count.
//
//	cd pgstore && go test -run '^$' -bench CommitCPU -benchtime 3000x -count 5
func BenchmarkCommitCPU(b *testing.B) {
	m := &cpuNotices{}
	conn := m.connect(b)
	q := pgx.Identifier{testSchema(b)}.Sanitize()
	ctx := b.Context()
	if _, err := adminPool.Exec(ctx, "CREATE SCHEMA "+q+"; CREATE TABLE "+q+".t (k int PRIMARY KEY, v int NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	var proc, msgs [2]float64
	modes := [2]string{"on", "off"}
	n := 0
	for b.Loop() {
		for i, mode := range modes {
			if _, err := conn.Exec(ctx, "SET synchronous_commit = "+mode); err != nil {
				b.Fatal(err)
			}
			before := backendTicks(b, pid)
			msgs[i] += m.measure(func() {
				if _, err := conn.Exec(ctx, "INSERT INTO "+q+".t VALUES ($1, 0) ON CONFLICT (k) DO UPDATE SET v = t.v + 1", n%1000); err != nil {
					b.Fatal(err)
				}
			})
			proc[i] += backendTicks(b, pid) - before
		}
		n++
	}
	for i, mode := range modes {
		b.ReportMetric(proc[i]/float64(n), "sync-"+mode+"-proc-µs/tx")
		b.ReportMetric(msgs[i]/float64(n), "sync-"+mode+"-messages-µs/tx")
		b.ReportMetric((proc[i]-msgs[i])/float64(n), "sync-"+mode+"-unattributed-µs/tx")
	}
}

// backendTicks returns the CPU (user + system, µs, in 10 ms ticks) the
// process pid has spent, from /proc/<pid>/stat; the benchmark is skipped
// where the server's processes cannot be read.
func backendTicks(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("the server's backend is not readable here: %v", err)
	}
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	user, _ := strconv.ParseFloat(f[11], 64)
	system, _ := strconv.ParseFloat(f[12], 64)
	return (user + system) * 1e4 // USER_HZ is 100 on Linux
}
