package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// keptArm is one arm of BenchmarkKeptCounts: pgstore with
// Options.RecountInterval recount, and what its runs measured.
type keptArm struct {
	name    string
	recount time.Duration
	cycles  int
	cpu     time.Duration
	trips   int64
}

// keptCycles is how many rows each arm's run trickles in (50 under
// -benchtime=1x, to prove it runs).
func keptCycles() int {
	if f := flag.Lookup("test.benchtime"); f != nil && f.Value.String() == "1x" {
		return 50
	}
	return 1500
}

// BenchmarkKeptCounts is the steady trickle's sweep without the
// dispatcher's timing, to compare pgstore's kept counts (RecountInterval
// RecommendedRecountInterval, arm kept) with counts read on every sweep
// (the default, arm recount): per cycle
// another store enqueues one row into one of 10 namespaces, the consumer
// hears its notification and sweeps as a dispatcher does at a trickle —
// CountOutboxRows with the claimed counts, a scoped claim of the routes it
// reports, Complete of what it claimed. Arms alternate within each
// iteration. It reports each arm's consumer backend CPU (see backendCPU)
// and round trips per row, and the kept arm's CPU over recount's
// (kept/recount-pg).
//
//	cd bench && go test -run '^$' -bench KeptCounts -benchtime 5x
//
// Sub-benchmark standing-0 starts from an empty outbox; standing-1000
// first enqueues one row delayed by an hour into each of 1,000 other
// namespaces (a standing backlog: retries in back-off, scheduled rows),
// whose routes every full count walks.
func BenchmarkKeptCounts(b *testing.B) {
	cpuAdmin = openPool(b, 2)
	for _, standing := range []int{0, 1000} {
		b.Run(fmt.Sprintf("standing-%d", standing), func(b *testing.B) {
			arms := []*keptArm{{name: "kept", recount: pgstore.RecommendedRecountInterval}, {name: "recount"}}
			rotateArms(b, len(arms), func(i int) { arms[i].run(b, standing, keptCycles()) })
			for _, a := range arms {
				b.ReportMetric(float64(a.cpu.Microseconds())/float64(a.cycles), a.name+"-pg-µs/row")
				b.ReportMetric(float64(a.trips)/float64(a.cycles), a.name+"-trips/row")
			}
			if arms[1].cpu > 0 {
				b.ReportMetric(float64(arms[0].cpu)/float64(arms[1].cpu), "kept/recount-pg")
			}
		})
	}
}

// standingRows enqueues one row delayed by an hour into each of n
// namespaces of its own.
func standingRows(b *testing.B, s *pgstore.Store, n int) {
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, outbox.Message{DispatchKey: fmt.Sprintf("d%d", i), Namespace: fmt.Sprintf("standing%04d", i), TaskQueue: "q", RunAt: time.Now().Add(time.Hour)})
	}
	if n > 0 {
		if _, err := s.Enqueue(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
}

// run trickles cycles rows through a fresh consumer store of a's options,
// after standing delayed rows (standingRows).
func (a *keptArm) run(b *testing.B, standing, cycles int) {
	ctx := context.Background()
	trips := &tripCounter{}
	pool := openTracedPool(b, 4, trips)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Schema: freshSchema(b, pool, "kept"), RecountInterval: a.recount})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	producer, err := pgstore.New(ctx, openPool(b, 2), pgstore.Options{Schema: s.Schema()})
	if err != nil {
		b.Fatal(err)
	}
	defer producer.Close()
	standingRows(b, producer, standing)
	woken, err := s.Subscribe(ctx)
	if err != nil {
		b.Fatal(err)
	}
	all, _ := backpressure.AllShards(s.ShardCount())
	c := s.Claimer()
	counter := c.(backpressure.Counter)
	trips.n.Store(0)
	meter := startCPU(cpuAdmin, pool)
	for i := range cycles {
		msg := outbox.Message{DispatchKey: fmt.Sprintf("r%d", i), Namespace: fmt.Sprintf("ns%d", i%10), TaskQueue: "q"}
		if _, err := producer.Enqueue(ctx, []outbox.Message{msg}); err != nil {
			b.Fatal(err)
		}
		<-woken
		_, pending, err := counter.CountOutboxRows(ctx, all, backpressure.CountParams{CapPerRoute: 3, Claimed: true})
		if err != nil {
			b.Fatal(err)
		}
		var claims []backpressure.ScopedClaim
		for _, p := range pending {
			claims = append(claims, backpressure.ScopedClaim{Route: p.Route, Limit: p.Count})
		}
		rows, err := c.ClaimOutboxRowsScoped(ctx, all, claims)
		if err != nil {
			b.Fatal(err)
		}
		var done []outbox.Completion
		for _, r := range rows {
			done = append(done, outbox.SettleRow(r))
		}
		if _, err := s.Complete(ctx, done); err != nil {
			b.Fatal(err)
		}
	}
	a.cpu += meter.stop()
	a.trips += trips.n.Load()
	a.cycles += cycles
}
