package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/outboxkit/backpressure/outbox"
)

// arrival is one row of the workload: when it is enqueued and how long a
// worker runs it once claimed.
type arrival struct {
	key      string // dispatch key, unique in the run
	tenant   int    // index into Scenario.Tenants
	queue    string // task queue
	tick     int    // tick at which it is enqueued
	service  int    // ticks a worker runs it, ≥ 1
	priority int    // outbox.Message.Priority, drawn from Tenant.Priorities
}

// workload is a scenario's arrivals, drawn once from the seed and replayed
// unchanged under every policy.
type workload struct {
	arrivals   []arrival // ordered by tick, then by the order they were drawn
	perTick    [][]arrival
	byKey      map[string]int // dispatch key → index into arrivals
	perTenant  []int          // rows per tenant
	firstTick  int            // tick of the first arrival
	lastTick   int            // tick of the last arrival
	maxService int            // longest service time of a row, in ticks
}

// nextArrival returns the first tick at or after t in which rows arrive,
// or lastTick+1 when none does.
func (w *workload) nextArrival(t int) int {
	for ; t < len(w.perTick); t++ {
		if len(w.perTick[t]) > 0 {
			return t
		}
	}
	return w.lastTick + 1
}

// queueName is the name of a tenant's task queue i.
func queueName(i int) string { return fmt.Sprintf("q%02d", i) }

// newWorkload draws the arrivals of s from seed. The same scenario and seed
// always give the same workload.
func newWorkload(s Scenario, seed int64) *workload {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6270_7369_6d00_0001))
	all := drawArrivals(s, rng)
	drawPriorities(s, seed, all)
	// Stable: rows of one tick keep the order they were drawn in, which is
	// the order they are enqueued and so their oldest-first order.
	slices.SortStableFunc(all, func(a, b arrival) int { return a.tick - b.tick })
	return indexWorkload(all, len(s.Tenants))
}

// drawArrivals draws the rows of every tenant's arrivals, with their
// service times, from rng, tenant by tenant.
func drawArrivals(s Scenario, rng *rand.Rand) []arrival {
	var all []arrival
	seq := make([]int, len(s.Tenants))
	for ti, t := range s.Tenants {
		st := s.ServiceTime
		if t.ServiceTime != nil {
			st = *t.ServiceTime
		}
		service := func() int {
			d := st.Min
			if span := st.Max - st.Min; span > 0 {
				d += time.Duration(rng.Int64N(int64(span) + 1))
			}
			return max(1, int(ceilTicks(d, s.Tick)))
		}
		add := func(at time.Duration, queue int) {
			all = append(all, arrival{
				key:     fmt.Sprintf("%s:%07d", t.Name, seq[ti]),
				tenant:  ti,
				queue:   queueName(queue),
				tick:    int(at / s.Tick),
				service: service(),
			})
			seq[ti]++
		}
		for _, a := range t.Arrivals {
			switch a.Pattern {
			case PatternBurst:
				for i := range a.Rows {
					add(a.At, i%t.Queues)
				}
			case PatternSteady:
				until := a.Until
				if until == 0 {
					until = s.Duration
				}
				at := a.From.Seconds()
				for {
					at += rng.ExpFloat64() / a.PerSecond
					d := time.Duration(at * float64(time.Second))
					if d >= until {
						break
					}
					add(d, rng.IntN(t.Queues))
				}
			}
		}
	}
	return all
}

// drawPriorities gives the rows of tenants with priority classes their
// priorities.
func drawPriorities(s Scenario, seed int64, all []arrival) {
	// Priorities come from a stream of their own, drawn in the order the
	// rows were drawn, so that they change no arrival nor service time.
	prng := rand.New(rand.NewPCG(uint64(seed), 0x6270_7369_6d00_0002))
	for i := range all {
		classes := s.Tenants[all[i].tenant].Priorities
		if len(classes) == 0 {
			continue
		}
		u := prng.Float64()
		for _, c := range classes {
			if u < c.Fraction {
				all[i].priority = c.Priority
				break
			}
			u -= c.Fraction
		}
	}
}

// indexWorkload is the workload of the rows all, sorted by tick, of
// tenants tenants.
func indexWorkload(all []arrival, tenants int) *workload {
	w := &workload{
		arrivals:  all,
		byKey:     make(map[string]int, len(all)),
		perTenant: make([]int, tenants),
	}
	if n := len(all); n > 0 {
		w.firstTick, w.lastTick = all[0].tick, all[n-1].tick
	}
	w.perTick = make([][]arrival, w.lastTick+1)
	for i, a := range all {
		w.byKey[a.key] = i
		w.perTenant[a.tenant]++
		w.maxService = max(w.maxService, a.service)
	}
	for lo := 0; lo < len(all); {
		hi := lo
		for hi < len(all) && all[hi].tick == all[lo].tick {
			hi++
		}
		w.perTick[all[lo].tick] = all[lo:hi:hi]
		lo = hi
	}
	return w
}

// message is arrival a as the producer enqueues it.
func (a arrival) message(s Scenario) outbox.Message {
	return outbox.Message{DispatchKey: a.key, Namespace: s.Tenants[a.tenant].Name, TaskQueue: a.queue, Priority: a.priority}
}
