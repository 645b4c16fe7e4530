package pgstore_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

var execRE = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)

func TestZZExp(t *testing.T) {
	f := newFixture(t)
	nsN, _ := strconv.Atoi(os.Getenv("NS"))
	var msgs []outbox.Message
	for i := 0; i < 20000; i++ {
		msgs = append(msgs, message(fmt.Sprintf("ns%04d", i%nsN), fmt.Sprintf("q%d", (i/nsN)%2), fmt.Sprintf("k%06d", i)))
	}
	for lo := 0; lo < len(msgs); lo += 5000 {
		f.enqueue(msgs[lo : lo+5000]...)
	}
	adminPool.Exec(f.ctx, "ANALYZE "+f.schema+".outbox")
	bp, _ := backpressure.New(backpressure.Config{BatchSize: 100, DefaultQuota: backpressure.Unlimited}, f.all)
	var plan backpressure.Plan
	for i := 0; i < 100; i++ {
		rows, p, err := backpressure.SweepN(f.ctx, bp, f.s, 100)
		if err != nil {
			t.Fatal(err)
		}
		plan = p
		if i < 99 {
			var cs []outbox.Completion
			for _, r := range rows {
				cs = append(cs, outbox.Completion{Lease: r.Lease(), Outcome: outbox.Settle})
			}
			if _, err := f.s.Complete(f.ctx, cs); err != nil {
				t.Fatal(err)
			}
		}
	}
	sql := pgstore.Statements(f.s)
	var ns, qs []string
	var lim []int64
	for _, c := range plan.Claims {
		ns, qs, lim = append(ns, c.Route.Namespace), append(qs, c.Route.TaskQueue), append(lim, int64(c.Limit))
	}
	lease := outbox.DefaultLease.Microseconds()
	run := func(name, stmt string, args ...any) {
		var tot float64
		var last string
		for k := 0; k < 7; k++ {
			tx, _ := f.pool.Begin(f.ctx)
			tx.Exec(f.ctx, "SET LOCAL jit = off")
			rows, err := tx.Query(f.ctx, "EXPLAIN (ANALYZE, BUFFERS) "+stmt, args...)
			if err != nil {
				t.Fatal(name, err)
			}
			var plan string
			for rows.Next() {
				var l string
				rows.Scan(&l)
				plan += l + "\n"
			}
			rows.Close()
			tx.Rollback(f.ctx)
			m := execRE.FindStringSubmatch(plan)
			v, _ := strconv.ParseFloat(m[1], 64)
			if k >= 2 {
				tot += v
			}
			last = plan
		}
		hf := 0
		for _, l := range strings.Split(last, "\n") {
			if i := strings.Index(l, "Heap Fetches: "); i >= 0 {
				n, _ := strconv.Atoi(strings.TrimSpace(l[i+14:]))
				hf += n
			}
		}
		t.Logf("%-20s %.3f ms  heap fetches %d", name, tot/5, hf)
		if os.Getenv("SHOW") == name {
			t.Log(last)
		}
	}
	after := plan.Namespaces[len(plan.Namespaces)-1].Namespace
	run("sweepCount11", sql["sweepCount"], f.now, []int32{}, int64(11), true)
	run("sweepCountWindow", sql["sweepCountWindow"], f.now, []int32{}, int64(1), after, int64(101), true)
	run("countClaimed", sql["countClaimed"], f.now, []int32{}, true)
	run("countPendingWindow", sql["countPendingWindow"], f.now, []int32{}, int64(1), after, int64(101), true)
	run("claimScoped", sql["claimScoped"], f.now, lease, []int32{}, ns, qs, lim, true)
	run("claimUnscoped", sql["claimUnscoped"], f.now, lease, []int32{}, int64(100), true)
}
