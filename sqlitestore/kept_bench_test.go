//go:build unix

package sqlitestore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// keptArms are the two arms of the kept-counts benchmarks: every count
// read (the default), and kept counts at a 1 s RecountInterval.
var keptArms = []struct {
	name     string
	interval time.Duration
}{{"recount", 0}, {"kept", time.Second}}

// BenchmarkKeptDrain is BenchmarkDrain's fair drain (Sweep in its sweep
// transaction, then one Complete per batch of benchBatch) of drainRows
// rows over 10 and 1,000 namespaces, with every count read (recount) and
// with kept counts (kept), each iteration draining one copy of the same
// file in each arm, in alternating order. It reports each arm's rows/s and
// kept/recount, the ratio of their rates (above 1: kept counts drain
// faster).
//
//	go test -run '^$' -bench KeptDrain -count 3
func BenchmarkKeptDrain(b *testing.B) {
	for _, namespaces := range []int{10, 1000} {
		b.Run(fmt.Sprintf("namespaces=%d", namespaces), func(b *testing.B) {
			b.ReportAllocs()
			template := drainTemplate(b, namespaces)
			d := make([]time.Duration, len(keptArms))
			cpu := make([]time.Duration, len(keptArms))
			rows := make([]int, len(keptArms))
			i := 0
			for b.Loop() {
				for j := range keptArms {
					arm := (i + j) % len(keptArms)
					s := keptStore(b, template, keptArms[arm].interval)
					start, c := time.Now(), processCPU()
					rows[arm] += drain(b, s, "fair")
					d[arm] += time.Since(start)
					cpu[arm] += processCPU() - c
					_ = s.Close()
				}
				i++
			}
			reportArms(b, d, cpu, rows)
		})
	}
}

// keptStore opens a copy of the template store with RecountInterval
// interval.
func keptStore(b *testing.B, template string, interval time.Duration) *Store {
	b.Helper()
	data, err := os.ReadFile(template)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "kept.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	s, err := Open(b.Context(), path, Options{SyncNormal: true, RecountInterval: interval})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// trickleRows is how many rows one arm of BenchmarkKeptTrickle runs per
// iteration.
const trickleRows = 200

// BenchmarkKeptTrickle is a trickle, one row at a time: Enqueue of one row
// (round-robin over 10 namespaces), a Sweep (its sweep transaction) that
// claims it, and a Complete that settles it, trickleRows times per arm per
// iteration, with every count read (recount) and with kept counts (kept),
// the arms alternating on two stores of the same file contents. With
// standing=1000 the file also holds 1,000 other namespaces with one row
// each delayed for an hour (retries, schedules), which a full count walks
// and a kept read of the enqueued namespace does not. It reports each
// arm's wall and CPU µs/row (enqueue, sweep and complete) and the ratios
// kept/recount-cpu and kept/recount-wall (below 1: kept counts cost less).
//
//	go test -run '^$' -bench KeptTrickle -count 3
func BenchmarkKeptTrickle(b *testing.B) {
	for _, standing := range []int{0, 1000} {
		b.Run(fmt.Sprintf("standing=%d", standing), func(b *testing.B) {
			b.ReportAllocs()
			template := trickleTemplate(b, standing)
			stores := make([]*Store, len(keptArms))
			for arm, a := range keptArms {
				stores[arm] = keptStore(b, template, a.interval)
				defer stores[arm].Close()
			}
			d := make([]time.Duration, len(keptArms))
			cpu := make([]time.Duration, len(keptArms))
			rows := make([]int, len(keptArms))
			n, i := 0, 0
			for b.Loop() {
				for j := range keptArms {
					arm := (i + j) % len(keptArms)
					start, c := time.Now(), processCPU()
					trickle(b, stores[arm], n)
					d[arm] += time.Since(start)
					cpu[arm] += processCPU() - c
					rows[arm] += trickleRows
				}
				n += trickleRows
				i++
			}
			reportArms(b, d, cpu, rows)
		})
	}
}

// trickleTemplate writes a closed file store holding standing namespaces
// with one row each, delayed an hour, and returns its path.
func trickleTemplate(b *testing.B, standing int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "trickle.db")
	s, err := Open(b.Context(), path, Options{SyncNormal: true})
	if err != nil {
		b.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range standing {
		msgs = append(msgs, outbox.Message{DispatchKey: "standing" + strconv.Itoa(i), Namespace: "standing" + strconv.Itoa(i), TaskQueue: "q", Payload: []byte("p"), RunAt: time.Now().Add(time.Hour)})
	}
	if _, err := s.Enqueue(b.Context(), msgs); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// trickle runs trickleRows rows through s one at a time, keys from first.
func trickle(b *testing.B, s *Store, first int) {
	ctx := b.Context()
	shards, err := backpressure.AllShards(s.ShardCount())
	if err != nil {
		b.Fatal(err)
	}
	bp, err := backpressure.New(backpressure.Config{BatchSize: benchBatch, DefaultQuota: backpressure.Unlimited}, shards)
	if err != nil {
		b.Fatal(err)
	}
	for i := first; i < first+trickleRows; i++ {
		m := outbox.Message{DispatchKey: "t" + strconv.Itoa(i), Namespace: "ns" + strconv.Itoa(i%10), TaskQueue: "q", Payload: []byte("p")}
		if _, err := s.Enqueue(ctx, []outbox.Message{m}); err != nil {
			b.Fatal(err)
		}
		rows, _, err := backpressure.Sweep(ctx, bp, s.Claimer())
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) != 1 {
			b.Fatalf("a sweep after enqueueing %s claimed %d rows, want 1", m.DispatchKey, len(rows))
		}
		res, err := s.Complete(ctx, []outbox.Completion{outbox.SettleRow(rows[0])})
		if err != nil || res[0].Err != nil {
			b.Fatal(err, res[0].Err)
		}
	}
}

// reportArms reports each arm's wall and CPU time per row and the ratios
// of the kept arm's to the recount arm's.
func reportArms(b *testing.B, d, cpu []time.Duration, rows []int) {
	per := func(t []time.Duration, arm int) float64 {
		return float64(t[arm].Nanoseconds()) / 1e3 / float64(rows[arm])
	}
	for arm, a := range keptArms {
		b.ReportMetric(per(d, arm), a.name+"-wall-µs/row")
		b.ReportMetric(per(cpu, arm), a.name+"-cpu-µs/row")
	}
	b.ReportMetric(per(cpu, 1)/per(cpu, 0), "kept/recount-cpu")
	b.ReportMetric(per(d, 1)/per(d, 0), "kept/recount-wall")
}

// processCPU is the process's CPU time so far (user and system): SQLite
// runs in the process, so it holds the database's work too.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
