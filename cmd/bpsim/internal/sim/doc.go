// Package sim runs bpsim's noisy-neighbour simulation: a cluster of
// dispatcher nodes draining one durable outbox, the same seeded workload
// under three claim policies (unscoped, per-route round-robin and
// backpressure), with per-tenant statistics, charts, a JSON report and an
// exactly-once audit read back from the database.
//
// Time is simulated. The run advances in discrete ticks; in one tick the
// workers settle the rows whose service time is over, the producers enqueue
// the tick's arrivals, and every node makes one sweep. The stores read the
// simulated clock through their Options.Now, so every timestamp in the
// database, and every wait the report shows, is simulated time: a run is
// reproducible from its scenario and seed and takes as long as the database
// work, not as long as the simulated span.
package sim
